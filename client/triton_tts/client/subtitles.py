"""Subtitle files read strictly, cue by cue: SubRip (.srt) and WebVTT (.vtt).

A dub (triton_tts/client/dubbing.py) needs every cue's slot and text, and a file that
cannot give them must say where: each error names its line. The ``srt`` and
``webvtt-py`` parsers are lenient on purpose (a timing line they cannot read is dropped,
or read as a shorter time with the rest as settings), which would silently drop lines
from a dub, so the timing lines are read here against each format's grammar::

    SRT:    [index]  HH:MM:SS,mmm --> HH:MM:SS,mmm   (hours may be 1+ digits; "." allowed)
    WebVTT: [id]     [HH:]MM:SS.mmm --> [HH:]MM:SS.mmm [settings]   after a WEBVTT header

Refused, with the line at fault: a malformed timing line (one that has a time but not
the grammar, a mistyped ``-->`` say, is blamed itself, with what was expected; so is the
line after a SubRip cue number), an end not after its start, a cue that starts before
the one above it (out of order), a cue that starts before the one above it ends
(overlap), a cue without text, text with no timing line, a timing line inside a cue's
text (a blank line missing between two cues). Cue text loses its markup (``<i>``,
``<v Name>``, ``{\\an8}``) and entities, and its lines are joined with spaces. Blocks of
WebVTT that are not cues (NOTE, STYLE, REGION) are skipped. Whether a cue's text can be
spoken is the voice's to say (triton_tts/client/dubbing.py asks the server).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

FORMATS = {".srt": "srt", ".vtt": "vtt"}
MAX_FILE_BYTES = 10_000_000

_SRT_TIME = r"(\d+):([0-5]\d):([0-5]\d)[,.](\d{3})"
_VTT_TIME = r"(?:(\d+):)?([0-5]\d):([0-5]\d)\.(\d{3})"
_SRT_TIMING = re.compile(rf"^\s*{_SRT_TIME}\s*-->\s*{_SRT_TIME}(?:\s+.*)?$")
_VTT_TIMING = re.compile(rf"^\s*{_VTT_TIME}[ \t]+-->[ \t]+{_VTT_TIME}(?:[ \t]+.*)?$")
_TAGS = re.compile(r"<[^>]*>|\{\\[^}]*\}")  # HTML-like tags; SubRip's ASS overrides {\an8}
# How a timing line starts though its arrow or a time is mistyped: a clock time (01:02,
# 1:02:03.5). A cue's text rarely does; a timing line always does.
_CLOCK = re.compile(r"^\s*\d+:\d\d")
_EXAMPLES = {"srt": "00:00:01,000 --> 00:00:02,500", "vtt": "00:00:01.000 --> 00:00:02.500"}


class SubtitleError(ValueError):
    """A file that cannot be dubbed: the message names the line (1-based) where known."""

    def __init__(self, message: str, line: int | None = None, source: str = "") -> None:
        if line is not None:
            where = f"{source}:{line}: " if source else f"line {line}: "
        else:
            where = f"{source}: " if source else ""
        super().__init__(f"{where}{message}")
        self.line = line


@dataclass(frozen=True)
class Cue:
    """One line to dub: its slot (seconds) and text; ``line`` is its timing line's
    number in the file (or the script's line)."""

    index: int  # 1-based, in the file's order
    line: int
    start: float
    end: float
    text: str
    moved_s: float = 0.0  # by --snap: from the file's start to a detected onset

    @property
    def slot_s(self) -> float:
        return self.end - self.start


def _seconds(groups: tuple[str | None, ...]) -> float:
    hours, minutes, seconds, millis = (int(g) if g else 0 for g in groups)
    return (((hours * 60 + minutes) * 60 + seconds) * 1000 + millis) / 1000  # exact to the ms


def _clean(lines: list[str]) -> str:
    text = " ".join(html.unescape(_TAGS.sub("", line)).strip() for line in lines)
    return " ".join(text.split())


def _blocks(text: str, first_line: int = 1) -> list[tuple[int, list[str]]]:
    """Blank-line separated blocks: (the first line's number, its lines)."""
    blocks: list[tuple[int, list[str]]] = []
    held: list[str] = []
    start = first_line
    for number, line in enumerate(text.splitlines(), first_line):
        if line.strip():
            if not held:
                start = number
            held.append(line)
        elif held:
            blocks.append((start, held))
            held = []
    if held:
        blocks.append((start, held))
    return blocks


def _meant_timing(block: list[str], fmt: str) -> int | None:
    """Where a block without ``-->`` in its first two lines meant its timing line: the first
    of them with a clock time, else the line after a SubRip cue number; None: text alone."""
    found = next((i for i, line in enumerate(block[:2]) if _CLOCK.search(line)), None)
    if found is None and fmt == "srt" and len(block) > 1 and block[0].strip().isdigit():
        return 1
    return found


def parse_subtitles(text: str, fmt: str, source: str = "") -> list[Cue]:
    """The cues of a SubRip (``fmt`` "srt") or WebVTT ("vtt") file's text, checked."""
    if fmt not in FORMATS.values():
        raise SubtitleError(f"unsupported subtitle format {fmt!r}: use .srt (SubRip) or .vtt (WebVTT)")
    text = text.removeprefix("\ufeff")
    timing = _SRT_TIMING if fmt == "srt" else _VTT_TIMING
    body_start = 1
    if fmt == "vtt":
        lines = text.splitlines()
        if not lines or not re.match(r"^WEBVTT(?:[ \t].*)?$", lines[0]):
            raise SubtitleError("a WebVTT file starts with a 'WEBVTT' line", 1, source)
        body_start = 2
        text = "\n".join(lines[1:])
    cues: list[Cue] = []
    for number, block in _blocks(text, body_start):
        if fmt == "vtt" and re.match(r"^(NOTE|STYLE|REGION)(?:\s|$)", block[0]):
            continue
        at = next((i for i, line in enumerate(block[:2]) if "-->" in line), None)
        if at is None:
            if number == body_start and fmt == "vtt":  # the header block's own lines
                continue
            at = _meant_timing(block, fmt)
            if at is None:
                raise SubtitleError(f"text without a timing line ({block[0].strip()[:40]!r})", number, source)
        if fmt == "srt" and at == 1 and not block[0].strip().isdigit():
            raise SubtitleError(f"a SubRip cue number must be a number, not {block[0].strip()[:20]!r}",
                                number, source)  # fmt: skip
        line = number + at
        match = timing.match(block[at])
        if match is None:
            raise SubtitleError(
                f"malformed timing {block[at].strip()[:60]!r}: expected a timing line like {_EXAMPLES[fmt]}",
                line,
                source,
            )
        start, end = _seconds(match.groups()[:4]), _seconds(match.groups()[4:])
        if end <= start:
            raise SubtitleError(f"the cue ends ({end:.3f} s) before it starts ({start:.3f} s)", line, source)
        if cues and start < cues[-1].start:
            raise SubtitleError(
                f"cues out of order: the cue starts at {start:.3f} s, before the cue above it (line "
                f"{cues[-1].line}) starts at {cues[-1].start:.3f} s; cues must be in time order",
                line,
                source,
            )
        if cues and start < cues[-1].end:
            raise SubtitleError(
                f"the cue starts at {start:.3f} s, before the previous cue (line {cues[-1].line}) ends at "
                f"{cues[-1].end:.3f} s: cues may not overlap",
                line,
                source,
            )
        inside = next((i for i, held in enumerate(block[at + 1 :], at + 1) if timing.match(held)), None)
        if inside is not None:
            raise SubtitleError(
                "a timing line inside the cue above's text: end each cue with a blank line",
                number + inside,
                source,
            )
        words = _clean(block[at + 1 :])
        if not words:
            raise SubtitleError("the cue has no text", line, source)
        cues.append(Cue(len(cues) + 1, line, start, end, words))
    if not cues:
        raise SubtitleError("no cues in the file", None, source)
    return cues


def script_lines(text: str) -> list[tuple[int, str]]:
    """A plain script: (line number, text) for each line to dub (the non-empty ones)."""
    lines = text.removeprefix("\ufeff").splitlines()
    return [(n, " ".join(line.split())) for n, line in enumerate(lines, 1) if line.strip()]


def decode(data: bytes, source: str) -> str:
    """A subtitle file's or script's bytes as text: UTF-8, at most MAX_FILE_BYTES."""
    if len(data) > MAX_FILE_BYTES:
        raise SubtitleError(
            f"{len(data)} bytes, over the {MAX_FILE_BYTES} a subtitle file may have", None, source
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SubtitleError("not UTF-8 text", data[: err.start].count(b"\n") + 1, source) from err


def read_script(path: Path) -> list[tuple[int, str]]:
    """The lines of a plain-text script (UTF-8), one cue a line, without timings."""
    lines = script_lines(decode(path.read_bytes(), path.name))
    if not lines:
        raise SubtitleError("no lines to dub in the script", None, path.name)
    return lines


def cues_in_regions(
    lines: Sequence[tuple[int, str]], regions: Sequence[tuple[float, float]], source: str = ""
) -> list[Cue]:
    """A script's lines placed in order into speech regions (start, end), one a region, at
    each region's onset; a line beyond the last region is refused with its number."""
    if len(lines) > len(regions):
        first = lines[len(regions)][0]
        raise SubtitleError(
            f"{len(lines)} lines but {len(regions)} speech regions in the original: this line and those "
            "after it have no place",
            first,
            source,
        )
    return [
        Cue(i, n, start, end, text)
        for i, ((n, text), (start, end)) in enumerate(zip(lines, regions[: len(lines)], strict=True), 1)
    ]


def snap(cues: Sequence[Cue], onsets: Sequence[float], within_s: float) -> list[Cue]:
    """Each cue moved (start and end together) to the detected onset nearest its start,
    when one is within ``within_s`` and the move keeps it after the cue before and before
    the next one's start; an end that would pass the next cue's start stops there."""
    moved: list[Cue] = []
    for i, cue in enumerate(cues):
        near = min(onsets, key=lambda o: abs(o - cue.start), default=None)
        earliest = moved[-1].end if moved else 0.0
        latest = cues[i + 1].start if i + 1 < len(cues) else float("inf")
        if near is not None and abs(near - cue.start) <= within_s and earliest <= near < latest:
            shift = near - cue.start
            moved.append(replace(cue, start=near, end=cue.end + shift, moved_s=shift))
        else:
            moved.append(cue)
    out = []
    for this, following in zip(moved, [*moved[1:], None], strict=True):
        if following is not None and this.end > following.start:
            out.append(replace(this, end=max(following.start, this.start + 0.001)))
        else:
            out.append(this)
    return out


def read_cues(path: Path) -> list[Cue]:
    """The cues of a .srt or .vtt file (UTF-8)."""
    fmt = FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise SubtitleError(
            "unsupported subtitle format: name a .srt (SubRip) or .vtt (WebVTT) file (or a .txt script)",
            None,
            path.name,
        )
    return parse_subtitles(decode(path.read_bytes(), path.name), fmt, path.name)
