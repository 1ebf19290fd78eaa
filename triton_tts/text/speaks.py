"""Whether a text has anything to say: the one rule, in the text package, which every reader
of text (the phonemizer, the reader, the long-text models) sits above."""

from __future__ import annotations

from triton_tts.contract.voice import PINYIN_BAKER
from triton_tts.text.han import has_han

# Whether a text has anything to say: one rule, asked at two moments that know different
# things. Before reading, only the text (and the voice's tokens) is known: the long-text
# models, which never read (preprocess does, a batch at a time), drop chunks and refuse
# texts by it, and the phonemizer keeps espeak from texts of punctuation alone. Its "no"
# is certain, its "yes" a guess. After reading, the voice's symbols and ids are known:
# preprocess has the last word (letters the voice has no symbols for, phonemes that are
# only punctuation). Both refuse with contract.validation.nothing_to_say().


def pronounceable(text: str, tokens: str = "phonemes") -> bool:
    """Before reading: whether a text (as written or normalised) may say something to a
    voice of ``tokens``: a letter or digit; for a voice trained on Chinese only
    (pinyin-baker), a Chinese character. False means nothing to say for that voice."""
    if tokens == PINYIN_BAKER:
        return has_han(text)
    return any(ch.isalnum() for ch in text)


def reading_speaks(symbols: str, ids: int, framing: int) -> bool:
    """After reading: whether a text read as ``symbols`` (phonemes, characters or Baker
    symbols, as text) and ``ids`` ids says something: a letter among the symbols, and ids
    past the ``framing`` (BOS, EOS, blanks) a text with nothing in it gets."""
    return ids > framing and any(ch.isalpha() for ch in symbols)
