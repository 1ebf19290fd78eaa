"""Style voices (Kokoro): a table of style vectors per speaker, chosen by token count,
and weighted mixes of speakers.

A Kokoro voice pack is a float32 [rows, 256] table per speaker: row ``n - 1`` is the
style for a text of ``n`` phoneme tokens (the framing pads not counted), as Kokoro's own
pipeline chooses it; texts longer than the table use its last row. A voice folder keeps
all of its speakers in one array, ``styles.npy`` [speakers, rows, 256], in the order of
``voice.json``'s ``speakers``.

A mix names speakers with weights, ``af_bella:0.7+af_sky:0.3`` (``af_bella(2)+af_sky(1)``
and ``af_bella+af_sky``, equal weights, read the same way); the weights are scaled to sum
to one and the style is the weighted sum of the speakers' rows, row by row, as
Kokoro-FastAPI blends its voice packs. Preprocess turns a request's speaker or mix into
the one STYLE row the acoustic graph takes; the graph carries the decoder's half of it
to the vocoder inside LATENT.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from triton_tts.contract.validation import InvalidRequest

STYLES_FILE = "styles.npy"
STYLE_WIDTH = 256
MAX_MIX_PARTS = 8  # speakers in one mix
MAX_MIX_CHARS = 512
_PART = re.compile(
    r"\s*(?P<name>[A-Za-z0-9][A-Za-z0-9_.-]{0,63})\s*"
    r"(?::\s*(?P<colon>[0-9]*\.?[0-9]+)|\(\s*(?P<paren>[0-9]*\.?[0-9]+)\s*\))?\s*"
)

FloatArray = npt.NDArray[np.float32]


def is_mix(text: str) -> bool:
    """Whether a voice name is a mix (``a+b``, ``a:0.5``, ``a(2)``) rather than one name."""
    return "+" in text or "(" in text or bool(re.search(r":\s*[0-9]*\.?[0-9]+\s*$", text))


def parse_mix(text: str, speakers: dict[str, int]) -> dict[int, float]:
    """A mix -> speaker id: weight (summing to one), or InvalidRequest naming what is wrong.
    A name may be written ``voice.speaker`` (the gateway's form); the voice part is dropped."""
    if not text.strip():
        raise InvalidRequest("VOICE_MIX is empty: name speakers with weights, e.g. 'af_bella:0.7+af_sky:0.3'")
    if len(text) > MAX_MIX_CHARS:
        raise InvalidRequest(f"VOICE_MIX is {len(text)} characters long; the limit is {MAX_MIX_CHARS}")
    parts = text.split("+")
    if len(parts) > MAX_MIX_PARTS:
        raise InvalidRequest(f"VOICE_MIX names {len(parts)} speakers; a mix holds at most {MAX_MIX_PARTS}")
    weights: dict[int, float] = {}
    for part in parts:
        match = _PART.fullmatch(part)
        if match is None:
            raise InvalidRequest(
                f"VOICE_MIX part {part.strip()!r} is not 'name', 'name:weight' or 'name(weight)' "
                "(e.g. 'af_bella:0.7+af_sky:0.3')"
            )
        name = match["name"]
        if name not in speakers and "." in name:
            name = name.rsplit(".", 1)[1]
        if name not in speakers:
            known = ", ".join(list(speakers)[:40])
            raise InvalidRequest(f"VOICE_MIX names unknown speaker {name!r}; this voice has: {known}")
        raw = match["colon"] or match["paren"]
        weight = 1.0 if raw is None else float(raw)
        if not math.isfinite(weight) or weight <= 0 or weight > 1000:
            raise InvalidRequest(f"VOICE_MIX weight of {name!r} must be above 0 and at most 1000, got {raw}")
        sid = speakers[name]
        weights[sid] = weights.get(sid, 0.0) + weight
    total = sum(weights.values())
    return {sid: w / total for sid, w in weights.items()}


def mix_name(weights: dict[int, float], speakers: dict[str, int]) -> str:
    """The canonical text of a mix (speaker names, weights to three places)."""
    names = {sid: name for name, sid in speakers.items()}
    return "+".join(f"{names[sid]}:{w:.3f}" for sid, w in weights.items())


@dataclass(frozen=True)
class StyleTable:
    table: FloatArray  # [speakers, rows, STYLE_WIDTH]

    @classmethod
    def load(cls, folder: Path) -> StyleTable:
        table = np.load(Path(folder) / STYLES_FILE, mmap_mode=None, allow_pickle=False)
        if table.ndim != 3 or table.shape[2] != STYLE_WIDTH or table.dtype != np.float32:
            raise ValueError(f"{folder / STYLES_FILE}: expected float32 [speakers, rows, {STYLE_WIDTH}]")
        return cls(np.ascontiguousarray(table))

    @property
    def rows(self) -> int:
        return int(self.table.shape[1])

    def row_for(self, tokens: int) -> int:
        """The row of a text of ``tokens`` phoneme tokens (framing not counted)."""
        return min(max(tokens, 1), self.rows) - 1

    def style(self, weights: dict[int, float], tokens: int) -> FloatArray:
        """The STYLE row for a mix (or one speaker at weight 1) and a token count."""
        row = self.row_for(tokens)
        out = np.zeros(STYLE_WIDTH, np.float32)
        for sid, weight in weights.items():
            out += np.float32(weight) * self.table[sid, row]
        return out

    def blended(self, weights: dict[int, float]) -> FloatArray:
        """A whole [rows, STYLE_WIDTH] pack for a mix (stored mixes)."""
        out = np.zeros(self.table.shape[1:], np.float32)
        for sid, weight in weights.items():
            out += np.float32(weight) * self.table[sid]
        return out
