"""espeak-ng phonemisation through ``phonemizer``, safe under concurrency.

libespeak-ng keeps global state and is not thread-safe. Triton runs each Python-backend
instance in its own stub process (so instances never share a libespeak), and an
instance's ``execute`` is called serially; the lock below keeps one backend safe even if
a caller shares it between threads (tests, the streaming model's worker threads).
"""

from __future__ import annotations

import logging
import threading

from phonemizer.backend import EspeakBackend
from phonemizer.separator import Separator

log = logging.getLogger(__name__)
# phonemizer warns per batch about word-count mismatches (harmless with punctuation kept);
# on the serving hot path that is a log flood.
_quiet = logging.getLogger(f"{__name__}.espeak")
_quiet.setLevel(logging.ERROR)

# Word boundaries as spaces, no phone separators: the form Piper voices are trained on.
_SEPARATOR = Separator(phone="", word=" ", syllable="")


class EspeakPhonemizer:
    def __init__(self, language: str) -> None:
        self.language = language
        self._lock = threading.Lock()
        self._backend = EspeakBackend(
            language,
            preserve_punctuation=True,
            with_stress=True,
            language_switch="remove-flags",
            logger=_quiet,
        )

    def phonemize(self, texts: list[str]) -> list[str]:
        """Phonemise a whole batch in one espeak pass (one call per Triton execute); one
        result per text, always.

        phonemizer keeps punctuation by cutting lines at it and gluing them back, and a
        line of punctuation only gets glued onto its neighbour: ["." * 50, "!!!"] came
        back as one string, which shifted every later result onto the wrong request. Texts
        with nothing to pronounce skip espeak (they are their own result), and should the
        counts still differ, each text is phonemised on its own."""
        results = [text if not _pronounceable(text) else "" for text in texts]
        spoken = [i for i, text in enumerate(texts) if _pronounceable(text)]
        if not spoken:
            return [" ".join(r.split()) for r in results]
        batch = self._run([texts[i] for i in spoken])
        if len(batch) != len(spoken):
            log.warning("phonemizer returned %d results for %d texts: one by one", len(batch), len(spoken))
            batch = [" ".join(self._run([texts[i]])) for i in spoken]
        for i, phonemes in zip(spoken, batch, strict=True):
            results[i] = phonemes
        return [" ".join(r.split()) for r in results]

    def _run(self, texts: list[str]) -> list[str]:
        with self._lock:
            return list(self._backend.phonemize(texts, separator=_SEPARATOR, strip=True, njobs=1))

    def symbols(self, texts: list[str], tokens: str = "phonemes") -> list[str]:
        """What a voice's ids are made from: IPA phonemes, or (character voices) the
        normalised text in lower case, as Coqui's character tokenisers expect."""
        if tokens == "characters":
            return [" ".join(t.lower().split()) for t in texts]
        return self.phonemize(texts)


def _pronounceable(text: str) -> bool:
    return any(ch.isalnum() for ch in text)


def has_speech(phonemes: str) -> bool:
    """False for phoneme strings of punctuation and spaces only."""
    return any(ch.isalpha() for ch in phonemes)
