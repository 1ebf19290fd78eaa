"""Synthesise speech through the ``tts`` ensemble with tritonclient, over HTTP or gRPC.

Example::

    from triton_tts.client import TTSClient

    with TTSClient("localhost:8001", protocol="grpc") as tts:
        result = tts.synthesize("Hello there.", speed=1.1)
        result.write_wav("hello.wav")  # at the sample rate the server reported
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Literal

import numpy as np
import numpy.typing as npt
import soundfile as sf
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

Protocol = Literal["http", "grpc"]
DEFAULT_URLS: dict[str, str] = {"http": "localhost:8000", "grpc": "localhost:8001"}
DEFAULT_MODEL = "tts"
DEFAULT_TIMEOUT_S = 120.0


class TTSError(RuntimeError):
    """Anything that kept a synthesis from completing."""


class ServerUnavailable(TTSError):
    """The server could not be reached, or the model is not ready."""


class RequestRejected(TTSError):
    """The server refused this request (bad input); the message is the server's."""


@dataclass(frozen=True)
class SynthesisOptions:
    """Optional inputs of the ``tts`` model; None leaves the input out (server default)."""

    speed: float | None = None
    speaker_id: int | None = None
    noise_scale: float | None = None
    noise_w: float | None = None
    voice: str | None = None


@dataclass(frozen=True)
class SynthesisResult:
    audio: npt.NDArray[np.float32]  # float32 samples in [-1, 1], mono
    sample_rate: int

    @property
    def duration_s(self) -> float:
        return len(self.audio) / self.sample_rate

    def write_wav(self, path: str | Path, subtype: str = "PCM_16") -> Path:
        """Write a WAV that any player opens: 16-bit PCM by default, 'FLOAT' for float32."""
        sf.write(str(path), self.audio, self.sample_rate, subtype=subtype, format="WAV")
        return Path(path)


def _rejected_or_unavailable(err: InferenceServerException, url: str) -> TTSError:
    status = str(err.status() or "")
    message = err.message() or str(err)
    if "unknown model" in message.lower() or "is not ready" in message.lower():
        return ServerUnavailable(f"{url} does not serve a ready model: {message}")
    if status in ("400", "StatusCode.INVALID_ARGUMENT"):
        return RequestRejected(message)
    if status in ("StatusCode.UNAVAILABLE", "503") or "failed to connect" in message.lower():
        return ServerUnavailable(f"cannot reach {url}: {message}")
    return TTSError(f"{message} (status {status})" if status else message)


class TTSClient:
    def __init__(
        self,
        url: str | None = None,
        protocol: Protocol = "http",
        model: str = DEFAULT_MODEL,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        if protocol not in DEFAULT_URLS:
            raise ValueError(f"protocol must be 'http' or 'grpc', not {protocol!r}")
        self.protocol = protocol
        self.url = url or DEFAULT_URLS[protocol]
        self.model = model
        self.timeout_s = timeout_s
        self._lib: Any = httpclient if protocol == "http" else grpcclient
        if protocol == "http":
            self._client: Any = httpclient.InferenceServerClient(
                self.url, connection_timeout=timeout_s, network_timeout=timeout_s
            )
        else:
            self._client = grpcclient.InferenceServerClient(self.url)

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> TTSClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def is_ready(self) -> bool:
        try:
            return bool(self._client.is_model_ready(self.model))
        except InferenceServerException:
            return False
        except Exception:  # connection refused and friends
            return False

    def _input(self, name: str, value: npt.NDArray[Any], dtype: str) -> Any:
        tensor = self._lib.InferInput(name, list(value.shape), dtype)
        tensor.set_data_from_numpy(value)
        return tensor

    def build_inputs(self, text: str | bytes, options: SynthesisOptions) -> list[Any]:
        raw = text.encode("utf-8") if isinstance(text, str) else text
        inputs = [self._input("TEXT", np.array([[raw]], dtype=np.object_), "BYTES")]
        if options.voice:
            voice = np.array([[options.voice.encode("utf-8")]], np.object_)
            inputs.append(self._input("VOICE", voice, "BYTES"))
        for name, value, dtype, np_type in (
            ("SPEED", options.speed, "FP32", np.float32),
            ("SPEAKER_ID", options.speaker_id, "INT64", np.int64),
            ("NOISE_SCALE", options.noise_scale, "FP32", np.float32),
            ("NOISE_W", options.noise_w, "FP32", np.float32),
        ):
            if value is not None:
                inputs.append(self._input(name, np.array([[value]], dtype=np_type), dtype))
        return inputs

    def synthesize(
        self,
        text: str | bytes,
        speed: float | None = None,
        speaker_id: int | None = None,
        noise_scale: float | None = None,
        noise_w: float | None = None,
        voice: str | None = None,
    ) -> SynthesisResult:
        """One text -> audio; unset options take the server's defaults."""
        options = SynthesisOptions(speed, speaker_id, noise_scale, noise_w, voice)
        inputs = self.build_inputs(text, options)
        outputs = [self._lib.InferRequestedOutput(n) for n in ("AUDIO", "SAMPLE_RATE")]
        try:
            if self.protocol == "http":
                result = self._client.infer(self.model, inputs, outputs=outputs)
            else:
                result = self._client.infer(
                    self.model, inputs, outputs=outputs, client_timeout=self.timeout_s
                )
        except InferenceServerException as err:
            raise _rejected_or_unavailable(err, self.url) from None
        except ConnectionError as err:
            raise ServerUnavailable(f"cannot reach {self.url}: {err}") from None
        audio = np.asarray(result.as_numpy("AUDIO"), dtype=np.float32).reshape(-1)
        rate = int(np.asarray(result.as_numpy("SAMPLE_RATE")).reshape(-1)[0])
        return SynthesisResult(audio=audio, sample_rate=rate)
