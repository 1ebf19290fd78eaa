"""What several commands share: the build options as flags (from BuildOptions' fields),
lexicon files, voice folders, output folders, and the error a user can fix
(:class:`UserError`)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import Field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_tts.build.model_configs import THREADS, BuildOptions, build_option_fields
from triton_tts.contract import paths

if TYPE_CHECKING:
    from triton_tts.text.pronounce import Lexicon


ADMIN_KEY_ENV = "TRITON_TTS_ADMIN_KEY"  # default: a fresh random key per start


class UserError(Exception):
    """An expected failure whose message names the cause and the way out: main() prints it
    as one line, without a traceback (-v shows one)."""


def option_value(option: Field[Any]) -> Callable[[str], int | str]:
    """The argparse type of a build option: its bounds, as declared in BuildOptions."""
    meta = option.metadata

    def parse(text: str) -> int | str:
        if meta["pattern"]:
            if not re.fullmatch(meta["pattern"], text):
                raise argparse.ArgumentTypeError(f"{text!r} does not match {meta['pattern']}")
            return text
        value = int(text)  # ValueError: argparse says "invalid integer value"
        if meta["minimum"] is not None and value < meta["minimum"]:
            raise argparse.ArgumentTypeError(f"{value} is below the minimum, {meta['minimum']}")
        if meta["maximum"] is not None and value > meta["maximum"]:
            raise argparse.ArgumentTypeError(f"{value} is above the maximum, {meta['maximum']}")
        return value

    parse.__name__ = "string" if meta["pattern"] else "integer"
    return parse


def add_build_options(parser: argparse.ArgumentParser) -> None:
    """Tuning knobs rendered into the configs: one flag per BuildOptions option, named
    after its field (``max_batch_size``: ``--max-batch-size``); see triton_tts/build/model_configs.py."""
    group = parser.add_argument_group("repository build options")
    for option in build_option_fields():
        default: Any = option.default
        group.add_argument(
            "--" + option.name.replace("_", "-"),
            type=option_value(option),
            nargs="*" if isinstance(default, tuple) else None,
            default=list(default) if isinstance(default, tuple) else default,
            metavar="auto|N" if option.metadata["pattern"] == THREADS else "N",
            help=option.metadata["help"],
        )


def build_options(args: argparse.Namespace) -> BuildOptions:
    values: dict[str, Any] = {}
    for option in build_option_fields():
        value = getattr(args, option.name)
        values[option.name] = tuple(value) if isinstance(value, list) else value
    return BuildOptions(**values, lexicons=read_lexicons(getattr(args, "lexicon", None)))


def add_lexicon_argument(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    served = "for the voices of LANG (default en); repeatable (docs/api.md, 'Lexicons')"
    help = help or f"pronunciation lexicon, word<TAB>IPA per line, {served}"
    parser.add_argument("--lexicon", action="append", metavar="[LANG=]FILE", help=help)


def read_lexicons(specs: list[str] | None) -> tuple[Lexicon, ...]:
    from triton_tts.text.pronounce import load_lexicon

    try:
        return tuple(load_lexicon(spec) for spec in specs or [])
    except ValueError as err:
        raise UserError(str(err)) from None


def voice_dirs(args: argparse.Namespace) -> list[Path]:
    """The --voice folders, chunk voices and XTTS voices alike, each checked before any work."""
    from triton_tts.ops.repository import ensure_voice

    dirs: list[Path] = args.voice or [paths.default_voice_dir()]
    return [ensure_voice(folder) for folder in dirs]


def output_folder(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file: give a folder to write into")
    return out
