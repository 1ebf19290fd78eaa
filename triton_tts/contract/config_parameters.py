"""Read a Triton model config's ``parameters`` block (string values) as a plain dict.

Kept free of heavy imports: every Python-backend stub and the client import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def string_parameters(model_config: Mapping[str, Any]) -> dict[str, str]:
    """``parameters { key: "k" value { string_value: "v" } }`` -> {"k": "v"} (JSON form)."""
    return {key: value["string_value"] for key, value in model_config.get("parameters", {}).items()}
