"""serve's two keys: which of Triton's API groups each guards (the API key: inference and
what clients read around it; the admin key: all that changes state), the headers that
carry them, and a command line fit for a log with them hidden. docs/api.md, "Keys"."""

from __future__ import annotations

from collections.abc import Sequence

# Triton's API groups (--http-restricted-api, --grpc-restricted-protocol), split between
# the two keys (docs/api.md, "Keys"). Callers' APIs take the API key: inference, and what
# clients and perf_analyzer read around it: metadata, the model config (the voices list is
# in tts's config) and the statistics (counts and times, no secret: the metrics port shows
# the same; perf_analyzer aborts without them). Everything that changes state takes the
# admin key. Health stays open for probes and load balancers.
CALLER_APIS = ("inference", "metadata", "model-config", "statistics")
ADMIN_APIS = ("model-repository", "shared-memory", "trace", "logging")
ADMIN_HEADER = "triton-tts-admin"  # the restricted model-repository API's key header
# A flag's value after one of these is a key: the command line is logged without it.
SECRET_FLAGS = ("--http-restricted-api=", "--grpc-restricted-protocol=")


def redacted(command: Sequence[str]) -> str:
    """A command line fit for a log: the restricted APIs' header values (the keys) hidden."""
    shown = []
    for arg in command:
        apis, colon, header = arg.partition(":")
        if arg.startswith(SECRET_FLAGS) and colon and "=" in header:
            arg = f"{apis}:{header.partition('=')[0]}=<redacted>"  # noqa: PLW2901 - the shown form
        shown.append(arg)
    return " ".join(shown)


def key_headers(api_key: str | None, admin_key: str | None, protocol: str = "http") -> dict[str, str]:
    """The headers (gRPC: Triton's prefixed metadata) that carry the API key and the admin
    key to a server started with them; either may be None."""
    from triton_tts.client.tts_client import GRPC_HEADER_PREFIX, auth_headers

    found = dict(auth_headers(api_key, "grpc" if protocol == "grpc" else "http") or {})
    if admin_key:
        found[(GRPC_HEADER_PREFIX if protocol == "grpc" else "") + ADMIN_HEADER] = admin_key
    return found
