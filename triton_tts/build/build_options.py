"""What a build is made of: the options a deployment tunes and the voices it serves.

triton_tts/build/model_configs.py renders them into every ``config.pbtxt``. Each option is
declared here once, with its help and bounds, so the ``triton-tts`` flags
(triton_tts/cli/options.py) and the Helm chart's ``build.*`` values (tests/test_helm_chart.py)
cannot drift apart. Why each default is what it is, with the measurements behind it:
docs/performance.md, "How the shipped defaults were chosen".
"""

from __future__ import annotations

import json
from dataclasses import Field, dataclass, field, fields
from typing import Any, TypeVar

from triton_tts.client.voices import CHUNK_MODEL, VoiceInfo
from triton_tts.runtime.limits import MAX_CHUNK_IDS, ChunkLimits
from triton_tts.text.pronounce import Lexicon

_T = TypeVar("_T")

# The default voice's (joe's) chunk budget as triton_tts/runtime/limits.py measures it; a build
# measures every voice it serves.
DEFAULT_CHUNK_LIMITS = ChunkLimits(
    MAX_CHUNK_IDS, 4160, ((0.0, 3.716), (1.0, 3.951), (2.0, 15.506)), seconds_per_char=0.0526
).to_json()
DEFAULT_VOICE = VoiceInfo(
    "joe", "en-us", 22050, {}, chunk_limits=json.loads(DEFAULT_CHUNK_LIMITS), timestamps=True
)


@dataclass(frozen=True)
class VoiceModels:
    """One voice's models in the repository: the voice as it is served (what the tts
    models' voices JSON says of it) and what its stages' configs need beyond that."""

    served: VoiceInfo = DEFAULT_VOICE
    latent_channels: int = 192
    acoustic_speaker: bool = False  # acoustic model takes SPEAKER_ID
    vocoder_speaker: bool = False  # vocoder takes SPEAKER_ID (multi-speaker VITS)
    native_acoustic: bool = True  # False: the acoustic stage runs in Python (Tacotron2, batch 1)
    max_items: int = 0  # the voice's graphs run at most this many items at once (0: any)
    style: bool = False  # a style voice (Kokoro): preprocess makes STYLE, the acoustic model takes it
    # The symbols a given pronunciation (SSML phoneme, a lexicon entry) may use; "": the
    # voice takes none (characters, pinyin); None: not known here (preprocess still checks).
    phonemes: str | None = None
    # A pinyin voice's syllables (voice.json: sound -> initial, final): what its given
    # pronunciations (SSML x-pinyin, a Mandarin lexicon entry) may say.
    syllables: dict[str, list[str]] | None = None

    @property
    def default(self) -> bool:
        """The default voice keeps the plain model names."""
        return self.served.model == CHUNK_MODEL

    def model(self, stage: str) -> str:
        return self.served.stage_model(stage)

    @property
    def chunk_limits(self) -> str:
        """The voice's chunk budget as the stages' configs carry it (limits.ChunkLimits' JSON)."""
        return json.dumps(self.served.chunk_limits, sort_keys=True)

    def items_per_run(self, option: int) -> int:
        """A stage's items per run: the build option, within what the voice's graphs take."""
        return min(option, self.max_items) if self.max_items > 0 else option


THREADS = r"^(auto|[1-9][0-9]*)$"  # intra-op threads: a count, or "auto"


def option(
    default: _T,
    help: str,
    *,
    minimum: int | None = None,
    maximum: int | None = None,
    pattern: str | None = None,
) -> _T:
    """A build option, declared once: ``triton-tts build-repo``/``serve`` take it as
    ``--field-name`` (flags generated in triton_tts/cli/options.py) and the Helm chart as
    ``build.fieldName`` (tests/test_helm_chart.py holds the chart's values and schema to
    this declaration). ``minimum``/``maximum`` bound an integer (each item of a tuple),
    ``pattern`` a string; the CLI and the chart's schema both enforce them."""
    bounds = {"help": help, "minimum": minimum, "maximum": maximum, "pattern": pattern}
    return field(default=default, metadata=bounds)


@dataclass(frozen=True)
class BuildOptions:
    """Knobs a deployment tunes; the defaults were measured on a 2-core CPU machine
    (docs/performance.md, "How the shipped defaults were chosen", option by option)."""

    max_batch_size: int = option(32, "largest batch any model takes", minimum=1, maximum=256)
    preprocess_instances: int = option(1, "preprocess (espeak-ng) instances, CPU", minimum=1)
    # "auto" threads: a model's instances share the cores evenly (triton_tts/runtime/onnx_session.py).
    acoustic_instances: int = option(2, "acoustic instances on CPU (and Tacotron2's loop)", minimum=1)
    vocoder_instances: int = option(2, "vocoder instances on CPU", minimum=1)
    acoustic_threads: str = option("auto", "acoustic intra-op threads on CPU, or auto", pattern=THREADS)
    vocoder_threads: str = option("auto", "vocoder intra-op threads on CPU, or auto", pattern=THREADS)
    # 1: a free instance takes the next request at once; empty: ragged batches of what is queued.
    cpu_preferred_batch_sizes: tuple[int, ...] = option(
        (1,), "CPU acoustic/vocoder batcher; none: batch whatever is queued", minimum=1
    )
    queue_delay_us: int = option(
        2000, "CPU batchers' wait for a fuller batch (acoustic/vocoder: without preferred sizes)", minimum=0
    )
    # ONNX runs within one Triton execution (triton_tts/runtime/stages.py); the caps bound their memory.
    acoustic_items_per_run: int = option(1, "acoustic items per onnxruntime run, CPU", minimum=1)
    vocoder_items_per_run: int = option(1, "vocoder items per onnxruntime run, CPU", minimum=1)
    max_padded_phonemes: int = option(8192, "acoustic run's padded ids at most, CPU", minimum=1)
    max_padded_frames: int = option(4000, "vocoder run's padded frames at most, CPU", minimum=1)
    gpu_instances: int = option(1, "instances per GPU model", minimum=1)
    gpu_preferred_batch_sizes: tuple[int, ...] = option((8, 16), "GPU batcher's preferred sizes", minimum=1)
    gpu_queue_delay_us: int = option(3000, "GPU batcher's wait for a fuller batch", minimum=0)
    # Long text: a stream's chunks start short and ramp up; tts keeps whole sentences
    # (its first chunk: chunking.FIRST_CHUNK_CHARS, no ramp).
    first_chunk_chars: int = option(40, "tts_stream: first chunk's characters at most", minimum=1)
    chunk_chars: int = option(400, "tts: later chunks' characters at most", minimum=1)
    stream_chunk_chars: int = option(120, "tts_stream: later chunks' characters at most", minimum=1)
    chunk_growth: int = option(
        2, "tts_stream: a later chunk is at most this x the characters before it; 0: no ramp", minimum=0
    )
    chunks_in_flight: int = option(2, "tts: chunks of one text synthesised at once", minimum=1)
    stream_chunks_in_flight: int = option(1, "tts_stream: chunks of one stream at once", minimum=1)
    # Pacing: the lead is measured against the listener's clock, from the first chunk's send.
    stream_lead_ms: int = option(
        10_000,
        "tts_stream: start a later chunk when the audio sent leads playback by less; 0: no pacing",
        minimum=0,
    )
    # BLS requests carry no priority in this Triton release: tts_stream sends its chunks
    # back to its own server over gRPC (triton_tts/runtime/loopback.py).
    first_chunk_priority: int = option(
        1, "tts_stream: chunks by deadline on Triton priorities; 0: off", minimum=0, maximum=1
    )
    long_text_instances: int = option(2, "tts instances (each takes any number of texts)", minimum=1)
    bls_threads: int = option(16, "tts/tts_stream: threads per instance for texts and chunks", minimum=1)
    # Admission counts work, not requests (triton_tts/runtime/admission.py; docs/deployment.md, "Admission").
    admission: str = option(
        "work",
        "what admission counts: work (the budgets) or requests (max_texts, max_streams)",
        pattern=r"^(work|requests)$",
    )
    # A request may state how long it waits (Triton's request timeout, the client's
    # timeout, the gateway's X-Request-Timeout); these budgets are for those that do not.
    # The default queues what 2 cores serve of a 64-caller burst of short texts, and stays
    # under the 60 s that proxies and HTTP clients commonly allow (docs/deployment.md).
    text_budget_ms: int = option(
        45_000, "tts: refuse a text that would wait longer than this (no deadline of its own)", minimum=1
    )
    stream_wait_ms: int = option(
        45_000,
        "tts_stream: a stream with no room yet waits this long for it (no deadline of its own)",
        minimum=1,
    )
    max_wait_ms: int = option(300_000, "the longest wait a request's own deadline may ask for", minimum=1)
    first_chunk_budget_ms: int = option(
        1000, "tts_stream: refuse a stream whose first chunk would wait longer", minimum=1
    )
    stream_headroom_pct: int = option(
        15, "tts_stream: capacity kept free of listeners' real-time demand, percent", minimum=0, maximum=90
    )
    caller_share_pct: int = option(
        50,
        "a named caller's share of the text budget and of the listeners' room, percent",
        minimum=1,
        maximum=100,
    )
    # Safety bounds by count (each admitted text and stream has a thread); with
    # admission=requests, the only bounds.
    max_texts: int = option(256, "tts: texts in progress at most; 0: no bound", minimum=0)
    max_streams: int = option(256, "tts_stream: streams in progress at most; 0: no bound", minimum=0)
    # tts_chunk (an ensemble) cannot carry a queue policy: its stages' queues hold this much
    # more than tts and tts_stream can have in flight (stage_queue_size).
    chunk_queue_size: int = option(
        16, "direct tts_chunk requests a stage queue holds beyond tts/tts_stream's; 0: no bound", minimum=0
    )
    # The voices served, the default first (`triton-tts voices` reads them back).
    voices: tuple[VoiceModels, ...] = (VoiceModels(),)
    # XTTS voices (their own decoupled models; tts and tts_stream forward to them), after
    # the voices above in the voices JSON.
    cloned: tuple[VoiceInfo, ...] = ()
    # Pronunciation lexicons (serve/build-repo --lexicon [LANG=]FILE): the long-text models
    # mark their words' phonemes (triton_tts/text/pronounce.py) for the voices of LANG.
    lexicons: tuple[Lexicon, ...] = ()

    @property
    def stage_queue_size(self) -> int:
        """Requests a stage's queue holds before refusing more (0: no bound): every chunk
        that admitted tts and tts_stream requests can have in flight, so these are never
        refused for want of room, plus chunk_queue_size direct tts_chunk requests."""
        if not (self.chunk_queue_size and self.max_texts and self.max_streams):
            return 0
        long_text = self.max_texts * self.chunks_in_flight
        return long_text + self.max_streams * self.stream_chunks_in_flight + self.chunk_queue_size


def build_option_fields() -> list[Field[Any]]:
    """BuildOptions' tunable fields (those declared with :func:`option`), in order."""
    return [f for f in fields(BuildOptions) if "help" in f.metadata]
