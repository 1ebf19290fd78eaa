"""A dub: subtitle cues in, one timed audio track out, with a report of how each cue fit.

Every cue is synthesised through the server, concurrently (the batcher sees them
together), at its natural speed. Its speech (leading and trailing silence trimmed, in
10 ms frames) starts at the cue's start, to the sample. A cue whose speech is longer
than its slot is synthesised again faster, at most ``max_speed``: up to three faster
takes, each aimed by the ones before it (speech does not shrink as 1 / speed), and the
slowest that fits is kept. One that still does not fit runs on into the gap before the
next cue (an *overrun*, reported), and is cut, with a 10 ms fade, where the next cue
starts (or where the original ends): cues never overlap.
Between cues the track is silent. It lasts until the last cue's end (or the last speech's,
if later), or exactly the original's length when one is given.

A cue the server refuses to say ("♪♪": nothing the voice can pronounce) is left silent
and reported with its line (status ``silent``, the server's reason); the rest are dubbed.
``strict``: such a cue stops the dub instead, naming its line; so does a file of which no
cue can be said (then the fault is likely not the cues': a voice the server does not
serve, say). Whether a text can be said is the server's to decide, by the voice's reading
(normalisation, lexicon, symbols: "&" is said "and", "♪" nothing), which no voice
description gives the client; it is asked once per cue all the same, by the natural take
every cue needs, so knowing costs no extra call.

    dubber = Dubber(lambda text, speed: client.synthesize(text, speed=speed, voice="joe"))
    dub = dubber.dub(read_cues(Path("film.srt")))
    sf.write("track.wav", dub.track, dub.sample_rate)
    Path("track.json").write_text(dub.report_json())
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field

import numpy as np
import numpy.typing as npt

from triton_tts.client.captions import _clock, _vtt_text
from triton_tts.client.datatypes import SynthesisResult, WordTime
from triton_tts.client.errors import RequestRejected
from triton_tts.client.subtitles import Cue, SubtitleError, cues_in_regions, snap
from triton_tts.client.vad import Region
from triton_tts.client.voices import VoiceInfo, split_voice_name

FloatArray = npt.NDArray[np.float32]

MAX_SPEED = 1.25
FRAME_S = 0.010  # the trimming's frame
SILENCE_DB = 40.0  # a frame this far under the loudest is silence
FLOOR = 1e-4  # ... and any frame under this RMS (about -80 dBFS)
FADE_S = 0.010  # on a cut
TOLERANCE_S = 0.020  # speech this little over its slot fits (one 20 ms frame)
MAX_TRIES = 4  # natural, then up to three faster takes
# The longest track a dub makes (4 h: 1.3 GB of float32 samples at 22,050 Hz); a cue or an
# original past it is refused before any synthesis. The gateway's --max-dub-seconds.
MAX_TRACK_S = 4 * 3600.0
# length ~ speed ** -k: VITS voices measure about 0.55 (rounded phoneme durations), XTTS 1
FIRST_K = 0.7
# How each cue went, one status a cue (Placed.status), in the summary's order.
STATUSES = ("fits", "sped_up", "overrun", "cut", "silent")


@dataclass(frozen=True)
class Speech:
    """A cue's synthesis, trimmed to its speech."""

    audio: FloatArray
    speed: float
    words: tuple[WordTime, ...]  # seconds from the trimmed audio's start

    def seconds(self, rate: int) -> float:
        return len(self.audio) / rate


@dataclass(frozen=True)
class Unspoken:
    """A cue the server refused to say, left silent: its refusal's message."""

    reason: str


@dataclass(frozen=True)
class Placed:
    """Where a cue's speech went (seconds in the track) and how it fit."""

    index: int
    line: int
    text: str
    cue_start: float
    cue_end: float
    start: float
    end: float
    natural_s: float  # its speech at speed 1
    speed: float  # the speed it was synthesised at
    overrun_s: float  # past the cue's end (into the gap)
    cut_s: float  # speech cut off where the next cue (or the original) starts
    moved_s: float  # by --snap: the cue's start moved to a detected onset
    # "fits", "sped_up", "overrun" (sped up as far as allowed, into the gap), "cut",
    # "silent" (the server would not say it: ``reason``)
    status: str
    words: tuple[WordTime, ...] = field(default=(), repr=False)  # seconds in the track
    reason: str = ""  # why a silent cue was not said (the server's words)


@dataclass(frozen=True)
class Dub:
    track: FloatArray
    sample_rate: int
    cues: tuple[Placed, ...]

    @property
    def duration_s(self) -> float:
        return len(self.track) / self.sample_rate

    def summary(self) -> dict[str, float | int]:
        """Every cue counted once, by its status (an overrun or cut cue was sped up too, but
        counts as what it ended as), and each count's share of the cues."""
        n = len(self.cues)
        count = {s: sum(c.status == s for c in self.cues) for s in STATUSES}
        return {
            "cues": n,
            "duration_s": round(self.duration_s, 3),
            **count,
            **{f"{s}_share": round(count[s] / n, 4) if n else 0.0 for s in STATUSES},
        }

    def report(self) -> dict[str, object]:
        cues = []
        for c in self.cues:
            entry = asdict(c)
            entry["words"] = [
                {"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)} for w in c.words
            ]
            for key in ("cue_start", "cue_end", "start", "end", "natural_s", "overrun_s", "cut_s", "moved_s"):
                entry[key] = round(entry[key], 3)
            entry["speed"] = round(c.speed, 4)
            cues.append(entry)
        return {"sample_rate": self.sample_rate, "summary": self.summary(), "cues": cues}

    def report_json(self) -> str:
        return json.dumps(self.report(), ensure_ascii=False, indent=2) + "\n"

    def report_vtt(self) -> str:
        """A WebVTT file of the speech as placed: a cue per line, from its speech's start to
        its end, each word after the first behind its timestamp tag (the actual word
        times, where the voice gives them)."""
        lines = ["WEBVTT", ""]
        for c in self.cues:
            if c.end <= c.start:
                continue
            lines += [str(c.index), f"{_clock(c.start, '.')} --> {_clock(c.end, '.')}"]
            words = [w for w in c.words if w.start < c.end]
            if words:
                parts = [_vtt_text(words[0].word)]
                parts += [f"<{_clock(max(w.start, c.start), '.')}>{_vtt_text(w.word)}" for w in words[1:]]
                lines.append(" ".join(parts))
            else:
                lines.append(_vtt_text(c.text))
            lines.append("")
        return "\n".join(lines)


def speech_bounds(audio: FloatArray, rate: int) -> tuple[int, int]:
    """The first and one past the last sample of speech (10 ms frames louder than 40 dB
    under the loudest, and than about -80 dBFS); (0, 0) for silence."""
    frame = max(1, round(FRAME_S * rate))
    n = len(audio) // frame
    if n == 0:
        return 0, 0
    rms = np.sqrt(np.mean(np.square(audio[: n * frame].astype(np.float64).reshape(n, frame)), axis=1))
    threshold = max(float(rms.max()) * 10 ** (-SILENCE_DB / 20), FLOOR)
    loud = np.flatnonzero(rms > threshold)
    if len(loud) == 0:
        return 0, 0
    return int(loud[0]) * frame, min(len(audio), (int(loud[-1]) + 1) * frame)


def trimmed(result: SynthesisResult, speed: float) -> Speech:
    first, last = speech_bounds(result.audio, result.sample_rate)
    offset = first / result.sample_rate
    words = tuple(
        WordTime(w.word, max(0.0, w.start - offset), max(0.0, w.end - offset)) for w in result.words
    )
    return Speech(np.asarray(result.audio[first:last], dtype=np.float32), speed, words)


Synthesize = Callable[[str, float], SynthesisResult]


def gives_timestamps(served: Sequence[VoiceInfo], voice: str | None) -> bool:
    """Whether ``voice`` (a name, ``name:speaker``, or None: the server's default, the
    first served) gives word timestamps, for the report's word times."""
    name = split_voice_name(voice or (served[0].name if served else ""))[0]
    return any(v.name == name and v.timestamps for v in served)


def place_by_speech(
    cues: list[Cue] | None,
    lines: Sequence[tuple[int, str]],
    regions: Sequence[Region],
    snap_s: float | None,
    source: str,
) -> list[Cue]:
    """The cues placed by an original's speech regions: a script's ``lines`` (``cues``
    None) at the regions' onsets, or timed cues snapped to an onset within ``snap_s``."""
    if cues is None:
        return cues_in_regions(lines, [(r.start, r.end) for r in regions], source)
    return snap(cues, [r.start for r in regions], snap_s or 0.0)


class Dubber:
    """Dubs cues through ``synthesize(text, speed)`` (one server call; it may be called
    from ``concurrency`` threads at once; a cue it cannot say raises RequestRejected).
    ``strict``: a cue the server will not say stops the dub (SubtitleError with its line)
    instead of being left silent."""

    def __init__(
        self,
        synthesize: Synthesize,
        max_speed: float = MAX_SPEED,
        concurrency: int = 8,
        progress: Callable[[int], None] | None = None,
        strict: bool = False,
        max_seconds: float = MAX_TRACK_S,
    ) -> None:
        if not 1.0 <= max_speed <= 4.0:
            raise ValueError(
                f"max_speed must be between 1.0 and 4.0 (the server's SPEED bound), not {max_speed:g}"
            )
        self.synthesize = synthesize
        self.max_speed = max_speed
        self.concurrency = max(1, concurrency)
        self.progress = progress or (lambda n: None)
        self.strict = strict
        self.max_seconds = max_seconds
        self.sample_rate = 0

    def _take(self, cue: Cue, speed: float) -> Speech:
        result = self.synthesize(cue.text, speed)
        self.sample_rate = self.sample_rate or result.sample_rate
        if result.sample_rate != self.sample_rate:
            raise ValueError(
                f"cue {cue.index} came at {result.sample_rate} Hz, the others at {self.sample_rate}"
            )
        self.progress(1)
        return trimmed(result, speed)

    def _run(self, jobs: Sequence[tuple[Cue, float]]) -> list[Speech]:
        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            return list(pool.map(lambda job: self._take(*job), jobs))

    def _natural(self, cues: Sequence[Cue], source: str) -> list[Speech | Unspoken]:
        """Each cue's take at speed 1, or the server's refusal to say it (strict: the first
        refusal stops the takes not yet begun, and the dub)."""
        stop = threading.Event()

        def one(cue: Cue) -> Speech | Unspoken | None:
            if stop.is_set():
                return None
            try:
                return self._take(cue, 1.0)
            except RequestRejected as err:
                self.progress(1)
                if self.strict:
                    stop.set()
                return Unspoken(str(err))

        with ThreadPoolExecutor(max_workers=self.concurrency) as pool:
            takes = list(pool.map(one, cues))
        refused = [(cue, take) for cue, take in zip(cues, takes, strict=True) if isinstance(take, Unspoken)]
        if refused and (self.strict or len(refused) == len(cues)):
            cue, why = refused[0]
            others = "" if self.strict or len(cues) == 1 else f", nor any of the other {len(cues) - 1}"
            raise SubtitleError(f"cue {cue.index} cannot be spoken{others} ({why.reason})", cue.line, source)
        return [take for take in takes if take is not None]  # a None only where strict raised

    def fit(self, cues: Sequence[Cue], source: str = "") -> list[tuple[Speech, float] | Unspoken]:
        """Each cue's speech, sped up where its slot needs it, with its natural length; or
        why the server would not say it."""
        natural = self._natural(cues, source)
        takes = {i: [take] for i, take in enumerate(natural) if isinstance(take, Speech)}
        for _ in range(MAX_TRIES - 1):
            todo = [(i, speed) for i, t in takes.items() if (speed := self._next_speed(cues[i], t))]
            if not todo:
                break
            for (i, _speed), faster in zip(todo, self._run([(cues[i], s) for i, s in todo]), strict=True):
                takes[i].append(faster)
        return [
            take
            if isinstance(take, Unspoken)
            else (self._best(cue, takes[i]), take.seconds(self.sample_rate))
            for i, (cue, take) in enumerate(zip(cues, natural, strict=True))
        ]

    def _fits(self, cue: Cue, take: Speech) -> bool:
        return take.seconds(self.sample_rate) <= cue.slot_s + TOLERANCE_S

    def _best(self, cue: Cue, takes: list[Speech]) -> Speech:
        """The slowest take that fits its slot, else the shortest."""
        fitting = [t for t in takes if self._fits(cue, t)]
        if fitting:
            return min(fitting, key=lambda t: t.speed)
        return min(takes, key=lambda t: (len(t.audio), -t.speed))

    def _next_speed(self, cue: Cue, takes: list[Speech]) -> float | None:
        """The speed of the cue's next take, or None: it fits, or no faster take can help.
        Speech does not shrink as 1 / speed (VITS rounds each phoneme's duration up, and
        its durations are sampled): length ~ speed ** -k, k first FIRST_K, then fitted to the
        natural take and the last."""
        if any(self._fits(cue, t) for t in takes):
            return None
        last = takes[-1]
        if last.speed >= self.max_speed:
            return None
        target = min(cue.slot_s - TOLERANCE_S / 2, cue.slot_s * 0.98)  # a little short: takes vary
        length = last.seconds(self.sample_rate)
        k = FIRST_K
        if len(takes) > 1:  # from the natural take and the last: the widest span, the least noise
            first = takes[0]
            shrink = math.log(first.seconds(self.sample_rate) / max(length, 1e-3))
            k = min(max(shrink / math.log(last.speed / first.speed), 0.3), 1.5)  # a longer take: 0.3
        wanted = last.speed * float((length / max(target, 1e-3)) ** (1 / k))
        return min(self.max_speed, max(wanted, last.speed * 1.02))

    def dub(self, cues: Sequence[Cue], length_s: float | None = None, source: str = "") -> Dub:
        """The track: ``length_s`` long when given (the original's), else until the last
        cue's end or the last speech's end. ``source``: the cues' file, for errors."""
        if not cues:
            raise ValueError("no cues to dub")
        last = max(cues, key=lambda cue: cue.end)
        if max(length_s or 0.0, last.end) > self.max_seconds:
            raise SubtitleError(
                f"the track would last {max(length_s or 0.0, last.end):.0f} s, over the "
                f"{self.max_seconds:g} s a dub may",
                last.line if last.end > (length_s or 0.0) else None,
                source,
            )
        fitted = self.fit(cues, source)
        return place(cues, fitted, self.sample_rate, length_s)


def place(
    cues: Sequence[Cue],
    fitted: Sequence[tuple[Speech, float] | Unspoken],
    rate: int,
    length_s: float | None = None,
) -> Dub:
    """Cues' speech laid into one track at their starts, cut where the next begins; an
    unspoken cue's slot left silent."""
    ends = [c.start for c in cues[1:]] + [length_s if length_s is not None else math.inf]
    total = length_s
    if total is None:
        last = fitted[-1]
        total = max(
            cues[-1].end, cues[-1].start + (0.0 if isinstance(last, Unspoken) else last[0].seconds(rate))
        )
    track = np.zeros(round(total * rate), dtype=np.float32)
    placed = []
    for cue, fit, limit in zip(cues, fitted, ends, strict=True):
        if isinstance(fit, Unspoken):
            silent = Placed(cue.index, cue.line, cue.text, cue.start, cue.end, start=cue.start, end=cue.start,
                            natural_s=0.0, speed=1.0, overrun_s=0.0, cut_s=0.0, moved_s=cue.moved_s,
                            status="silent", reason=fit.reason)  # fmt: skip
            placed.append(silent)
            continue
        speech, natural = fit
        begin = round(cue.start * rate)
        stop = min(begin + len(speech.audio), round(min(limit, total) * rate), len(track))
        audio = speech.audio[: max(0, stop - begin)].copy()
        cut = len(speech.audio) - len(audio)
        if cut > 0 and len(audio):
            fade = min(len(audio), round(FADE_S * rate))
            audio[len(audio) - fade :] *= np.linspace(1.0, 0.0, fade, dtype=np.float32)
        track[begin : begin + len(audio)] += audio
        start, end = begin / rate, (begin + len(audio)) / rate
        overrun = max(0.0, end - cue.end) if end - cue.end > TOLERANCE_S else 0.0
        if cut:
            status = "cut"
        elif overrun:
            status = "overrun"
        else:
            status = "sped_up" if speech.speed > 1.0 else "fits"
        words = tuple(
            WordTime(w.word, start + w.start, min(end, start + w.end))
            for w in speech.words
            if start + w.start < end
        )
        placed.append(
            Placed(
                cue.index,
                cue.line,
                cue.text,
                cue.start,
                cue.end,
                start,
                end,
                natural,
                speech.speed,
                overrun,
                cut / rate,
                cue.moved_s,
                status,
                words,
            )
        )
    return Dub(track, rate, tuple(placed))
