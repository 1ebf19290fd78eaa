"""``triton-tts say``: synthesise one text through a running server and write a WAV."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from triton_tts.client.tts_client import DEFAULT_TIMEOUT_S, TTSClient, TTSError

log = logging.getLogger(__name__)


def add_say_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="text to speak ('-' reads standard input)")
    parser.add_argument("-o", "--output", type=Path, default=Path("out.wav"), help="WAV file to write")
    parser.add_argument("--url", help="server address (default: localhost:8000 http, :8001 grpc)")
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument("--model", default="tts", help="Triton model to call")
    parser.add_argument("--voice", default=None, help="voice name (default: the server's default voice)")
    parser.add_argument("--speed", type=float, default=None, help="1.0 = normal, 2.0 = twice as fast")
    parser.add_argument("--speaker-id", type=int, default=None, help="speaker of a multi-speaker voice")
    parser.add_argument("--format", choices=["pcm16", "float"], default="pcm16", help="WAV sample format")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds")


def say(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.text == "-" else args.text
    try:
        with TTSClient(args.url, args.protocol, model=args.model, timeout_s=args.timeout) as client:
            result = client.synthesize(text, speed=args.speed, speaker_id=args.speaker_id, voice=args.voice)
    except TTSError as err:
        print(f"triton-tts: {err}", file=sys.stderr)
        return 1
    result.write_wav(args.output, subtype="FLOAT" if args.format == "float" else "PCM_16")
    print(f"wrote {args.output}: {result.duration_s:.2f} s at {result.sample_rate} Hz")
    return 0
