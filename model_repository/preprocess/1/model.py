"""Text -> the voice's ids, by the front-end of its language (one espeak pass per batch).

Per request: read and check TEXT and the options (triton_tts.runtime.request_options), normalise
(numbers, dates, units...; skipped when NORMALIZE is false, as for the chunks of a text
``tts`` / ``tts_stream`` normalised already), read it with the voice's front-end
(triton_tts/text/reader.py: espeak-ng phonemes, or pinyin for Mandarin), map to the
voice's ids, pad to a length bucket (so native GPU backends can batch different lengths),
and turn SPEED / NOISE_* into the acoustic model's SCALES row. A chunk over the voice's
budget (triton_tts/runtime/limits.py: phoneme ids, predicted frames) is refused, so no accepted
request can pass a TensorRT profile. A bad request gets its own INVALID_ARG error, logged
with its id (triton_tts.contract.errors); its batch neighbours are unaffected.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import triton_python_backend_utils as pb_utils

from triton_tts.contract.config_parameters import string_parameters
from triton_tts.contract.errors import RequestErrors, request_id
from triton_tts.contract.styles import STYLES_FILE, StyleTable
from triton_tts.contract.validation import MAX_TEXT_CHARS, InvalidRequest, check_timestamps, nothing_to_say
from triton_tts.contract.voice import Voice
from triton_tts.runtime.batching import bucket_length
from triton_tts.runtime.internal import Gate
from triton_tts.runtime.limits import ChunkLimits
from triton_tts.runtime.request_options import read_options, read_text, voice_mix
from triton_tts.text.marks import MARKS
from triton_tts.text.reader import Reading, TextReader


class _Accepted(NamedTuple):
    position: int  # in the batch
    request_id: str
    scales: npt.NDArray[np.float32]  # (noise_scale, length_scale, noise_w)
    speaker: int
    speed: float
    # TIMESTAMPS: the written words, each with the range of spoken words it became
    groups: list[tuple[str, range]] | None = None
    # Style voices: speaker id -> weight (one speaker at 1, or VOICE_MIX's), and the
    # espeak-ng language of the first speaker named
    weights: dict[int, float] | None = None
    language: str = ""


class TritonPythonModel:
    def initialize(self, args: dict[str, str]) -> None:
        config = json.loads(args["model_config"])
        params = string_parameters(config)
        folder = Path(args["model_repository"]) / args["model_version"]
        self.voice = Voice.load(folder)
        self.voices = {self.voice.name: self.voice.num_speakers}
        self.reader = TextReader(self.voice)
        # Speakers of another language (Kokoro's British ones) are read by their own reader.
        self.readers = {
            language: TextReader(replace(self.voice, phonemizer_language=language))
            for language in set(self.voice.speaker_languages.values()) - {self.voice.phonemizer_language}
        }
        self.readers[self.voice.phonemizer_language] = self.reader
        # A style voice (Kokoro): each request's STYLE row, from its speaker or VOICE_MIX
        self.styles = StyleTable.load(folder) if (folder / STYLES_FILE).exists() else None
        self.pad_id = self.voice.padding_id
        self.limits = ChunkLimits.from_json(params["chunk_limits"])
        self.errors = RequestErrors(args["model_name"])
        self.gate = Gate(args)  # the server's own chunks only (triton_tts/runtime/internal.py)
        # Word timestamps: this voice's configs carry them (its graph says its durations).
        self.timed = any(o["name"] == "WORD_INDEX" for o in config.get("output", []))
        pb_utils.Logger.log_info(
            f"preprocess: voice '{self.voice.name}', language '{self.voice.phonemizer_language}', "
            f"tokens '{self.voice.tokens}'"
        )

    def _read(self, request: Any, index: int, rid: str) -> tuple[str, _Accepted]:
        self.gate.check(request)
        # Pronunciations marked by tts/tts_stream (the only callers: preprocess is internal)
        text = read_text(request, MAX_TEXT_CHARS, keep=MARKS)
        options = read_options(request, self.voices)
        v = self.voice
        noise = v.noise_scale if options.noise_scale is None else options.noise_scale
        noise_w = v.noise_w if options.noise_w is None else options.noise_w
        speed = options.speed or 1.0
        scales = np.array([noise, v.length_scale / speed, noise_w], dtype=np.float32)
        spoken = self.reader.normalize(text) if options.normalize else text
        self.reader.check(spoken)  # its pronunciations: refused alone, not with its batch
        groups = None
        if options.timestamps:
            check_timestamps(v.name, self.timed)
            groups = self.reader.word_groups(text, spoken)
        speaker = options.speaker_id or 0
        weights = voice_mix(options, v.speakers, self.styles is not None, v.name) or {speaker: 1.0}
        language = v.speaker_language(next(iter(weights)))
        return spoken, _Accepted(index, rid, scales, speaker, speed, groups, weights, language)

    def execute(self, requests: list[Any]) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        texts: list[str] = []
        accepted: list[_Accepted] = []
        for i, request in enumerate(requests):
            rid = request_id(request)
            try:
                text, item = self._read(request, i, rid)
            except InvalidRequest as err:
                responses[i] = self.errors.invalid(rid, str(err))
                continue
            except Exception as err:  # a request that broke its reading fails alone, not its batch
                responses[i] = self.errors.response(rid, f"could not read the request: {err}")
                continue
            texts.append(text)
            accepted.append(item)
        readings = self._read_all(texts, accepted)
        for item, reading in zip(accepted, readings, strict=True):
            try:
                responses[item.position] = self._ids_response(item, reading)
            except InvalidRequest as err:
                responses[item.position] = self.errors.invalid(item.request_id, str(err))
        return responses

    def _read_all(self, texts: list[str], accepted: list[_Accepted]) -> list[Reading]:
        """Each text read by its speaker's language (one espeak pass per language)."""
        readings: list[Reading | None] = [None] * len(texts)
        for language, reader in self.readers.items():
            mine = [
                i
                for i, item in enumerate(accepted)
                if (item.language or self.voice.phonemizer_language) == language
            ]
            if not mine:
                continue
            owned = [accepted[i].groups is not None for i in mine]
            for i, reading in zip(mine, reader.read([texts[i] for i in mine], owned), strict=True):
                readings[i] = reading
        return [r for r in readings if r is not None]

    def _style(self, item: _Accepted, ids: int) -> list[Any]:
        """STYLE (style voices): the row for the text's tokens, framing not counted."""
        if self.styles is None:
            return []
        tokens = ids - len(self.voice.bos or []) - len(self.voice.eos or [])
        style = self.styles.style(item.weights or {item.speaker: 1.0}, tokens)
        return [pb_utils.Tensor("STYLE", style[None, :])]

    def _ids_response(self, item: _Accepted, reading: Reading) -> Any:
        ids = reading.ids
        if not reading.speaks:
            raise nothing_to_say()
        refusal = self.limits.refusal(len(ids), item.speed, float(item.scales[2]))
        if refusal:
            raise InvalidRequest(refusal)
        # Padded to a length bucket so that native GPU backends batch different lengths.
        padded = np.full(bucket_length(len(ids)), self.pad_id, np.int64)
        padded[: len(ids)] = ids
        words = self._word_tensors(item, reading) if self.timed else []
        return pb_utils.InferenceResponse(
            output_tensors=[
                *words,
                # Every tensor carries the batch axis of its one-item request.
                pb_utils.Tensor("PHONEME_IDS", padded[None, :]),
                pb_utils.Tensor("PHONEME_LENGTH", np.array([[len(ids)]], dtype=np.int64)),
                pb_utils.Tensor("SCALES", item.scales[None, :]),
                pb_utils.Tensor("SAMPLE_RATE", np.array([[self.voice.sample_rate]], np.int32)),
                pb_utils.Tensor("SPEAKER_ID", np.array([[item.speaker]], np.int64)),
                *self._style(item, len(ids)),
            ]
        )

    def _word_tensors(self, item: _Accepted, reading: Reading) -> list[Any]:
        """WORDS (as written) and WORD_INDEX (each id's word; -1 for none), empty unless
        TIMESTAMPS. Written words that no id says (a lone dash) are left out."""
        words: list[str] = []
        index = np.zeros(0, dtype=np.int32)
        if item.groups is not None and reading.owners is not None:
            group_of = np.full(max((g.stop for _, g in item.groups), default=0) + 1, -1, np.int32)
            for number, (_, span) in enumerate(item.groups):
                group_of[span.start : span.stop] = number
            owners = np.asarray(reading.owners, dtype=np.int64)
            raw = np.where(owners >= 0, group_of[np.clip(owners, 0, group_of.size - 1)], -1)
            said = np.unique(raw[raw >= 0])  # groups some id says, in order
            renumber = np.full(len(item.groups), -1, np.int32)
            renumber[said] = np.arange(said.size, dtype=np.int32)
            index = np.where(raw >= 0, renumber[np.clip(raw, 0, None)], -1).astype(np.int32)
            words = [item.groups[g][0] for g in said]
        return [
            pb_utils.Tensor("WORDS", np.array([[w.encode("utf-8") for w in words]], dtype=np.object_)),
            pb_utils.Tensor("WORD_INDEX", index[None, :]),
        ]
