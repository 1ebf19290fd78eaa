"""espeak-ng phonemisation, safe under concurrency, in the form each voice was trained on.

Two conventions, chosen by the voice's ``tokens`` (triton_tts/contract/voice.py):

* ``piper-phonemes`` (Piper voices): espeak-ng reads the whole text clause by clause, and
  each clause's phonemes are followed by the punctuation that ended it, as Piper's
  phonemizer (piper-phonemize, which trained the voices) writes them: ``.`` ``?`` ``!``
  as they are; ``,`` ``:`` ``;`` and dashes (espeak calls them semicolons) followed by a
  space; anything else (quotes, brackets, an ellipsis) says nothing. Sentences follow one
  another without a space, as Piper's training flattens them, and the result is in NFD
  (``ç`` is ``c`` and a cedilla), as Piper maps it. tests/test_frontend_vs_piper.py
  checks it against Piper's own phonemizers.
* ``phonemes`` (Coqui voices): phonemizer's EspeakBackend, which cuts the text at
  punctuation, reads the pieces and puts the marks back, as Coqui's phonemizer does.

libespeak-ng keeps global state and is not thread-safe. Triton runs each Python-backend
instance in its own stub process, and phonemizer loads a private copy of the library for
each backend; the lock below keeps one instance safe even if a caller shares it between
threads (tests, the streaming model's worker threads).
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import threading
import unicodedata
from functools import cache

from phonemizer.backend import EspeakBackend
from phonemizer.backend.espeak.api import EspeakAPI
from phonemizer.backend.espeak.wrapper import EspeakWrapper
from phonemizer.separator import Separator

from triton_tts.contract.voice import PIPER_PHONEMES
from triton_tts.text.speaks import pronounceable

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
        self._clauses: EspeakClauses | None = None  # made on first use: a second library copy

    def phonemize(self, texts: list[str]) -> list[str]:
        """Phonemise a whole batch in one espeak pass (one call per Triton execute); one
        result per text, always.

        phonemizer keeps punctuation by cutting lines at it and gluing them back, and a
        line of punctuation only gets glued onto its neighbour: ["." * 50, "!!!"] came
        back as one string, which shifted every later result onto the wrong request. Texts
        with nothing to pronounce skip espeak (they are their own result), and should the
        counts still differ, each text is phonemised on its own."""
        results = [text if not pronounceable(text) else "" for text in texts]
        spoken = [i for i, text in enumerate(texts) if pronounceable(text)]
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

    def piper_phonemize(self, texts: list[str]) -> list[str]:
        """Piper's convention (module docstring); one result per text. Texts with nothing
        to pronounce skip espeak and are their own result, as in :meth:`phonemize`."""
        with self._lock:
            if self._clauses is None:
                self._clauses = EspeakClauses(self.language)
            return [
                self._clauses.phonemize(text) if pronounceable(text) else " ".join(text.split())
                for text in texts
            ]

    def symbols(self, texts: list[str], tokens: str = "phonemes") -> list[str]:
        """What a voice's ids are made from: IPA phonemes in the voice's convention, or
        (character voices) the normalised text in lower case, as Coqui's character
        tokenisers expect."""
        if tokens == "characters":
            return [" ".join(t.lower().split()) for t in texts]
        if tokens == PIPER_PHONEMES:
            return self.piper_phonemize(texts)
        return self.phonemize(texts)


@cache
def espeak(language: str) -> EspeakPhonemizer:
    """The process's one phonemizer for ``language``, shared by every reader and front-end
    in it: each instance loads its own copy of libespeak-ng (and holds its own lock), so
    one per language is all a process needs."""
    return EspeakPhonemizer(language)


# What follows a clause, by the punctuation that ended it (its first mark, when several
# stand together: "?!" is a question). Piper writes a mark only for espeak's plain clause
# types; espeak types en and em dashes as semicolons, and an ellipsis, inverted marks and
# the like as clauses with extra flags, which Piper leaves unwritten.
_AFTER_CLAUSE = {
    ".": ".",
    "?": "?",
    "!": "!",
    ",": ", ",
    ":": ": ",
    ";": "; ",
    "\u2013": "; ",
    "\u2014": "; ",
}
_CLAUSE_MARKS = frozenset(".?!,:;\u2013\u2014\u2026\u00a1\u00bf")
# Closing quotes and brackets may stand after a clause's mark: 'she said "no." Then'.
_CLOSERS = "\"')]}\u00bb\u201d\u2019"
# espeak-ng marks words it reads in another language with "(lang)" flags; Piper drops them.
_LANGUAGE_FLAG = re.compile(r"\([^)]*\)")
_ESPEAK_CHARS_UTF8 = 1
_ESPEAK_PHONEMES_IPA = 0x02


def _clause_ending(clause_text: str) -> str:
    """What Piper writes after a clause, from the clause's text (its punctuation at the
    end; an ellipsis, written "..." or "…", writes nothing)."""
    tail = clause_text.rstrip().rstrip(_CLOSERS).rstrip()
    start = len(tail)
    while start > 0 and (tail[start - 1] in _CLAUSE_MARKS or tail[start - 1].isspace()):
        start -= 1
    marks = "".join(tail[start:].split())
    if not marks or marks.startswith(".."):
        return ""
    return _AFTER_CLAUSE.get(marks[0], "")


class EspeakClauses:
    """One private copy of libespeak-ng read clause by clause (espeak_TextToPhonemes), as
    Piper reads text. Not thread-safe: :class:`EspeakPhonemizer` holds the lock.

    espeak_TextToPhonemes says a clause's phonemes but not the punctuation that ended it
    (Debian's espeak-ng 1.51 has no espeak_TextToPhonemesWithTerminator); it moves the
    text pointer past the clause and one character more, which it has read ahead, so the
    clause's own text is what lies between, less that last character."""

    def __init__(self, language: str) -> None:
        self._api = EspeakAPI(EspeakWrapper.library(), os.environ.get("PHONEMIZER_ESPEAK_DATA_PATH"))
        if self._api.set_voice_by_name(language.encode("utf-8")) != 0:
            raise ValueError(f"espeak-ng has no voice '{language}'")

    def phonemize(self, text: str) -> str:
        data = text.replace("\0", " ").encode("utf-8", "ignore")
        buffer = ctypes.create_string_buffer(data)
        base = ctypes.addressof(buffer)
        cursor = ctypes.pointer(ctypes.c_char_p(base))
        position = ctypes.cast(cursor, ctypes.POINTER(ctypes.c_void_p)).contents
        parts: list[str] = []
        while position.value is not None:
            start = position.value - base
            phonemes = self._api.text_to_phonemes(cursor, _ESPEAK_CHARS_UTF8, _ESPEAK_PHONEMES_IPA)
            if position.value is None:
                clause = data[start:].decode("utf-8", "replace")
            else:
                if position.value - base <= start:  # no progress: nothing left to read
                    break
                clause = data[start : position.value - base].decode("utf-8", "replace")[:-1]
            parts.append(_LANGUAGE_FLAG.sub("", (phonemes or b"").decode("utf-8", "replace")))
            parts.append(_clause_ending(clause))
        return unicodedata.normalize("NFD", "".join(parts))
