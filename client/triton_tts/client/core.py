"""What the sync and asyncio clients share: everything about a call but its I/O.

The request (tensors, outputs, parameters, headers, timeouts per protocol), what an
answer means (audio, chunks, voices), whose a failure is (triton_tts.client.errors) and
when to try again (triton_tts.client.retry) are written once, here. TTSClient and
AsyncTTSClient only make the calls, blocking or awaited, and sleep their own way.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import numpy.typing as npt

from triton_tts.client.auth import Protocol, auth_headers, env_api_key
from triton_tts.client.datatypes import AudioChunk, SynthesisOptions, SynthesisResult, WordTime
from triton_tts.client.errors import TTSError, _server_errors
from triton_tts.client.retry import DEFAULT_RETRY, Retries, RetryPolicy
from triton_tts.client.voices import XTTS_KIND, VoiceInfo

DEFAULT_URLS: dict[str, str] = {"http": "localhost:8000", "grpc": "localhost:8001"}
DEFAULT_MODEL = "tts"
STREAM_MODEL = "tts_stream"
DEFAULT_TIMEOUT_S = 300.0
OUTPUTS = ("AUDIO", "SAMPLE_RATE")
STREAM_OUTPUTS = ("AUDIO", "SAMPLE_RATE", "CHUNK_INDEX", "IS_LAST")
WORD_OUTPUTS = ("WORDS", "WORD_TIMES")  # asked for only with timestamps (older servers lack them)

# After a stream's request is refused, how long its final flag may take to follow. A stream
# is closed only after that flag: Triton 2.51's gRPC frontend can leave a request's state
# behind when a cancellation races the request's final response, and the model it names
# then never unloads (the server's exit times out). A stream the caller leaves early is
# still cancelled: that is the caller's intent, and the race is the server's to lose.
STREAM_END_WAIT_S = 5.0


def _string_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """``parameters { key: "k" value { string_value: "v" } }`` -> {"k": "v"} (JSON form).
    The client's own reading: it depends on nothing of the server's package."""
    return {key: value["string_value"] for key, value in model_config.get("parameters", {}).items()}


def _input(lib: Any, name: str, value: npt.NDArray[Any], dtype: str) -> Any:
    """One request tensor for ``lib`` (tritonclient.http/grpc, or their aio variants)."""
    t = lib.InferInput(name, list(value.shape), dtype)
    t.set_data_from_numpy(value)
    return t


def build_inputs(lib: Any, text: str | bytes, options: SynthesisOptions) -> list[Any]:
    """The request tensors for ``lib`` (tritonclient.http/grpc, or their aio variants)."""

    def tensor(name: str, value: npt.NDArray[Any], dtype: str) -> Any:
        return _input(lib, name, value, dtype)

    raw = text.encode("utf-8") if isinstance(text, str) else text
    inputs = [tensor("TEXT", np.array([[raw]], dtype=np.object_), "BYTES")]
    if options.voice:
        inputs.append(tensor("VOICE", np.array([[options.voice.encode("utf-8")]], np.object_), "BYTES"))
    if options.text_format:
        inputs.append(tensor("TEXT_FORMAT", np.array([[options.text_format.encode()]], np.object_), "BYTES"))
    if options.language:
        inputs.append(tensor("LANGUAGE", np.array([[options.language.encode("utf-8")]], np.object_), "BYTES"))
    if options.voice_mix:
        inputs.append(
            tensor("VOICE_MIX", np.array([[options.voice_mix.encode("utf-8")]], np.object_), "BYTES")
        )
    if options.timestamps:
        inputs.append(tensor("TIMESTAMPS", np.array([[True]], dtype=np.bool_), "BOOL"))
    for name, value, dtype, np_type in (
        ("SPEED", options.speed, "FP32", np.float32),
        ("SPEAKER_ID", options.speaker_id, "INT64", np.int64),
        ("NOISE_SCALE", options.noise_scale, "FP32", np.float32),
        ("NOISE_W", options.noise_w, "FP32", np.float32),
    ):
        if value is not None:
            inputs.append(tensor(name, np.array([[value]], dtype=np_type), dtype))
    if options.lexicon is not None:
        entries = json.dumps(dict(options.lexicon), ensure_ascii=False).encode("utf-8")
        inputs.append(tensor("LEXICON", np.array([[entries]], dtype=np.object_), "BYTES"))
    inputs.extend(_clip_inputs(lib, options))
    return inputs


def _clip_inputs(lib: Any, options: SynthesisOptions) -> list[Any]:
    """REFERENCE_AUDIO [1, samples] and REFERENCE_SAMPLE_RATE [1, 1]: a clip needs its rate."""
    if options.reference_audio is None:
        if options.reference_sample_rate is not None:
            raise ValueError("reference_sample_rate is the rate of reference_audio: give the clip too")
        return []
    clip = np.asarray(options.reference_audio, dtype=np.float32)
    if clip.ndim != 1:
        raise ValueError(f"reference_audio must be mono (one dimension), got shape {clip.shape}")
    if options.reference_sample_rate is None:
        raise ValueError("reference_audio needs reference_sample_rate (Hz)")
    return [
        _input(lib, "REFERENCE_AUDIO", clip[None], "FP32"),
        _input(
            lib, "REFERENCE_SAMPLE_RATE", np.array([[int(options.reference_sample_rate)]], np.int32), "INT32"
        ),
    ]


def _words(result: Any) -> tuple[WordTime, ...]:
    """An answer's WORDS [1, n] and WORD_TIMES [1, n, 2]; () when it has none."""
    words = result.as_numpy("WORDS")
    if words is None:
        return ()
    times = np.asarray(result.as_numpy("WORD_TIMES"), dtype=np.float64).reshape(-1, 2)
    return tuple(
        WordTime(w.decode("utf-8") if isinstance(w, bytes) else str(w), float(start), float(end))
        for w, (start, end) in zip(words.reshape(-1), times, strict=True)
    )


def _result(result: Any) -> SynthesisResult:
    audio = np.asarray(result.as_numpy("AUDIO"), dtype=np.float32).reshape(-1)
    return SynthesisResult(
        audio=audio,
        sample_rate=int(np.asarray(result.as_numpy("SAMPLE_RATE")).reshape(-1)[0]),
        words=_words(result),
    )


def _chunk(result: Any) -> AudioChunk:
    return AudioChunk(
        index=int(result.as_numpy("CHUNK_INDEX").reshape(-1)[0]),
        audio=np.asarray(result.as_numpy("AUDIO"), dtype=np.float32).reshape(-1),
        sample_rate=int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0]),
        is_last=bool(result.as_numpy("IS_LAST").reshape(-1)[0]),
        words=_words(result),
    )


def _voices(config: dict[str, Any]) -> list[VoiceInfo]:
    """Every voice the ``tts`` model's config names, the default first."""
    return VoiceInfo.list_from_json(_string_parameters(config)["voices"])


def _needs_grpc(protocol: str) -> None:
    if protocol != "grpc":
        raise ValueError("streaming needs gRPC: HTTP cannot carry Triton's decoupled responses")


class ClientCore:
    """Where and how a client talks to the server, and each call's request, reading and
    retries; a subclass sets ``_lib`` and ``_client`` (tritonclient's, blocking or aio)."""

    _lib: Any  # tritonclient.http or .grpc, or their aio variants: the tensors' classes
    # What the transport raises when no server was reached (beyond tritonclient's errors):
    # a refused or reset connection, a host name that does not resolve.
    network: tuple[type[Exception], ...] = (ConnectionError, socket.gaierror)

    def __init__(
        self,
        url: str | None,
        protocol: Protocol,
        model: str = DEFAULT_MODEL,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        stream_model: str = STREAM_MODEL,
        retry: RetryPolicy = DEFAULT_RETRY,
        api_key: str | None = None,
    ) -> None:
        """``api_key``: sent with every call (default: the environment's TRITON_TTS_API_KEY)."""
        if protocol not in DEFAULT_URLS:
            raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
        self.protocol = protocol
        self.url = url or DEFAULT_URLS[protocol]
        self.model = model
        self.stream_model = stream_model
        self.timeout_s = timeout_s
        self.retry = retry
        self.headers = auth_headers(api_key or env_api_key(), protocol)

    def _errors(self) -> AbstractContextManager[None]:
        """Inside the block, tritonclient's and the transport's errors become the client's."""
        return _server_errors(self.url, self.network)

    def _retries(self) -> Retries:
        """One call's retries of busy refusals, its deadline counted from now."""
        return Retries(self.retry, self.timeout_s, self.url)

    def _config_request(self) -> dict[str, Any]:
        """``get_model_config``'s arguments, but the model: gRPC's answer as JSON, as HTTP's is."""
        return {"headers": self.headers, **({"as_json": True} if self.protocol == "grpc" else {})}

    def _voices_of(self, answer: Any) -> list[VoiceInfo]:
        """The voices in ``get_model_config``'s answer (gRPC's wraps the config in "config")."""
        config = answer if self.protocol == "http" else answer["config"]
        if "voices" not in _string_parameters(config):
            raise TTSError(f"model {self.model!r} at {self.url} names no voices: it is not a tts model")
        return _voices(config)

    def _outputs(self, names: tuple[str, ...], options: SynthesisOptions) -> list[Any]:
        words = WORD_OUTPUTS if options.timestamps else ()
        return [self._lib.InferRequestedOutput(n) for n in (*names, *words)]

    def _infer_request(
        self, text: str | bytes, options: SynthesisOptions, deadline: float | None = None
    ) -> dict[str, Any]:
        """``infer``'s arguments, but the model. gRPC's call is bounded by ``client_timeout``;
        HTTP's by its session's timeouts. ``deadline`` (a time.monotonic() value: the call's,
        retries included) goes to the server as Triton's request ``timeout`` (microseconds),
        so that it refuses at once a text it could not start in time, and stops one that
        outlives it."""
        request: dict[str, Any] = {
            "inputs": build_inputs(self._lib, text, options),
            "outputs": self._outputs(OUTPUTS, options),
            "parameters": options.parameters,
            "headers": self.headers,
        }
        if deadline is not None:
            request["timeout"] = max(1, int((deadline - time.monotonic()) * 1e6))
        if self.protocol == "grpc":
            request["client_timeout"] = self.timeout_s
        return request

    def _speaker_request(
        self, voice: VoiceInfo, name: str, audio: npt.NDArray[Any], sample_rate: int
    ) -> dict[str, Any]:
        """The request that stores a clip as a named speaker of an XTTS voice: to the
        voice's own model, STORE_SPEAKER with SPEAKER, REFERENCE_AUDIO (mono) and its rate."""
        if voice.kind != XTTS_KIND:
            raise ValueError(
                f"voice {voice.name!r} does not clone voices (only XTTS voices have stored speakers)"
            )
        clip = np.asarray(audio, dtype=np.float32)
        if clip.ndim != 1:
            raise ValueError(f"the clip must be mono (one dimension), got shape {clip.shape}")
        lib = self._lib
        return {
            "model_name": voice.model,
            "inputs": [
                _input(lib, "STORE_SPEAKER", np.array([True], dtype=np.bool_), "BOOL"),
                _input(lib, "SPEAKER", np.array([name.encode("utf-8")], dtype=np.object_), "BYTES"),
                _input(lib, "REFERENCE_AUDIO", clip, "FP32"),
                _input(lib, "REFERENCE_SAMPLE_RATE", np.array([int(sample_rate)], dtype=np.int32), "INT32"),
            ],
        }

    def _stream_request(self, text: str | bytes, options: SynthesisOptions) -> dict[str, Any]:
        """The one request of a stream (gRPC), as ``stream_infer`` takes it and
        ``async_stream_infer`` by keyword."""
        return {
            "model_name": self.stream_model,
            "inputs": build_inputs(self._lib, text, options),
            "outputs": self._outputs(STREAM_OUTPUTS, options),
            **({"parameters": options.parameters} if options.parameters else {}),
        }
