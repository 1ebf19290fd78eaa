"""A stand-in for Triton's ``triton_python_backend_utils``, to run the repository's Python
models in this process: what they use of it (tensors, responses, errors, the logger,
metric families, requests and their response senders, BLS requests answered by a function
the caller gives). Used where no server can play the part: the native batcher's checks
(tests/test_native_configs.py) and the chunk walk's count (benchmarks/chunk_walk.py).
"""

from __future__ import annotations

import json
import logging
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import numpy.typing as npt

log = logging.getLogger(__name__)

PB_UTILS = "triton_python_backend_utils"
# Modules that bind it at module level, imported afresh under the stand-in.
BINDS_PB_UTILS = (
    "triton_tts.runtime.request_options",
    "triton_tts.runtime.metrics",
    "triton_tts.contract.errors",
    "triton_tts.runtime.long_text",
    "triton_tts.runtime.long_text.ending",
    "triton_tts.runtime.long_text.request",
    "triton_tts.runtime.long_text.send",
    "triton_tts.runtime.long_text.deliver",
    "triton_tts.xtts.forward",
)


class Tensor:
    def __init__(self, name: str, value: Any) -> None:
        self._name, self._value = name, np.asarray(value)

    def name(self) -> str:
        return self._name

    def as_numpy(self) -> npt.NDArray[Any]:
        return self._value


class TritonError(Exception):
    UNKNOWN, INTERNAL, NOT_FOUND, INVALID_ARG, UNAVAILABLE, UNSUPPORTED, ALREADY_EXISTS, CANCELLED = range(8)

    def __init__(self, message: str, code: int = INTERNAL) -> None:
        super().__init__(message)
        self._message, self._code = message, code

    def message(self) -> str:
        return self._message

    def code(self) -> int:
        return self._code


class TritonModelException(Exception):
    pass


class InferenceResponse:
    def __init__(self, output_tensors: Sequence[Tensor] = (), error: TritonError | None = None) -> None:
        self.output_tensors = list(output_tensors)
        self.tensors = {t.name(): t.as_numpy() for t in output_tensors}
        self._error = error

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error


class ResponseSender:
    """A request's response sender: what was sent, with its flags."""

    def __init__(self) -> None:
        self.sent: list[tuple[InferenceResponse | None, int]] = []

    @property
    def responses(self) -> list[InferenceResponse]:
        return [response for response, _ in self.sent if response is not None]

    def send(self, response: InferenceResponse | None = None, flags: int = 0) -> None:
        self.sent.append((response, flags))

    def is_cancelled(self) -> bool:
        return False


class Request:
    """A request as a Python model receives it."""

    def __init__(
        self,
        tensors: dict[str, npt.NDArray[Any]],
        request_id: str = "",
        parameters: dict[str, Any] | None = None,
    ) -> None:
        self._inputs = [Tensor(name, value) for name, value in tensors.items()]
        self._id = request_id
        self._parameters = parameters or {}
        self.sender = ResponseSender()

    def inputs(self) -> list[Tensor]:
        return self._inputs

    def get_response_sender(self) -> ResponseSender:
        return self.sender

    def request_id(self) -> str:
        return self._id

    def parameters(self) -> str:
        return json.dumps(self._parameters)

    def timeout(self) -> int:
        return 0

    def is_cancelled(self) -> bool:
        return False


class Logger:
    @staticmethod
    def log_info(message: str) -> None:
        log.info("%s", message)

    @staticmethod
    def log_warn(message: str) -> None:
        log.warning("%s", message)

    @staticmethod
    def log_error(message: str) -> None:
        log.error("%s", message)


class _Metric:
    def __init__(self, labels: dict[str, str], buckets: Any = None) -> None:
        self.labels, self.value = labels, 0.0

    def increment(self, value: float) -> None:
        self.value += value

    def set(self, value: float) -> None:
        self.value = value

    def observe(self, value: float) -> None:
        self.value += value


class MetricFamily:
    COUNTER, GAUGE, HISTOGRAM = "counter", "gauge", "histogram"

    def __init__(self, name: str, description: str, kind: str) -> None:
        self.name = name

    def Metric(self, labels: dict[str, str], buckets: Any = None) -> _Metric:  # noqa: N802 (pb_utils' name)
        return _Metric(labels, buckets)


# A BLS request's answer: (model, inputs by name, requested outputs, request id) -> response.
Answer = Callable[[str, dict[str, npt.NDArray[Any]], list[str], str], InferenceResponse]


class _Bls:
    answer: Answer | None = None


class InferenceRequest:
    """A BLS request, answered by the function :func:`python_backend_stand_in` was given."""

    def __init__(
        self,
        model_name: str,
        inputs: Sequence[Tensor],
        requested_output_names: Sequence[str] = (),
        request_id: str = "",
        parameters: Any = None,
    ) -> None:
        self.model_name, self.inputs = model_name, {t.name(): t.as_numpy() for t in inputs}
        self.outputs, self.request_id = list(requested_output_names), request_id

    def exec(self, decoupled: bool = False) -> Any:
        if _Bls.answer is None:
            raise TritonModelException("no BLS answer given to the stand-in")
        response = _Bls.answer(self.model_name, self.inputs, self.outputs, self.request_id)
        return iter([response]) if decoupled else response


def get_input_tensor_by_name(request: Request, name: str) -> Tensor | None:
    return next((t for t in request.inputs() if t.name() == name), None)


def get_output_tensor_by_name(response: InferenceResponse, name: str) -> Tensor | None:
    return next((t for t in response.output_tensors if t.name() == name), None)


def using_decoupled_model_transaction_policy(config: dict[str, Any]) -> bool:
    return bool(config.get("model_transaction_policy", {}).get("decoupled", False))


STAND_IN = types.ModuleType(PB_UTILS, "What the repository's Python models use of the backend's utils.")
STAND_IN.__dict__.update(
    Tensor=Tensor,
    TritonError=TritonError,
    TritonModelException=TritonModelException,
    InferenceResponse=InferenceResponse,
    InferenceRequest=InferenceRequest,
    Logger=Logger,
    MetricFamily=MetricFamily,
    get_input_tensor_by_name=get_input_tensor_by_name,
    get_output_tensor_by_name=get_output_tensor_by_name,
    using_decoupled_model_transaction_policy=using_decoupled_model_transaction_policy,
    TRITONSERVER_RESPONSE_COMPLETE_FINAL=1,
)


@contextmanager
def python_backend_stand_in(answer: Answer | None = None) -> Iterator[None]:
    """Import Triton models with the stand-in as ``triton_python_backend_utils`` (BLS
    requests answered by ``answer``); modules that bind it at import are imported afresh,
    and everything is put back afterwards."""
    names = (PB_UTILS, *BINDS_PB_UTILS)
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.modules[PB_UTILS] = STAND_IN
    _Bls.answer = answer
    try:
        yield
    finally:
        _Bls.answer = None
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
