"""The speaker gate: is each named speaker of a served voice as intelligible as a baseline?

``triton-tts gate-speakers`` synthesises sentences through a running server (``tts``,
the shipped settings) with each speaker (or mix) and with a baseline voice, transcribes
every clip with an offline recogniser (:mod:`triton_tts.quality.intelligibility`: Whisper base by
default; PocketSphinx's en-US model marked Kokoro's bf_emma down for her British accent,
0.22 against joe's 0.12 on six sentences, where Whisper hears her as well as joe) and passes a
speaker whose word error rate is at most the baseline's plus ``--max-wer-increase``::

    triton-tts gate-speakers --voice kokoro --speakers af_heart,am_adam,bf_emma,bm_george \
        --baseline joe --texts my_sentences.txt

The sentences default to the held-out set of the precision gate (triton_tts/quality/gate_texts.py);
``--texts`` takes any file of one English sentence per line, which is how texts that
neither the voice nor this gate has seen are used. A broken voice (a wrong style file, a
wrong phoneme table) speaks but is not understood, and fails here. Exit status 1 when a
speaker fails, 2 when the baseline itself is not followed (WER over
intelligibility.MAX_FP32_WER: nothing to compare with).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from triton_tts.quality.intelligibility import MAX_FP32_WER, MAX_WER_INCREASE

DEFAULT_SENTENCES = 8  # of the held-out set: ~30 s of audio per speaker


@dataclass(frozen=True)
class SpeakerScore:
    speaker: str  # a speaker name, a mix, or "" (the voice's default)
    wer: float
    passed: bool


@dataclass(frozen=True)
class SpeakerGate:
    voice: str
    baseline: str
    sentences: int
    baseline_wer: float
    max_wer_increase: float
    scores: tuple[SpeakerScore, ...]

    @property
    def judged(self) -> bool:
        return self.baseline_wer <= MAX_FP32_WER

    @property
    def passed(self) -> bool:
        return self.judged and all(s.passed for s in self.scores)

    def table(self) -> str:
        lines = [
            f"speaker gate: {self.voice} against {self.baseline} on {self.sentences} sentences, "
            f"limit +{self.max_wer_increase:g} over the baseline's WER {self.baseline_wer:.3f}",
        ]
        for s in self.scores:
            lines.append(f"  {s.speaker or '(default)':32} WER {s.wer:.3f}  {'pass' if s.passed else 'FAIL'}")
        if not self.judged:
            lines.append(
                f"  the recogniser does not follow {self.baseline} (WER > {MAX_FP32_WER}): not judged"
            )
        return "\n".join(lines)


RECOGNISERS = ("whisper", "pocketsphinx")


def _wer(client: Any, texts: Sequence[str], recogniser: str = "whisper", **options: Any) -> float:
    from triton_tts.quality.intelligibility import transcribe, transcribe_whisper_english, word_error_rate

    hear = transcribe_whisper_english if recogniser == "whisper" else transcribe
    heard = [hear(r.audio, r.sample_rate) for r in (client.synthesize(t, **options) for t in texts)]
    return word_error_rate(spoken_references(texts), heard)


def spoken_references(texts: Sequence[str]) -> list[str]:
    """The texts as a voice says them (numbers as words), what the recogniser is scored on."""
    from triton_tts.quality.gate_texts import spoken

    return spoken(list(texts))


def speaker_options(speaker: str) -> dict[str, Any]:
    """A ``--speakers`` entry as client options: a mix is sent as VOICE_MIX (one name is
    a mix of one), so speakers are named, never numbered."""
    return {"voice_mix": speaker} if speaker else {}


def gate_speakers(
    client: Any,
    voice: str,
    speakers: Sequence[str],
    baseline: str,
    texts: Sequence[str],
    max_wer_increase: float = MAX_WER_INCREASE,
    recogniser: str = "whisper",
) -> SpeakerGate:
    base = _wer(client, texts, recogniser, voice=baseline)
    scores = []
    for speaker in speakers:
        wer = _wer(client, texts, recogniser, voice=voice, **speaker_options(speaker))
        scores.append(SpeakerScore(speaker, round(wer, 4), wer <= base + max_wer_increase))
    return SpeakerGate(voice, baseline, len(texts), round(base, 4), max_wer_increase, tuple(scores))


def read_texts(path: Path | None, count: int) -> list[str]:
    if path is None:
        from triton_tts.quality.gate_texts import GATE_TEXTS

        return list(GATE_TEXTS[:count])
    texts = [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not texts:
        raise SystemExit(f"{path}: no sentences (one per line)")
    return texts


def run(args: argparse.Namespace) -> int:
    from triton_tts.client import TTSClient

    client = TTSClient(args.url, protocol="grpc", timeout_s=600, api_key=args.api_key)
    speakers = [s.strip() for s in args.speakers.split(",")] if args.speakers else [""]
    texts = read_texts(args.texts, args.sentences)
    result = gate_speakers(
        client, args.voice, speakers, args.baseline, texts, args.max_wer_increase, args.recogniser
    )
    print(result.table())
    if args.json:
        args.json.write_text(json.dumps(asdict(result), indent=2), encoding="utf-8")
    if not result.judged:
        return 2
    return 0 if result.passed else 1


def add_command(sub: Any, defaults: Any) -> None:
    parser = sub.add_parser(
        "gate-speakers",
        help="word error rate of a served voice's speakers against a baseline voice (offline recogniser)",
        formatter_class=defaults,
    )
    parser.add_argument("--url", default="localhost:8001", help="Triton gRPC address")
    parser.add_argument("--api-key", default=None, help="the server's key, when it has keys")
    parser.add_argument("--voice", required=True, help="the served voice to gate")
    parser.add_argument(
        "--speakers", default="", help="comma-separated speakers or mixes (default: the voice's default)"
    )
    parser.add_argument("--baseline", default="joe", help="the served voice to compare with")
    parser.add_argument(
        "--texts", type=Path, help="one English sentence per line (default: the held-out set)"
    )
    parser.add_argument("--sentences", type=int, default=DEFAULT_SENTENCES, help="of the held-out set")
    parser.add_argument(
        "--max-wer-increase",
        type=float,
        default=MAX_WER_INCREASE,
        help="most a speaker's WER may exceed the baseline's",
    )
    parser.add_argument(
        "--recogniser",
        choices=RECOGNISERS,
        default="whisper",
        help="whisper (Whisper base: fair to every English accent) or pocketsphinx (en-US only)",
    )
    parser.add_argument("--json", type=Path, help="also write the result as JSON")
    parser.set_defaults(func=run)
