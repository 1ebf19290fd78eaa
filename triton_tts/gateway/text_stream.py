"""A text that arrives as it is written (an LLM's tokens on the WebSocket), cut into the
pieces that go to synthesis: each sentence as soon as its end is settled
(:func:`triton_tts.runtime.chunking.settled_sentences`), a long clause when the writer pauses,
and the rest on ``flush`` or ``end``. Pure: the socket decides when to ask.
"""

from __future__ import annotations

from triton_tts.runtime.chunking import CHUNK_CHARS, clause_cut, settled_sentences
from triton_tts.text.speaks import pronounceable

# A clause goes without its sentence's end once the writer has paused this long and the
# clause is at least this long: a short pause inside a long sentence starts its audio, a
# word or two never goes alone (they would be said without the sentence's intonation).
CLAUSE_WAIT_S = 0.3
MIN_CLAUSE_CHARS = 40


class TextStream:
    """The text written so far and not yet sent to synthesis (``held``), and how much of
    what was sent waits for its synthesis to start (``queued``)."""

    def __init__(self, max_held_chars: int) -> None:
        self.max_held_chars = max_held_chars
        self.held = ""
        self.queued = 0

    def append(self, piece: str) -> list[str]:
        """Add a piece; the texts now ready (settled sentences, or a cut of a text held
        past :data:`CHUNK_CHARS` with no end in sight). ValueError if the unspoken text
        (held, or queued for synthesis) would pass ``max_held_chars``."""
        unspoken = len(self.held) + self.queued
        if unspoken + len(piece) > self.max_held_chars:
            raise ValueError(
                f"the text stream holds {unspoken} unspoken characters and this piece has "
                f"{len(piece)}; at most {self.max_held_chars} wait: send less at once, or wait for audio"
            )
        self.held += piece
        ready = self._take(settled_sentences(self.held))
        while len(self.held) > CHUNK_CHARS:  # no sentence end in a long run: its clauses, or words
            head = self.held[:CHUNK_CHARS]
            ready += self._take(clause_cut(head) or head.rfind(" ") + 1 or CHUNK_CHARS)
        return ready

    def paused(self) -> list[str]:
        """The writer paused (:data:`CLAUSE_WAIT_S`): the held text up to its last clause
        break, if that is a long clause. A piece that ended on its mark ("valleys,", an
        LLM's tokens carry their space in front) ends a clause there."""
        cut = clause_cut(self.held, paused=True)
        return self._take(cut) if len(self.held[:cut].strip()) >= MIN_CLAUSE_CHARS else []

    def flush(self) -> list[str]:
        """Everything held, settled or not."""
        return self._take(len(self.held))

    def started(self, text: str) -> None:
        """A text sent on its way has begun its synthesis: it no longer waits."""
        self.queued = max(0, self.queued - len(text))

    def _take(self, cut: int) -> list[str]:
        text, self.held = self.held[:cut].strip(), self.held[cut:]
        # Nothing to say ("* * *", a lone quote): no request, as the long-text models skip it.
        if not (text and pronounceable(text)):
            return []
        self.queued += len(text)
        return [text]
