"""Tacotron2's acoustic stage: encoder, the autoregressive decoder loop, postnet.

The decoder emits r frames per step until its stop token fires, so its length is only
known by running it; the loop therefore runs here, in Python, around three ONNX files
(written by ``export_scripts/triton_tts/export/coqui/tacotron2.py``; their tensors are described there).

Batching: the decoder step is matrix-vector work on ~20M weights at batch 1, so stepping
the whole batch together reads the weights once per step for every item. An item whose
stop token fired leaves the batch (its rows are dropped from every state), and the encoder
tensors are cut to the longest remaining item, so finished items cost nothing; cutting is
exact because padded positions carry zero attention and are masked.

Coqui's loop (``Decoder.inference``) keeps the step that fired the stop token, and does not
check the stop token at the first step (its check is ``t > batch // 2`` with batch 1); the
loop here does the same, so frame counts match Coqui's. An item that reaches
``max_decoder_steps`` without stopping keeps what it has (a warning, not an error), like
Coqui's guard.

Latent width: the mel goes to the vocoder at its own frame count, unless the config sets
``pad_latent_frames`` (the GPU named configs do: their vocoder runs natively and batches
only equal shapes, and a TensorRT profile has a minimum width). Then the frame axis is
zero-padded to that multiple, as the single-graph acoustic models pad inside their graph;
FRAME_COUNT stays the true count (Coqui vocoders are padding-masked, postprocess trims).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from triton_tts.contract.voice import Voice
from triton_tts.runtime.batching import pad_stack
from triton_tts.runtime.onnx_session import cpu_session
from triton_tts.runtime.stages import FloatArray, IntArray, RunFailed, StageSettings

log = logging.getLogger(__name__)

ENCODER_FILE = "tacotron2_encoder.onnx"
DECODER_STEP_FILE = "tacotron2_decoder_step.onnx"
POSTNET_FILE = "tacotron2_postnet.onnx"
ONNX_FILES = (ENCODER_FILE, DECODER_STEP_FILE, POSTNET_FILE)
# Decoder-step inputs fixed for a run (the encoder's outputs); every other step input
# except MEMORY is a state, fed back from the step's "NEW_" + name output.
STATIC_INPUTS = ("ENCODER_OUTPUTS", "PROCESSED_INPUTS", "MASK")
ATTENTION = "ATTENTION_WEIGHTS"  # the state that is each step's alignment over the ids
PAD_PARAMETER = "pad_latent_frames"  # config parameter: the latent's frame multiple


class Tacotron2Runner:
    """ids -> (postnet mel [n_mels, frames + 2 * edge_frames], that frame count) per item;
    with ``frame_multiple`` > 1 the mel is zero-padded to a multiple of it, the count kept."""

    def __init__(
        self,
        folder: Path,
        threads: int,
        max_decoder_steps: int,
        edge_frames: int,
        stop_threshold: float = 0.5,
        frame_multiple: int = 1,
    ) -> None:
        if frame_multiple < 1:
            raise ValueError(f"tacotron2: {PAD_PARAMETER} must be a positive integer, not {frame_multiple}")
        folder = Path(folder)
        self.encoder = cpu_session(folder / ENCODER_FILE, threads)
        self.step = cpu_session(folder / DECODER_STEP_FILE, threads)
        self.postnet = cpu_session(folder / POSTNET_FILE, threads)
        self.max_decoder_steps = max_decoder_steps
        self.edge_frames = edge_frames
        self.stop_threshold = stop_threshold
        self.frame_multiple = frame_multiple
        self.encoder_inputs = [i.name for i in self.encoder.get_inputs()]
        self.uses_speaker = "SPEAKER_ID" in self.encoder_inputs
        step_inputs = self.step.get_inputs()
        self.static = [i.name for i in step_inputs if i.name in STATIC_INPUTS]
        # state name -> width (None: one value per encoder position)
        self.states: dict[str, int | None] = {
            i.name: (i.shape[1] if isinstance(i.shape[1], int) else None)
            for i in step_inputs
            if i.name not in STATIC_INPUTS and i.name != "MEMORY"
        }
        self.n_mels = int(step_inputs[[i.name for i in step_inputs].index("MEMORY")].shape[1])
        self.step_outputs = ["FRAMES", "STOP", *("NEW_" + name for name in self.states)]
        # Each step's attention over the ids: its frames go to the id it attends to most
        # (word timestamps; the standard way durations are read off a Tacotron alignment).
        self.has_durations = ATTENTION in self.states

    @classmethod
    def from_settings(cls, settings: StageSettings, voice: Voice) -> Tacotron2Runner:
        """The runner a Triton acoustic model's config and voice ask for."""
        return cls(
            settings.onnx_path.parent,
            settings.threads,
            voice.max_decoder_steps,
            voice.mel_edge_frames,
            frame_multiple=settings.int_parameter(PAD_PARAMETER, 1),
        )

    def run(
        self,
        ids: Sequence[IntArray],
        scales: Sequence[FloatArray],
        speakers: Sequence[int] | None = None,
    ) -> list[tuple[FloatArray, int] | RunFailed]:
        """(latent, frames) per item: :meth:`run_timed` without the durations."""
        return [r if isinstance(r, RunFailed) else r[:2] for r in self.run_timed(ids, scales, speakers)]

    def run_timed(
        self,
        ids: Sequence[IntArray],
        scales: Sequence[FloatArray],
        speakers: Sequence[int] | None = None,
    ) -> list[tuple[FloatArray, int, FloatArray | None] | RunFailed]:
        """ids: unpadded id rows; speakers: ids (multi-speaker voices; 0 when None). scales:
        taken for :class:`AcousticRunner`'s interface and ignored (Tacotron2 has no noise,
        and its length comes from the stop token, so a length scale has nothing to act on)."""
        del scales
        results: list[Any] = [None] * len(ids)
        group = [i for i, row in enumerate(ids) if len(row) > 0]
        for i in set(range(len(ids))) - set(group):
            results[i] = RunFailed("tacotron2: empty phoneme sequence")
        if not group:
            return results
        try:
            mels = self._mels(
                [ids[i] for i in group], None if speakers is None else [speakers[i] for i in group]
            )
        except Exception as err:  # one failing run must not take the others down
            for i in group:
                results[i] = RunFailed(f"tacotron2 acoustic model failed: {err}")
            return results
        for i, (mel, durations) in zip(group, mels, strict=True):
            latent, frames = self._latent(mel)
            if durations is not None:  # the leading edge frames count in the first id
                durations[0] += self.edge_frames
            results[i] = (latent, frames, durations)
        return results

    def _latent(self, mel: FloatArray) -> tuple[FloatArray, int]:
        """The vocoder's edge frames repeated at both ends, then zeros up to the frame
        multiple; and the frame count without those zeros."""
        edge = self.edge_frames
        if edge:
            mel = np.pad(mel, ((0, 0), (edge, edge)), mode="edge")
        frames = int(mel.shape[-1])
        extra = -frames % self.frame_multiple
        if extra:
            mel = np.pad(mel, ((0, 0), (0, extra)))
        return np.ascontiguousarray(mel, dtype=np.float32), frames

    def iter_run(
        self,
        ids: Sequence[IntArray],
        scales: Sequence[FloatArray],
        speakers: Sequence[int] | None = None,
    ) -> Iterator[tuple[int, tuple[FloatArray, int] | RunFailed]]:
        """:meth:`run` in :class:`AcousticRunner`'s streaming form (the items of one batch
        decode together, so they are done together)."""
        yield from enumerate(self.run(ids, scales, speakers))

    def iter_timed(
        self,
        ids: Sequence[IntArray],
        scales: Sequence[FloatArray],
        speakers: Sequence[int] | None = None,
        styles: Sequence[FloatArray | None] | None = None,  # style voices only: never Tacotron2's
    ) -> Iterator[tuple[int, tuple[FloatArray, int, FloatArray | None] | RunFailed]]:
        """:meth:`run_timed` in :meth:`AcousticRunner.iter_timed`'s form: each item's
        frames per id from its attention (None when the step has no attention state)."""
        yield from enumerate(self.run_timed(ids, scales, speakers))

    def _mels(
        self, ids: Sequence[IntArray], speaker_ids: Sequence[int] | None
    ) -> list[tuple[FloatArray, FloatArray | None]]:
        lengths = np.array([len(row) for row in ids], dtype=np.int64)
        feeds: dict[str, Any] = {
            "PHONEME_IDS": pad_stack([np.asarray(r, dtype=np.int64) for r in ids]),
            "PHONEME_LENGTH": lengths,
        }
        if self.uses_speaker:
            feeds["SPEAKER_ID"] = np.array(speaker_ids or [0] * len(ids), dtype=np.int64)
        static = dict(zip(STATIC_INPUTS, self.encoder.run(list(STATIC_INPUTS), feeds), strict=True))
        frames, durations = self._decode(static, lengths)
        counts = np.array([f.shape[-1] for f in frames], dtype=np.int64)
        post = self.postnet.run(["POSTNET_MEL"], {"MEL": pad_stack(frames), "FRAME_COUNT": counts})[0]
        return [
            (post[row, :, : counts[row]], durations[row] if self.has_durations else None)
            for row in range(len(frames))
        ]

    def _decode(self, static: dict[str, Any], lengths: IntArray) -> tuple[list[FloatArray], list[FloatArray]]:
        """The decoder loop over the batch; each item's frames as [n_mels, steps * r], and
        its frames per id (each step's r frames to the id its attention weighs most)."""
        batch = len(lengths)
        tokens = int(lengths.max())
        states = {
            name: np.zeros((batch, tokens if width is None else width), dtype=np.float32)
            for name, width in self.states.items()
        }
        memory = np.zeros((batch, self.n_mels), dtype=np.float32)
        active = np.arange(batch)  # original row of each row still decoding
        outputs: list[list[FloatArray]] = [[] for _ in range(batch)]
        durations = [np.zeros(int(n), dtype=np.float32) for n in lengths]
        for step in range(self.max_decoder_steps):
            feeds = {"MEMORY": memory, **states, **{name: static[name] for name in self.static}}
            frames, stop, *new_states = self.step.run(self.step_outputs, feeds)
            states = dict(zip(self.states, new_states, strict=True))
            attended = states[ATTENTION].argmax(axis=1) if self.has_durations else None
            for row, item in enumerate(active):
                outputs[item].append(frames[row])
                if attended is not None:
                    durations[item][min(int(attended[row]), int(lengths[item]) - 1)] += frames.shape[1]
            memory = np.ascontiguousarray(frames[:, -1, :])
            # Coqui's batch-1 loop ignores the stop token at the first step
            keep = stop <= self.stop_threshold if step > 0 else np.ones(len(active), dtype=bool)
            if keep.all():
                continue
            active = active[keep]
            if len(active) == 0:
                break
            # drop finished rows; cut the token axis to the longest remaining item (exact:
            # padded positions are masked and carry zero attention)
            tokens = int(lengths[active].max())
            memory = memory[keep]
            states = {
                name: value[keep] if self.states[name] is not None else value[keep, :tokens]
                for name, value in states.items()
            }
            static = {name: value[keep, :tokens] for name, value in static.items()}
        if len(active):
            log.warning(
                "tacotron2: %d item(s) hit max_decoder_steps=%d without a stop token; mel cut there",
                len(active),
                self.max_decoder_steps,
            )
        return [np.concatenate(item, axis=0).T for item in outputs], durations
