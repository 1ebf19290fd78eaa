"""Piper's own text -> phoneme ids, for tests/test_frontend_vs_piper.py.

Runs in Piper's virtualenvs under .bench/ (Makefile), never in ours: piper-tts is
GPL-3.0 (it links espeak-ng), so the product never imports it. Reads one text per line
on stdin and writes one JSON object per line on stdout:

    {"phonemes": "...", "ids": [...], "sentences": 2}

``ids`` are those of the text's sentences flattened into one sequence, as Piper's
training prepares an utterance (piper_train.preprocess); for a one-sentence text they
are exactly what Piper synthesises. Only Piper's code phonemises and maps.

    .bench/piper-phonemize/bin/python tests/piper_reference.py piper-phonemize \\
        --config en_US-joe-medium.onnx.json <<< "Hello, world."
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

Phonemize = Callable[[str], list[list[str]]]
ToIds = Callable[[list[str]], list[int]]


def piper_phonemize(config: dict[str, object]) -> tuple[Phonemize, ToIds]:
    """piper-phonemize, which the Piper voices were trained with."""
    from piper_phonemize import get_espeak_map, phoneme_ids_espeak, phonemize_espeak

    espeak = config["espeak"]
    assert isinstance(espeak, dict)
    voice = str(espeak["voice"])
    # Its ids come from its own table, which has grown since older voices were trained:
    # the voice's table must be part of it, with the same ids.
    table = get_espeak_map()
    voice_table = config["phoneme_id_map"]
    assert isinstance(voice_table, dict)
    if any(table.get(symbol) != ids for symbol, ids in voice_table.items()):
        raise SystemExit("the voice's phoneme_id_map disagrees with piper-phonemize's espeak map")
    return (lambda text: phonemize_espeak(text, voice)), phoneme_ids_espeak


def piper_tts(config: dict[str, object]) -> tuple[Phonemize, ToIds]:
    """piper-tts's PiperVoice (the synthesiser; no ONNX session is needed to phonemise)."""
    from piper.config import PiperConfig
    from piper.voice import PiperVoice

    voice = PiperVoice(session=None, config=PiperConfig.from_dict(config))
    return voice.phonemize, voice.phonemes_to_ids


ENGINES = {"piper-phonemize": piper_phonemize, "piper-tts": piper_tts}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("engine", choices=sorted(ENGINES))
    parser.add_argument("--config", type=Path, required=True, help="the voice's .onnx.json")
    args = parser.parse_args()
    config = json.loads(args.config.read_text(encoding="utf-8"))
    phonemize, to_ids = ENGINES[args.engine](config)
    # One text a line; split on "\n" only (str.splitlines also cuts at other separators).
    for line in sys.stdin.buffer.read().decode("utf-8").split("\n")[:-1]:
        sentences = [s for s in phonemize(line) if s]
        flat = [phoneme for sentence in sentences for phoneme in sentence]
        record = {"phonemes": "".join(flat), "ids": to_ids(flat), "sentences": len(sentences)}
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
