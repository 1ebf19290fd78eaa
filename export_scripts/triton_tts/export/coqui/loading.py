"""Load a Coqui model the way Coqui does: its ``Synthesizer`` over checkpoint files, or a
model name through its ``ModelManager`` (downloads once, into Coqui's TTS_HOME)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse


@dataclass
class Loaded:
    """A Coqui model as Coqui's Synthesizer loaded it, with where it came from."""

    synthesizer: Any
    family: str
    source: str

    @property
    def tts(self) -> Any:
        return self.synthesizer.tts_model

    @property
    def vocoder(self) -> Any:
        return self.synthesizer.vocoder_model


class DownloadFailed(RuntimeError):
    """A model name Coqui's model manager could not fetch (no network, an unknown name)."""


def _without_traceback(record: logging.LogRecord) -> bool:
    return record.exc_info is None  # Coqui logs the failure with its traceback; we say it once


def _download(manager: Any, name: str) -> Any:
    """Coqui's ``download_model``, a failure turned into one DownloadFailed with the way out."""
    import requests

    coqui_log = logging.getLogger("TTS.utils.manage")
    coqui_log.addFilter(_without_traceback)
    try:
        return manager.download_model(name)
    except requests.RequestException as err:
        cause: BaseException = err
        while cause.__cause__ or cause.__context__:  # the socket's own words
            cause = cause.__cause__ or cause.__context__  # type: ignore[assignment]
        host = urlparse(str(err.request.url)).hostname if err.request and err.request.url else None
        where = f" from {host}" if host else ""
        raise DownloadFailed(
            f"cannot download Coqui model '{name}'{where} ({cause}): with no network, download it "
            "where there is one (Coqui keeps models under TTS_HOME) or export from files with "
            "--checkpoint/--config"
        ) from err
    except (KeyError, ValueError) as err:  # Coqui's catalogue lookup
        raise DownloadFailed(
            f"Coqui has no model named '{name}': names look like tts_models/en/ljspeech/vits "
            "(Coqui's `tts --list_models` lists them)"
        ) from err
    finally:
        coqui_log.removeFilter(_without_traceback)


def load(
    *,
    model_name: str | None = None,
    checkpoint: Path | None = None,
    config: Path | None = None,
    vocoder_name: str | None = None,
    vocoder_checkpoint: Path | None = None,
    vocoder_config: Path | None = None,
) -> Loaded:
    """Load through Coqui: names via its ModelManager (downloads), files directly.

    Any family Coqui can load is loaded; whether it can be exported is the registry's
    call (:func:`triton_tts.export.coqui.registry.family_of`)."""
    from TTS.utils.synthesizer import Synthesizer

    source = model_name or str(checkpoint)
    if model_name:
        from TTS.utils.manage import ModelManager

        manager = ModelManager(progress_bar=False)
        checkpoint_str, config_str, item = _download(manager, model_name)
        checkpoint, config = Path(checkpoint_str), Path(config_str)
        vocoder_name = vocoder_name or (item or {}).get("default_vocoder")
        if vocoder_name:
            voc_checkpoint, voc_config, _ = _download(manager, vocoder_name)
            vocoder_checkpoint, vocoder_config = Path(voc_checkpoint), Path(voc_config)
    if checkpoint is None or config is None:
        raise ValueError("give --model-name, or --checkpoint and --config")
    synthesizer = Synthesizer(
        tts_checkpoint=checkpoint,
        tts_config_path=config,
        vocoder_checkpoint=vocoder_checkpoint,
        vocoder_config=vocoder_config,
    )
    return Loaded(synthesizer, synthesizer.tts_config.model, source)
