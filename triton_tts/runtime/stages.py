"""The ONNX stages as plain Python: what the CPU Triton models run inside ``execute``.

Kept out of the Triton model files so they can be tested and benchmarked without a
server. Each runner takes one ragged batch (a list of per-request arrays), plans runs of
similar length under two caps, pads each run, calls onnxruntime once per run and hands
back per-request results trimmed to their true length.

Why the caps: on a CPU, one padded ONNX run of several latents is slower than one run per
item (cache-bound convolutions; docs/performance.md, "Tuning"), so the CPU default runs
items one by one while Triton still gathers them into one execution
(``max_items_per_run``). The padded size cap (``max_padded``) bounds activation memory
when larger runs are allowed.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.styles import StyleTable
from triton_tts.contract.validation import (
    InvalidRequest,
)
from triton_tts.runtime.batching import pad_stack, plan_sub_batches
from triton_tts.runtime.onnx_session import cpu_session, resolve_threads
from triton_tts.runtime.vocoder_window import WINDOW_FRAMES, measure_context, run_windowed

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
# An acoustic result with its frames per id (None: the graph does not say them).
Timed = tuple[FloatArray, int, FloatArray | None]


@dataclass(frozen=True)
class StageSettings:
    """What a CPU stage's Triton model reads once in ``initialize``."""

    onnx_path: Path
    threads: int
    parameters: dict[str, str]

    @classmethod
    def from_triton_args(cls, args: dict[str, str]) -> StageSettings:
        config = json.loads(args["model_config"])
        params = string_parameters(config)
        instances = sum(int(g.get("count", 1)) for g in config.get("instance_group", [])) or 1
        folder = Path(args["model_repository"]) / args["model_version"]
        return cls(folder / "model.onnx", resolve_threads(params.get("intra_op_threads"), instances), params)

    def int_parameter(self, key: str, default: int | None = None) -> int:
        """A parameter of the config; without ``default`` the renderer always writes it
        (triton_tts/build/model_configs.py), so a config without it is refused at load."""
        value = self.parameters.get(key)
        if value is None:
            if default is None:
                raise ValueError(f"config parameter '{key}' is missing: render the repository again")
            return default
        return int(value)


@dataclass
class RunFailed:
    """A run that raised: every request in it gets this message, the others are unaffected."""

    message: str


RunnerT = TypeVar("RunnerT", bound="_Runner")


class _Runner:
    # onnxruntime's CPU arena keeps the high-water mark of the largest run for good: one
    # long request left the vocoder at its peak RSS for ever. Shrinking the arena after
    # large runs only gives it back, without slowing later short runs; turning the arena
    # off instead cost speed (figures: docs/performance.md, "Memory").
    SHRINK_ABOVE = 1024  # padded length (ids or frames) x items
    # The config parameter that caps a run's padded size (its default: model_configs.BuildOptions).
    PADDED_PARAMETER: str

    def __init__(self, onnx_path: Path, threads: int, max_items_per_run: int, max_padded: int) -> None:
        self.onnx_path = onnx_path
        self.session = cpu_session(onnx_path, threads)
        # read once: add_speakers runs on every execution
        self.takes_speaker = any(i.name == "SPEAKER_ID" for i in self.session.get_inputs())
        self.threads = threads
        self.max_items = max_items_per_run
        self.max_padded = max_padded
        self._shrink = ort.RunOptions()
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")

    @classmethod
    def from_settings(cls: type[RunnerT], settings: StageSettings) -> RunnerT:
        return cls(
            settings.onnx_path,
            settings.threads,
            settings.int_parameter("max_items_per_run"),
            settings.int_parameter(cls.PADDED_PARAMETER),
            **cls.settings_arguments(settings),
        )

    @classmethod
    def settings_arguments(cls, settings: StageSettings) -> dict[str, Any]:
        """What a runner kind reads from its config beyond the common parameters."""
        return {}

    def run_options(self, padded_size: int) -> ort.RunOptions | None:
        return self._shrink if padded_size > self.SHRINK_ABOVE else None

    def add_speakers(
        self, feeds: dict[str, Any], group: Sequence[int], speakers: Sequence[int] | None
    ) -> None:
        """SPEAKER_ID for models that take it (multi-speaker voices); 0 when not given."""
        if self.takes_speaker:
            chosen = [speakers[i] if speakers is not None else 0 for i in group]
            feeds["SPEAKER_ID"] = np.array(chosen, dtype=np.int64)


class AcousticRunner(_Runner):
    PADDED_PARAMETER = "max_padded_phonemes"
    # Its activations grow with frames, ~2-4 per id (x 1/SPEED): without shrinking, a
    # 400-character chunk left each acoustic instance larger for good (docs/performance.md).
    SHRINK_ABOVE = 256

    def run(
        self, ids: Sequence[IntArray], scales: Sequence[FloatArray], speakers: Sequence[int] | None = None
    ) -> list[tuple[FloatArray, int] | RunFailed]:
        """ids: unpadded id rows; scales: [3] rows; speakers: ids (multi-speaker voices)
        -> (LATENT [C, frames], frames) each."""
        return _in_order(self.iter_run(ids, scales, speakers), len(ids))

    def iter_run(
        self, ids: Sequence[IntArray], scales: Sequence[FloatArray], speakers: Sequence[int] | None = None
    ) -> Iterator[tuple[int, tuple[FloatArray, int] | RunFailed]]:
        """(index, result) for each item as soon as its run is done."""
        for i, result in self.iter_timed(ids, scales, speakers):
            yield i, result if isinstance(result, RunFailed) else result[:2]

    @property
    def has_durations(self) -> bool:
        """Whether the graph says its frames per id (DURATIONS: word timestamps)."""
        return any(o.name == "DURATIONS" for o in self.session.get_outputs())

    @functools.cached_property
    def style_table(self) -> StyleTable | None:
        """A style voice's table (``styles.npy`` beside the graph), when the graph takes STYLE:
        the default speaker's rows for items that come without one (calibration, warm-up)."""
        if not any(i.name == "STYLE" for i in self.session.get_inputs()):
            return None
        return StyleTable.load(self.onnx_path.parent)

    def _styles(
        self, group: Sequence[int], ids: Sequence[IntArray], styles: Sequence[FloatArray | None] | None
    ) -> FloatArray:
        table = self.style_table
        assert table is not None
        rows = []
        for i in group:
            given = styles[i] if styles is not None else None
            # the default speaker; framing (one pad at each end) not counted
            rows.append(given if given is not None else table.style({0: 1.0}, len(ids[i]) - 2))
        return np.stack(rows).astype(np.float32)

    def iter_timed(
        self,
        ids: Sequence[IntArray],
        scales: Sequence[FloatArray],
        speakers: Sequence[int] | None = None,
        styles: Sequence[FloatArray | None] | None = None,
    ) -> Iterator[tuple[int, Timed | RunFailed]]:
        """:meth:`iter_run` with each item's frames per id (None when the graph has no
        DURATIONS output). ``styles``: STYLE rows (style voices; None: the default speaker's)."""
        names = ["LATENT", "FRAME_COUNT", *(["DURATIONS"] if self.has_durations else [])]
        for group in plan_sub_batches([len(x) for x in ids], self.max_padded, self.max_items):
            padded = pad_stack([ids[i] for i in group])
            feeds = {
                "PHONEME_IDS": padded,
                "PHONEME_LENGTH": np.array([len(ids[i]) for i in group], dtype=np.int64),
                "SCALES": np.stack([scales[i] for i in group]).astype(np.float32),
            }
            self.add_speakers(feeds, group, speakers)
            if self.style_table is not None:
                feeds["STYLE"] = self._styles(group, ids, styles)
            try:
                outputs = self.session.run(names, feeds, self.run_options(padded.size))
            except Exception as err:  # one failing run must not take the others down
                for i in group:
                    yield i, RunFailed(f"acoustic model failed: {err}")
                continue
            latent, frames = outputs[0], outputs[1]
            for row, i in enumerate(group):
                count = int(frames[row])
                durations = outputs[2][row, : len(ids[i])].astype(np.float32) if len(outputs) > 2 else None
                yield i, (np.ascontiguousarray(latent[row, :, :count]), count, durations)


def unpadded_twin(onnx_path: Path) -> Path:
    """Where a vocoder's mask-free copy lives: ``vocoder.onnx`` -> ``vocoder_unpadded.onnx``
    in a voice folder, ``model.onnx`` -> ``model_unpadded.onnx`` in the repository."""
    return onnx_path.with_name(f"{onnx_path.stem}_unpadded{onnx_path.suffix}")


class VocoderRunner(_Runner):
    """Padding-safe vocoders (Coqui exports) mask every convolution's input to each
    item's length so padded batches are exact; they come with a mask-free copy
    (:func:`unpadded_twin`), which runs of one item use: nothing to mask there, and the
    masks cost time (docs/performance.md, "INT8 vocoder")."""

    PADDED_PARAMETER = "max_padded_frames"

    def __init__(
        self,
        onnx_path: Path,
        threads: int,
        max_items_per_run: int,
        max_padded: int,
        window_frames: int = WINDOW_FRAMES,
        latent_channels: int | None = None,
    ) -> None:
        super().__init__(onnx_path, threads, max_items_per_run, max_padded)
        twin = unpadded_twin(onnx_path)
        self.unpadded = cpu_session(twin, threads) if twin.exists() else None
        # Latents longer than a window run in windows (triton_tts/runtime/vocoder_window.py), when
        # this graph is local enough for that to leave every sample as it was.
        self.window_frames = window_frames
        channels = latent_channels or self.session.get_inputs()[0].shape[1]
        self.channels = channels if isinstance(channels, int) else None  # LATENT's, when fixed
        self.window_context = (
            measure_context(lambda latent: self._run_one(latent, 0), channels)
            if window_frames > 0 and isinstance(channels, int)
            else None
        )
        log.info("vocoder %s: window context %s frames", onnx_path, self.window_context)

    @classmethod
    def settings_arguments(cls, settings: StageSettings) -> dict[str, Any]:
        return {"latent_channels": settings.int_parameter("latent_channels", 0) or None}

    def _run_one(self, latent: FloatArray, speaker: int) -> FloatArray:
        """One item [1, C, frames] -> [1, frames x hop], without padding."""
        feeds: dict[str, Any] = {"LATENT": latent}
        if self.takes_speaker:
            feeds["SPEAKER_ID"] = np.array([speaker], dtype=np.int64)
        session = self.unpadded if self.unpadded is not None else self.session
        waveform: FloatArray = session.run(["WAVEFORM"], feeds)[0]
        return waveform

    def run(
        self, latents: Sequence[FloatArray], speakers: Sequence[int] | None = None
    ) -> list[FloatArray | RunFailed]:
        """latents: [C, frames] each -> waveform [frames * hop] each."""
        return _in_order(self.iter_run(latents, speakers), len(latents))

    def iter_run(
        self, latents: Sequence[FloatArray], speakers: Sequence[int] | None = None
    ) -> Iterator[tuple[int, FloatArray | RunFailed]]:
        """(index, waveform) for each item as soon as its run is done."""
        context = self.window_context
        long = {i for i, x in enumerate(latents) if context is not None and x.shape[-1] > self.window_frames}
        for i in sorted(long):
            assert context is not None
            run = functools.partial(self._run_one, speaker=speakers[i] if speakers is not None else 0)
            try:
                yield i, run_windowed(run, latents[i], self.window_frames, context)
            except Exception as err:
                yield i, RunFailed(f"vocoder failed: {err}")
        whole = [i for i in range(len(latents)) if i not in long]
        for planned in plan_sub_batches(
            [latents[i].shape[-1] for i in whole], self.max_padded, self.max_items
        ):
            group = [whole[j] for j in planned]
            padded = pad_stack([latents[i] for i in group])
            feeds = {"LATENT": padded}
            self.add_speakers(feeds, group, speakers)
            try:
                frames = padded.shape[0] * padded.shape[-1]
                session = self.unpadded if self.unpadded is not None and len(group) == 1 else self.session
                waveform = session.run(["WAVEFORM"], feeds, self.run_options(frames))[0]
            except Exception as err:
                for i in group:
                    yield i, RunFailed(f"vocoder failed: {err}")
                continue
            hop = waveform.shape[-1] // max(latents[i].shape[-1] for i in group)
            for row, i in enumerate(group):
                yield i, np.ascontiguousarray(waveform[row, : latents[i].shape[-1] * hop])


ResultT = TypeVar("ResultT")
ItemT = TypeVar("ItemT")


def checked(
    requests: Sequence[Any], check: Callable[[Any], ItemT], refuse: Callable[[Any, str, bool], None]
) -> tuple[list[Any], list[ItemT]]:
    """The requests whose inputs pass ``check`` (request -> its item), with their items;
    each other request is answered at once by ``refuse(request, message, invalid)``:
    ``invalid`` for an InvalidRequest (the caller's fault), else an unexpected failure
    of the check. Its neighbours in the batch still run."""
    kept: list[Any] = []
    items: list[ItemT] = []
    for request in requests:
        try:
            items.append(check(request))
        except InvalidRequest as err:
            refuse(request, str(err), True)
            continue
        except Exception as err:  # a check that broke is this request's failure alone
            refuse(request, f"could not read the request: {err}", False)
            continue
        kept.append(request)
    return kept, items


def _in_order(results: Iterator[tuple[int, ResultT]], count: int) -> list[ResultT]:
    ordered: list[Any] = [None] * count
    for index, result in results:
        ordered[index] = result
    return ordered


def refusal(errors: Any, request_id: Callable[[Any], str], final: int) -> Callable[[Any, str, bool], None]:
    """What :func:`checked` refuses with, for a model that answers through response
    senders: the request's error (``errors``: its triton_tts.contract.errors.RequestErrors;
    INVALID_ARG for the caller's fault, else INTERNAL) as its one response, ``final`` as
    in :func:`send_as_done`."""

    def refuse(request: Any, message: str, invalid: bool) -> None:
        rid = request_id(request)
        response = errors.invalid(rid, message) if invalid else errors.response(rid, message)
        try:
            request.get_response_sender().send(response, flags=final)
        except Exception as err:  # its client went away: nothing to answer
            log.warning("could not answer refused request %s: %s", rid, err)

    return refuse


def send_as_done(
    senders: Sequence[Any], results: Iterator[tuple[int, Any]], respond: Any, failed: Any, final: int
) -> None:
    """Answer each request the moment its item is done (a non-decoupled Python model may
    send its one response through the request's response sender and return None), so a
    short request in a batch does not wait for the batch's longest. ``respond(result)``
    and ``failed(index, message)`` build the responses (``index``: the request's place in
    the batch); ``final`` is Triton's TRITONSERVER_RESPONSE_COMPLETE_FINAL flag. One
    request's failed send (e.g. its client went away) does not touch the others; if the
    runner itself breaks, every request not yet answered gets the error, so none is left
    hanging."""

    def send(index: int, response: Any) -> None:
        try:
            senders[index].send(response, flags=final)
        except Exception as err:  # this request's sender is unusable; the others are fine
            log.warning("could not answer request %d of a batch: %s", index, err)

    unanswered = set(range(len(senders)))
    try:
        for index, result in results:
            send(index, failed(index, result.message) if isinstance(result, RunFailed) else respond(result))
            unanswered.discard(index)
    except Exception as err:  # every request must get its one response
        for index in sorted(unanswered):
            send(index, failed(index, f"internal error: {err}"))
