"""The internal models answer the product's own requests only.

``tts`` and ``tts_stream`` are the front door: they admit work by its cost
(triton_tts/runtime/admission.py) and give first chunks Triton's first priority. ``tts_chunk`` and
its stages are the rooms behind it, and Triton cannot lock them: it restricts APIs, not
models, an ensemble passes its caller's priority on to every step, and a Python model
cannot see a request's priority (2.51). A caller that reached them directly could skip
admission and put its work ahead of every listener's first chunk.

So each start of the server (``TritonServer.start``) makes a fresh token and puts it in
the models' environment (:data:`TOKEN_ENV`). The front door sends it with each chunk as
a request parameter (:data:`PARAMETER`; by BLS and by the gRPC loopback), Triton passes
request parameters through the ``tts_chunk`` ensemble to each step, and every Python
stage refuses a request without it at once, before any work, with INVALID_ARG: whatever
priority it asked for, it gains nothing but its refusal. The token never leaves the
server's processes and is never logged.

Triton's warm-up requests carry no parameters; they reach each instance before Triton
routes anything to it (every instance is its own stub process), so each instance lets
through exactly the warm-up requests its config names, then no request without the
token. Without :data:`TOKEN_ENV` (tritonserver started by hand on a built repository),
the gate is open. Native stages (the ``gpu`` and ``tensorrt`` variants' acoustic model
and vocoder) cannot check it: there, ``preprocess`` closes ``tts_chunk``, and Triton's
API key (docs/api.md, "Keys") and the chart's NetworkPolicy are what keep callers from
the stages themselves (docs/architecture.md, "Internal models guard themselves").
"""

from __future__ import annotations

import hmac
import json
import os
from typing import Any

from triton_tts.contract.validation import InvalidRequest

TOKEN_ENV = "TRITON_TTS_INTERNAL_TOKEN"  # noqa: S105 - the variable's name, not a token
PARAMETER = "tts_internal"  # Triton reserves names that start with "triton_"
REFUSAL = "an internal model: send text to tts or tts_stream (the server's own chunks only come here)"


def parameters(token: str | None = None) -> dict[str, str]:
    """The request parameters that carry the token (default: this process's, from the
    environment); empty when there is none."""
    token = token if token is not None else os.environ.get(TOKEN_ENV)
    return {PARAMETER: token} if token else {}


def warmup_requests(model_config: dict[str, Any]) -> int:
    """How many warm-up requests Triton sends one instance of a model with this config:
    each sample's batch_size requests, ``count`` times (at least once)."""
    return sum(
        int(sample.get("batch_size", 0)) * max(1, int(sample.get("count", 0)))
        for sample in model_config.get("model_warmup", [])
    )


class Gate:
    """One instance's check of the token; made in ``initialize`` from Triton's args."""

    def __init__(self, args: dict[str, str], token: str | None = None) -> None:
        self.token = token if token is not None else (os.environ.get(TOKEN_ENV) or None)
        self.warmups_left = warmup_requests(json.loads(args.get("model_config", "{}")))

    def check(self, request: Any) -> None:
        """Raises InvalidRequest for a request that does not carry the token (after the
        instance's warm-up)."""
        if self.token is None:
            return
        if self.warmups_left > 0:
            self.warmups_left -= 1
            return
        if not carries_token(request, self.token):
            raise InvalidRequest(REFUSAL)


def request_parameters(request: Any) -> dict[str, Any]:
    """A Python-backend request's parameters (``request.parameters()``, JSON); empty when
    it has none or they do not read as an object."""
    try:
        given = json.loads(request.parameters() or "{}")
    except (ValueError, AttributeError, TypeError):
        return {}
    return given if isinstance(given, dict) else {}


def carries_token(request: Any, token: str) -> bool:
    """Does ``request`` carry ``token`` as its :data:`PARAMETER` (compared in constant time)?"""
    given = request_parameters(request).get(PARAMETER, "")
    return isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())
