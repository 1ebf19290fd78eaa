"""Admission by work: a request is refused only when the work admitted ahead of it would
make it wait longer than its budget.

A request's cost varies a thousandfold with its text and SPEED, so counting requests
refuses light load and admits heavy load. Here every admitted request is a line in one
:class:`Ledger` that every process of the server shares (``tts``'s instances and
``tts_stream``: each a Python-backend stub of its own), in the machine's own unit:

- **capacity** ``C`` per voice: seconds of audio the server makes per second when busy.
  ``triton-tts serve`` measures it once the server is warm
  (:func:`triton_tts.runtime.capacity.measure_capacity`, a burst of sentences per voice);
  afterwards every chunk done feeds a window, and a window in which texts were waiting
  throughout (the server was busy) corrects ``C`` toward what was really made
  (:meth:`Ledger.completed`). A server started without the measurement starts at
  :data:`DEFAULT_CAPACITY` and learns the same way.
- **work**: a request's predicted audio (characters x the voice's calibrated seconds per
  character, triton_tts/runtime/limits.py, over SPEED) / ``C``: the machine-seconds it needs.
- **texts** (``tts``): the wait of a new text is the text work admitted and not yet done,
  over the share of the machine the listeners leave. Above its budget it is refused: the
  request's own deadline (Triton's request ``timeout``, at most ``max_wait_s``) or, when it
  states none, ``text_budget_s``, sized so that a burst the machine can serve in that time
  is queued, not refused (docs/deployment.md, "Admission").
- **listeners** (``tts_stream``): a paced stream needs its audio at real time, ``1 / C``
  of the machine while it generates. A new one is admitted while the listeners' demand
  stays under ``1 - stream_headroom``, and while the first chunks ahead of its own (they
  overtake everything else: the priority levels below) take at most
  ``first_chunk_budget_s``. In a burst, each new first chunk is made shorter
  (:attr:`Load.first_chunk_scale`). A stream that does not fit now waits for room in a
  queue, first come first served (:meth:`Ledger.enqueue_stream`), as long as its predicted
  wait (:meth:`Ledger.stream_wait_s`) stays within its budget: its deadline, or
  ``stream_wait_s`` when it states none; past that it is refused at once.
- **callers**: a caller named by the ``caller`` request parameter (the gateway names each
  API key's) may hold at most ``caller_share`` of the text budget and of the listeners'
  room; what it holds beyond that does not count against other callers' waits. Unnamed
  callers share the rest: Triton 2.51 tells a Python model nothing of a request's peer.

A refusal is immediate (no model runs) and says how long to wait: UNAVAILABLE with
:func:`busy_message`, whose "retry after N s" the client library and the gateway read
(:func:`retry_after`). Each ledger operation is a short critical section under an
``flock`` of a file in the server's run folder; a line whose process died is dropped.
Usable outside Triton: it imports nothing of it.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ADMISSION_DIR_ENV = "TRITON_TTS_ADMISSION_DIR"  # set by triton_tts.ops.server.TritonServer
DEFAULT_CAPACITY = 10.0  # audio s/s assumed of a voice before anything was measured
# The source of a capacity its voice's own model measures (XTTS: Ledger.observe_capacity);
# the windows of the chunk voices (Ledger._observe) neither correct it nor count its work.
MODEL_SOURCE = "model"
MIN_TEXT_SHARE = 0.1  # of the machine texts are counted on, however many listeners
WINDOW_S = 3.0  # capacity is corrected from windows this long
CORRECTION = 0.3  # weight of one busy window's throughput in the capacity
BUSY_BACKLOG_S = 0.5  # texts' work waiting, machine-seconds, for a window to count as busy
BURST_FIRST_CHUNKS = 4  # first chunks waiting that make a new one 1 / (1 + 1) as long
EPSILON = 1e-9  # sums of shares that are exactly at a bound are within it
STATE_FILE = "ledger.json"
LOCK_FILE = "ledger.lock"
# Clients recognise a refusal for load by these words and read its hint (retry_after).
BUSY = "server busy"
_RETRY = re.compile(r"retry after (\d+(?:\.\d+)?) s")


def busy_message(why: str, retry_after_s: float) -> str:
    """What a refused request is told: why, and when to come back."""
    return f"{BUSY}: {why}; retry after {max(0.1, retry_after_s):.1f} s"


def retry_after(message: str) -> float | None:
    """The hint in a refusal's message (seconds), or None if it has none."""
    found = _RETRY.search(message)
    return float(found.group(1)) if found else None


class Refused(Exception):
    """Admitting the request would break a budget; ``retry_after_s`` says when it might not."""

    def __init__(self, why: str, retry_after_s: float) -> None:
        self.reason = why
        self.retry_after_s = max(0.1, retry_after_s)
        super().__init__(busy_message(why, self.retry_after_s))


@dataclass(frozen=True)
class AdmissionSettings:
    """The budgets (model parameters rendered by triton_tts/build/model_configs.py)."""

    # The wait of a request that states no deadline (Triton's request timeout): long enough
    # that a bounded burst is queued and served rather than refused (docs/deployment.md).
    text_budget_s: float = 45.0
    stream_wait_s: float = 45.0  # a stream's wait for room, when it states no deadline
    max_wait_s: float = 300.0  # the most a request's own deadline may ask to wait
    first_chunk_budget_s: float = 1.0
    stream_headroom: float = 0.15
    caller_share: float = 0.5
    max_texts: int = 0  # a safety bound on texts in progress (0: none)
    max_streams: int = 0  # and on streams (0: none)
    paced: bool = True  # streams are paced to playback (a listener's real-time demand)
    counted: bool = False  # admission=requests: the count bounds only (no work, no caller)

    @classmethod
    def from_parameters(cls, params: Mapping[str, str]) -> AdmissionSettings:
        return cls(
            text_budget_s=int(params.get("text_budget_ms", "45000")) / 1000,
            stream_wait_s=int(params.get("stream_wait_ms", "45000")) / 1000,
            max_wait_s=int(params.get("max_wait_ms", "300000")) / 1000,
            first_chunk_budget_s=int(params.get("first_chunk_budget_ms", "1000")) / 1000,
            stream_headroom=int(params.get("stream_headroom_pct", "15")) / 100,
            caller_share=int(params.get("caller_share_pct", "50")) / 100,
            max_texts=int(params.get("max_texts", "0")),
            max_streams=int(params.get("max_streams", "0")),
            paced=int(params.get("lead_ms", "1")) > 0,
            counted=params.get("admission", "work") == "requests",
        )

    def text_budget(self, timeout_us: int = 0) -> float:
        """How long a text may wait: its own deadline (Triton's request ``timeout``, in
        microseconds; 0: none stated), at most ``max_wait_s``, or ``text_budget_s``."""
        return self._budget(timeout_us, self.text_budget_s)

    def stream_budget(self, timeout_us: int = 0) -> float:
        """How long a stream may wait for room: as :meth:`text_budget`, or ``stream_wait_s``."""
        return self._budget(timeout_us, self.stream_wait_s)

    def _budget(self, timeout_us: int, unstated_s: float) -> float:
        return min(timeout_us / 1e6, self.max_wait_s) if timeout_us > 0 else unstated_s


@dataclass
class Work:
    """One admitted request."""

    id: str
    kind: str  # "text" or "stream"
    voice: str
    caller: str  # "" for unnamed callers
    remaining_s: float  # machine-seconds of synthesis not done yet
    first_s: float = 0.0  # streams: machine-seconds of the first chunk, until it is done
    rate: float = 0.0  # streams: audio seconds per second its listener needs (1 when paced)
    pid: int = field(default_factory=os.getpid)
    admitted_at: float = field(default_factory=time.time)
    ends_at: float = 0.0  # streams: when its generation should end (its audio less the lead)
    # the line's own key: request ids are the clients' and need not be unique
    key: str = field(default_factory=lambda: uuid.uuid4().hex)


@dataclass(frozen=True)
class Load:
    """What the ledger holds, for decisions and metrics."""

    capacity: dict[str, float]
    text_work_s: float  # machine-seconds of admitted texts not done yet
    first_work_s: float  # of first chunks not sent yet
    stream_demand: float  # listeners' share of the machine
    texts: int
    streams: int
    first_chunks: int = 0  # streams whose first chunk is not made yet

    @property
    def first_chunk_scale(self) -> float:
        """How much shorter a new stream's first chunk is made: the more first chunks are
        waiting ahead of it (a burst of streams), the shorter, down to half, so that the
        burst's last first chunk comes sooner; its ramp then grows from there."""
        return max(0.5, 1.0 / (1.0 + self.first_chunks / BURST_FIRST_CHUNKS))

    @property
    def text_share(self) -> float:
        return max(MIN_TEXT_SHARE, 1.0 - self.stream_demand)

    @property
    def text_wait_s(self) -> float:
        """How long a new text would wait for the work admitted ahead of it."""
        return (self.text_work_s + self.first_work_s) / self.text_share


def default_directory(model_folder: str) -> Path:
    """A ledger per server when ``triton-tts serve`` named none: keyed by the repository
    (the parent of the model's folder, Triton's ``model_repository`` argument to a Python
    model: every model of one repository shares it) and the tritonserver process (the
    stubs' parent)."""
    repository = Path(model_folder).resolve().parent
    key = hashlib.sha256(f"{repository}:{os.getppid()}".encode()).hexdigest()[:16]
    shm = Path("/dev/shm")  # noqa: S108 - a fallback; serve sets its own folder
    base = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
    return base / f"triton-tts-admission-{key}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Ledger:
    """The server's admitted work, shared between processes through one folder."""

    def __init__(
        self,
        directory: Path | str,
        settings: AdmissionSettings | None = None,
        clock: Callable[[], float] = time.time,
        alive: Callable[[int], bool] = _alive,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.settings = settings or AdmissionSettings()
        self.clock = clock
        self.alive = alive

    @classmethod
    def from_environment(cls, settings: AdmissionSettings, repository: str) -> Ledger:
        named = os.environ.get(ADMISSION_DIR_ENV, "").strip()
        return cls(Path(named) if named else default_directory(repository), settings)

    # -- the shared state -------------------------------------------------------------
    @contextlib.contextmanager
    def _state(self, write: bool = True) -> Iterator[dict[str, Any]]:
        with open(self.directory / LOCK_FILE, "a+", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                path = self.directory / STATE_FILE
                try:
                    state = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    state = {}
                state.setdefault("capacity", {})
                state.setdefault("source", {})
                state.setdefault("stages", {})
                state.setdefault("work", [])
                state.setdefault("queue", [])  # streams waiting for room, in arrival order
                state.setdefault("window", {"start": self.clock(), "used": 0.0, "busy": True})
                state.setdefault("demanded", {"admitted": 0.0, "refused": 0.0})
                state["work"] = [w for w in state["work"] if self.alive(int(w["pid"]))]
                state["queue"] = [q for q in state["queue"] if self.alive(int(q["pid"]))]
                yield state
                if write:
                    scratch = path.with_suffix(f".{os.getpid()}.tmp")
                    scratch.write_text(json.dumps(state), encoding="utf-8")
                    os.replace(scratch, path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @staticmethod
    def _capacity(state: dict[str, Any], voice: str) -> float:
        return float(state["capacity"].get(voice, DEFAULT_CAPACITY))

    def _load(self, state: dict[str, Any]) -> Load:
        work = [Work(**w) for w in state["work"]]
        return Load(
            capacity={v: float(c) for v, c in state["capacity"].items()},
            text_work_s=sum(w.remaining_s for w in work if w.kind == "text"),
            first_work_s=sum(w.first_s for w in work if w.kind == "stream"),
            stream_demand=sum(w.rate / self._capacity(state, w.voice) for w in work if w.kind == "stream"),
            texts=sum(w.kind == "text" for w in work),
            streams=sum(w.kind == "stream" for w in work),
            first_chunks=sum(w.kind == "stream" and w.first_s > 0 for w in work),
        )

    def load(self) -> Load:
        with self._state(write=False) as state:
            return self._load(state)

    def capacity(self, voice: str) -> float:
        with self._state(write=False) as state:
            return self._capacity(state, voice)

    def capacities(self) -> dict[str, tuple[float, str, dict[str, float]]]:
        """voice -> (capacity, where it came from, per-stage capacity per instance)."""
        return self.snapshot()[1]

    def snapshot(self) -> tuple[Load, dict[str, tuple[float, str, dict[str, float]]]]:
        """The load and the capacities, read at once (what the metrics report)."""
        with self._state(write=False) as state:
            capacities = {
                v: (float(c), str(state["source"].get(v, "")), dict(state["stages"].get(v, {})))
                for v, c in state["capacity"].items()
            }
            return self._load(state), capacities

    def set_capacity(
        self,
        voice: str,
        audio_per_s: float,
        stages: Mapping[str, float] | None = None,
        pinned: bool = False,
    ) -> None:
        """The measured capacity of a voice (and of its stages, per instance); ``pinned``:
        a figure an operator gives (from a benchmark, say), kept as it is."""
        with self._state() as state:
            state["capacity"][voice] = float(audio_per_s)
            state["source"][voice] = "pinned" if pinned else "warm-up"
            if stages:
                state["stages"][voice] = {k: float(v) for k, v in stages.items()}

    def observe_capacity(
        self, voice: str, audio_per_s: float | None, default: float, busy: bool = True
    ) -> float:
        """The capacity of a voice whose own model measures what it makes (XTTS: its decode
        loop batches its own slots at a rate of its own, which the chunk voices' windows
        say nothing of). ``default`` until there is a figure; then a window's throughput
        ``audio_per_s`` moves it :data:`CORRECTION` of the way there when the model was
        ``busy`` throughout, or when it made more. Marked :data:`MODEL_SOURCE`, so
        :meth:`_observe` leaves it (and its work) alone; a pinned figure stays as it is.
        Returns the capacity now."""
        with self._state() as state:
            source = state["source"].get(voice)
            if source == "pinned":
                return self._capacity(state, voice)
            if voice not in state["capacity"] or source == "default":
                state["capacity"][voice] = float(default)
            state["source"][voice] = MODEL_SOURCE
            capacity = self._capacity(state, voice)
            if audio_per_s is not None and audio_per_s > 0 and (busy or audio_per_s > capacity):
                capacity += CORRECTION * (audio_per_s - capacity)
                state["capacity"][voice] = capacity
            return capacity

    # -- decisions --------------------------------------------------------------------
    def admit_text(
        self, request_id: str, voice: str, caller: str, audio_s: float, budget_s: float | None = None
    ) -> Work:
        """Admit a text of ``audio_s`` predicted seconds that may wait ``budget_s`` (default:
        the settings' text budget), or raise :class:`Refused`."""
        s = self.settings
        budget = s.text_budget_s if budget_s is None else budget_s
        if s.counted:
            caller, audio_s = "", 0.0
        with self._state() as state:
            load = self._load(state)
            cost = audio_s / self._capacity(state, voice)
            try:
                if s.max_texts and load.texts >= s.max_texts:
                    raise Refused(f"{load.texts} texts in progress, the most tts takes", 1.0)
                if caller:
                    own = (
                        sum(w["remaining_s"] for w in state["work"] if w["caller"] == caller)
                        / load.text_share
                    )
                    allowed = s.caller_share * s.text_budget_s
                    if own > allowed + EPSILON:
                        raise Refused(
                            f"caller {caller!r} has ~{own:.1f} s of work admitted (its share: {allowed:g} s)",
                            own - allowed,
                        )
                wait = self._text_wait(state, load, caller)
                if wait > budget + EPSILON:
                    raise Refused(
                        f"a text would wait ~{wait:.1f} s for the work admitted ahead of it "
                        f"(its budget: {budget:g} s)",
                        wait - budget,
                    )
            except Refused:
                state["demanded"]["refused"] += audio_s
                raise
            work = Work(request_id, "text", voice, caller, cost)
            state["work"].append(asdict(work))
            state["demanded"]["admitted"] += audio_s
            return work

    def admit_stream(
        self,
        request_id: str,
        voice: str,
        caller: str,
        audio_s: float,
        first_audio_s: float,
        lead_s: float,
        ticket: str | None = None,
        queueing: bool = False,
    ) -> Work:
        """Admit a listener (``audio_s`` in all, ``first_audio_s`` in its first chunk), or
        raise :class:`Refused`. Unpaced streams take the machine as texts do. Streams
        waiting for room go first: a newcomer (or a ``ticket`` of :meth:`enqueue_stream`
        with others ahead of it) is refused while any waits ahead of it. ``queueing``: a
        refusal is not counted as refused demand (the stream waits; :meth:`refused` counts
        it if it never gets in)."""
        s = self.settings
        if s.counted:
            caller, audio_s, first_audio_s, lead_s = "", 0.0, 0.0, 0.0
        with self._state() as state:
            load = self._load(state)
            capacity = self._capacity(state, voice)
            rate = 1.0 / capacity if s.paced else 0.0  # of the machine
            first = first_audio_s / capacity
            try:
                ahead = self._queued_ahead(state, ticket)
                if ahead:
                    raise Refused(
                        f"{len(ahead)} stream(s) wait for room ahead of it",
                        self._queue_wait(state, ahead),
                    )
                if s.max_streams and load.streams >= s.max_streams:
                    raise Refused(f"{load.streams} streams in progress, the most tts_stream takes", 1.0)
                if load.first_work_s > s.first_chunk_budget_s + EPSILON:
                    raise Refused(
                        f"a first chunk would wait ~{load.first_work_s:.1f} s for those ahead of it "
                        f"(at most {s.first_chunk_budget_s:g} s)",
                        load.first_work_s - s.first_chunk_budget_s,
                    )
                room = 1.0 - s.stream_headroom
                if s.paced and load.stream_demand + rate > room + EPSILON:
                    raise Refused(
                        f"{load.streams} listeners take {load.stream_demand:.0%} of capacity "
                        f"(at most {room:.0%}: another would hear gaps)",
                        self._next_end(state) - self.clock(),
                    )
                if not s.paced and load.text_wait_s > s.text_budget_s:
                    raise Refused(
                        f"a stream would wait ~{load.text_wait_s:.1f} s for the work admitted ahead of it",
                        load.text_wait_s - s.text_budget_s,
                    )
                if caller and s.paced:
                    own = sum(
                        float(w["rate"]) / self._capacity(state, w["voice"])
                        for w in state["work"]
                        if w["caller"] == caller and w["kind"] == "stream"
                    )
                    if own + rate > s.caller_share * room + EPSILON:
                        raise Refused(
                            f"caller {caller!r} has listeners taking {own:.0%} of capacity, "
                            f"its share is {s.caller_share * room:.0%}",
                            self._next_end(state, caller) - self.clock(),
                        )
            except Refused:
                if not queueing:
                    state["demanded"]["refused"] += audio_s
                raise
            now = self.clock()
            work = Work(
                request_id,
                "stream",
                voice,
                caller,
                0.0 if s.paced else audio_s / capacity,
                first,
                1.0 if s.paced else 0.0,
                ends_at=now + max(0.0, audio_s - lead_s),
            )
            state["work"].append(asdict(work))
            state["demanded"]["admitted"] += audio_s
            state["queue"] = [q for q in state["queue"] if q["key"] != ticket]
            return work

    # -- streams waiting for room -----------------------------------------------------
    def enqueue_stream(self, voice: str, audio_s: float, lead_s: float) -> tuple[str, float]:
        """A place in the queue of streams waiting for room: its ticket (for
        :meth:`admit_stream`, :meth:`stream_wait_s` and :meth:`leave_queue`) and its
        predicted wait, read in the same critical section; refused when as many streams
        wait as the server takes in progress (``max_streams``)."""
        with self._state() as state:
            waiting = len(state["queue"])
            if self.settings.max_streams and waiting >= self.settings.max_streams:
                raise Refused(
                    f"{waiting} streams already wait for room", self._queue_wait(state, state["queue"])
                )
            ticket = uuid.uuid4().hex
            state["queue"].append(
                {
                    "key": ticket,
                    "voice": voice,
                    "hold_s": max(0.0, audio_s - lead_s),
                    "pid": os.getpid(),
                    "since": self.clock(),
                }
            )
            return ticket, self._queue_wait(state, self._queued_ahead(state, ticket))

    def stream_wait_s(self, ticket: str) -> float:
        """The predicted wait of a queued stream: the admitted streams' time left and the
        holds of those queued ahead of it, shared out over the streams that run at once,
        plus the first chunks not made yet (a fluid estimate: streams end one by one)."""
        with self._state(write=False) as state:
            return self._queue_wait(state, self._queued_ahead(state, ticket))

    def refused(self, audio_s: float) -> None:
        """A queued stream that never got in: its audio counts as refused demand."""
        with self._state() as state:
            state["demanded"]["refused"] += audio_s

    def leave_queue(self, ticket: str) -> None:
        with self._state() as state:
            state["queue"] = [q for q in state["queue"] if q["key"] != ticket]

    @staticmethod
    def _queued_ahead(state: dict[str, Any], ticket: str | None) -> list[dict[str, Any]]:
        """The queued streams ahead of ``ticket`` (None: a newcomer, behind all of them)."""
        own = next((q for q in state["queue"] if q["key"] == ticket), None)
        if own is None:
            return list(state["queue"])
        return [q for q in state["queue"] if q["key"] != ticket and float(q["since"]) <= float(own["since"])]

    def _queue_wait(self, state: dict[str, Any], ahead: list[dict[str, Any]]) -> float:
        now = self.clock()
        streams = [w for w in state["work"] if w["kind"] == "stream"]
        left = sum(max(0.0, float(w["ends_at"]) - now) for w in streams)
        held = sum(float(q["hold_s"]) for q in ahead)
        return (left + held) / max(1, len(streams)) + self._load(state).first_work_s

    def _text_wait(self, state: dict[str, Any], load: Load, caller: str) -> float:
        """The wait of a new text from ``caller``: the texts' work ahead of it, where each
        other named caller counts for at most its share (what it has beyond that runs
        interleaved with the newcomer's chunks, and that caller is refused more until it
        is done), plus the first chunks ahead, over the share listeners leave."""
        cap = self.settings.caller_share * self.settings.text_budget_s * load.text_share
        per_caller: dict[str, float] = {}
        for w in state["work"]:
            if w["kind"] == "text":
                per_caller[w["caller"]] = per_caller.get(w["caller"], 0.0) + float(w["remaining_s"])
        ahead = sum(work if who in ("", caller) else min(work, cap) for who, work in per_caller.items())
        return (ahead + load.first_work_s) / load.text_share

    def _next_end(self, state: dict[str, Any], caller: str | None = None) -> float:
        ends = [
            float(w["ends_at"])
            for w in state["work"]
            if w["kind"] == "stream" and (caller is None or w["caller"] == caller)
        ]
        return min(ends) if ends else self.clock() + 1.0

    # -- progress ---------------------------------------------------------------------
    def completed(self, work: Work, audio_s: float, first: bool = False) -> None:
        """``audio_s`` of ``work``'s audio is made (``first``: its first chunk); the
        capacity window counts it."""
        with self._state() as state:
            if work.voice not in state["capacity"]:  # nothing measured: learn from the default
                state["capacity"][work.voice] = DEFAULT_CAPACITY
                state["source"][work.voice] = "default"
            capacity = self._capacity(state, work.voice)
            for line in state["work"]:
                if line["key"] == work.key:
                    line["remaining_s"] = max(0.0, float(line["remaining_s"]) - audio_s / capacity)
                    if first:
                        line["first_s"] = 0.0
            if state["source"].get(work.voice) != MODEL_SOURCE:  # its model measures it itself
                self._observe(state, audio_s / capacity)

    def _observe(self, state: dict[str, Any], used_s: float) -> None:
        """Throughput per window: in a busy window (texts waited throughout) the machine
        made what it can, so capacity moves toward it; in any window, more than capacity
        raises it."""
        window = state["window"]
        window["used"] = float(window["used"]) + used_s
        backlog = self._backlog(state)
        window["busy"] = bool(window["busy"]) and backlog >= BUSY_BACKLOG_S
        now = self.clock()
        elapsed = now - float(window["start"])
        if elapsed < WINDOW_S:
            return
        ratio = float(window["used"]) / elapsed  # 1: made what the capacity says
        if window["busy"] or ratio > 1.0:
            ratio = min(2.0, max(0.5, ratio))
            factor = 1.0 - CORRECTION + CORRECTION * ratio
            kept = ("pinned", MODEL_SOURCE)
            for voice in [v for v in state["capacity"] if state["source"].get(v) not in kept]:
                state["capacity"][voice] = float(state["capacity"][voice]) * factor
                state["source"][voice] = "live"
        state["window"] = {"start": now, "used": 0.0, "busy": backlog >= BUSY_BACKLOG_S}

    @staticmethod
    def _backlog(state: dict[str, Any]) -> float:
        """Texts' work waiting, machine-seconds, of the voices the windows correct: an XTTS
        text waiting says nothing of whether the chunk voices were busy."""
        return sum(
            float(w["remaining_s"])
            for w in state["work"]
            if w["kind"] == "text" and state["source"].get(w["voice"]) != MODEL_SOURCE
        )

    def release(self, work: Work) -> None:
        with self._state() as state:
            state["work"] = [w for w in state["work"] if w["key"] != work.key]

    def demanded(self) -> dict[str, float]:
        """Audio seconds asked for since the server started, admitted and refused."""
        with self._state(write=False) as state:
            return {k: float(v) for k, v in state["demanded"].items()}


def predicted_audio_s(characters: int, seconds_per_char: float, speed: float | None) -> float:
    """Seconds of audio a normalised text of ``characters`` will take."""
    return characters * seconds_per_char / (speed or 1.0)
