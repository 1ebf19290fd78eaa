"""Where triton-tts finds its repository template and keeps voices, builds and caches.

Every default location is decided here, from configuration, never from where the package
happens to sit (after ``pip install`` its parent folder is site-packages):

=============================  ===============================================================
``TRITON_TTS_HOME``            voices (``voices/<name>``) and the built repository
                               (``build/model_repository``); default: the checkout, for an
                               editable install (``make``'s, or ``pip install -e``), so a
                               command finds the same voices from ``make`` or a plain shell;
                               else ``$XDG_DATA_HOME/triton-tts`` or ``~/.local/share/triton-tts``.
``TRITON_TTS_CACHE``           caches (the Python-backend link folder); default
                               ``$XDG_CACHE_HOME/triton-tts`` or ``~/.cache/triton-tts``
``TRITON_TTS_REPOSITORY_TEMPLATE``  the committed configs and model code; default: the
                               package data of the installed wheel (``triton_tts/model_repository``)
                               or, for an editable install, the source tree pip recorded
=============================  ===============================================================
"""

from __future__ import annotations

import json
import os
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "triton-tts"
DEFAULT_VOICE = "joe"


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value).expanduser() if value else None


def data_home() -> Path:
    home = _env_path("TRITON_TTS_HOME")
    if home:
        return home
    source = _editable_source()
    if source is not None and source.is_dir():
        return source
    xdg = _env_path("XDG_DATA_HOME")
    return (xdg or Path.home() / ".local" / "share") / "triton-tts"


def cache_dir() -> Path:
    cache = _env_path("TRITON_TTS_CACHE")
    if cache:
        return cache
    xdg = _env_path("XDG_CACHE_HOME")
    return (xdg or Path.home() / ".cache") / "triton-tts"


def voices_dir() -> Path:
    return data_home() / "voices"


def default_voice_dir() -> Path:
    """The bundled voice's folder (exported there on first use)."""
    return voices_dir() / DEFAULT_VOICE


def default_build_dir() -> Path:
    """Where ``build-repo`` and ``serve`` put the repository they build (not the template)."""
    return data_home() / "build" / "model_repository"


def _editable_source() -> Path | None:
    """The source tree of an editable install, from pip's record of it (PEP 610)."""
    # Every record, not the first: a stale *.egg-info in the working folder is one too.
    for dist in metadata.distributions(name=DISTRIBUTION):
        record = dist.read_text("direct_url.json")
        url = json.loads(record) if record else {}
        parsed = urlparse(url.get("url", ""))
        if url.get("dir_info", {}).get("editable") and parsed.scheme == "file":
            return Path(unquote(parsed.path))
    return None


def repository_template() -> Path:
    """The committed model repository: configs and Python model code, no voice."""
    configured = _env_path("TRITON_TTS_REPOSITORY_TEMPLATE")
    if configured:
        return configured
    packaged = Path(__file__).resolve().parents[1] / "model_repository"
    if packaged.is_dir():
        return packaged
    source = _editable_source()
    if source and (source / "model_repository").is_dir():
        return source / "model_repository"
    raise RuntimeError(
        "triton-tts cannot find its model repository template: reinstall the package, "
        "or set TRITON_TTS_REPOSITORY_TEMPLATE to a copy of the repository's model_repository/"
    )
