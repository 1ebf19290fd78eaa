"""The ``triton-tts`` command: prepare voices, build the repository, serve, and speak.

triton-tts serve                      # export the default voice if needed, build, serve
triton-tts say "Hello." -o hello.wav  # through a running server (HTTP or gRPC)
triton-tts export piper --out voices/joe
triton-tts export coqui --model-name tts_models/en/ljspeech/vits --out voices/ljs
triton-tts build-repo --voice voices/joe --voice voices/ljs   # several voices; the first is the default
triton-tts frontend "今天是2024年3月15日。" --language zh   # what the text front-end makes of a text
triton-tts gateway --triton-url localhost:8001 --port 8080   # OpenAI-compatible API, WebSocket, page
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tritonclient.utils import InferenceServerException

from triton_tts.cli.options import (
    UserError,
    add_build_options,
    add_lexicon_argument,
    build_options,
    output_folder,
    read_lexicons,
    voice_dirs,
)
from triton_tts.cli.serve import cmd_serve
from triton_tts.client.cli import add_client_commands
from triton_tts.client.tts_client import TTSError
from triton_tts.contract import paths
from triton_tts.contract.validation import InvalidRequest
from triton_tts.gateway import command as gateway_command
from triton_tts.ops.lifecycle import DRAIN_TIMEOUT_S
from triton_tts.ops.server import LOCAL_HOST

if TYPE_CHECKING:
    from triton_tts.contract.voice import Voice
    from triton_tts.text.pronounce import Lexicon


def cmd_build_repo(args: argparse.Namespace) -> int:
    from triton_tts.ops.repository import build_repository

    output_folder(args.out)
    build_repository(voice_dirs(args), args.out, build_options(args))
    return 0


def cmd_export_coqui(args: argparse.Namespace) -> int:
    # torch, coqui-tts: the export extra (see _missing_extra)
    from triton_tts.export.coqui import cli as coqui
    from triton_tts.export.coqui.loading import DownloadFailed

    output_folder(args.out)
    try:
        coqui.run(args)
    except DownloadFailed as err:
        raise UserError(str(err)) from err
    return 0


def cmd_export_piper(args: argparse.Namespace) -> int:
    from triton_tts.export import piper

    output_folder(args.out)
    if args.onnx and not args.onnx.is_file():
        raise UserError(f"no Piper voice at --onnx {args.onnx}: give the path of a Piper .onnx file")
    config = args.config or (args.onnx and args.onnx.with_suffix(args.onnx.suffix + ".json"))
    if config and not config.is_file():
        raise UserError(f"no voice config {config}: give the Piper .onnx.json with --config")
    forwarded = ["--out", str(args.out)]
    if args.onnx:
        forwarded += ["--onnx", str(args.onnx)]
    if args.config:
        forwarded += ["--config", str(args.config)]
    if args.name:
        forwarded += ["--name", args.name]
    piper.main(forwarded)
    return 0


def cmd_export_kokoro(args: argparse.Namespace) -> int:
    from triton_tts.export import kokoro, kokoro_arguments

    output_folder(args.out)
    given = (("--onnx", args.onnx), ("--voices", args.voices), ("--packages", args.packages))
    for flag, path in (*given, ("--checkpoint", args.checkpoint), ("--config", args.config)):
        if path is not None and not path.exists():
            raise UserError(f"{flag} {path}: no such file or folder")
    if bool(args.checkpoint) != bool(args.config):
        raise UserError("--checkpoint and --config go together (a Kokoro checkpoint and its config.json)")
    if args.checkpoint and args.onnx:
        raise UserError("--checkpoint or --onnx: one model source")
    try:
        kokoro_arguments.run(args)
    except (kokoro.SourceMissing, ValueError) as err:
        raise UserError(str(err)) from err
    return 0


def _frontend_voice(args: argparse.Namespace) -> Voice | None:
    """The voice of --voice (a folder, or a voice's name in the voices folder), or the
    default voice's; None when --language is given instead."""
    from triton_tts.contract.voice import Voice
    from triton_tts.ops.repository import ensure_default_voice

    if args.language:
        return None
    if args.voice is None:
        folder = ensure_default_voice(paths.default_voice_dir())
    else:
        folder = Path(args.voice)
        if not folder.is_dir() and (paths.voices_dir() / args.voice).is_dir():
            folder = paths.voices_dir() / args.voice
        if not (folder / "voice.json").is_file():
            raise UserError(f"no voice folder {args.voice}: give a voice folder or name, or --language")
    return Voice.load(folder)


def _check_lexicons(lexicons: list[Lexicon], reader: Any) -> None:
    """Each entry the voice cannot say refused with its file and word before any reading, as
    serve refuses it (``reader``: the voice's TextReader, which decides what it can say)."""
    from triton_tts.text.pronounce import mark

    for lexicon in lexicons:
        for word, said in lexicon.entries.items():
            try:
                reader.check(mark(said))
            except InvalidRequest as err:
                raise UserError(f"{lexicon.source}: {word!r}: {err}") from None


def cmd_frontend(args: argparse.Namespace) -> int:
    from triton_tts.contract.voice import PINYIN_BAKER
    from triton_tts.text.chinese import baker_symbols, pinyin
    from triton_tts.text.frontend import frontend_for, is_chinese
    from triton_tts.text.phonemize import espeak
    from triton_tts.text.pronounce import parts
    from triton_tts.text.reader import TextReader

    voice = _frontend_voice(args)
    if voice is None and not is_chinese(args.language):
        try:  # loaded now: a language espeak-ng lacks is refused before any reading
            espeak(args.language)
        except RuntimeError as err:
            raise UserError(f"--language {args.language}: {err}") from None
    frontend = (
        frontend_for(args.language)
        if voice is None
        else frontend_for(voice.phonemizer_language, voice.tokens)
    )
    lexicons = [x for x in read_lexicons(args.lexicon) if x.serves(frontend.language)]
    if voice is not None:
        _check_lexicons(lexicons, TextReader(voice))
    text = " ".join(args.text)
    spoken = frontend.normalize(text)
    print(f"language:      {frontend.language}")
    print(f"normalised:    {spoken}")
    for lexicon in lexicons:
        spoken, applied = lexicon.apply(spoken)
        for words, phonemes in applied:
            print(f"lexicon:       {words} -> {phonemes} ({lexicon.source})")
    if args.lexicon and not lexicons:
        print(f"lexicon:       none for {frontend.language}")
    if voice is not None and voice.tokens != PINYIN_BAKER and len(parts(spoken)) > 1:
        print(f"pronunciation: {TextReader(voice).phonemes(spoken)}")
    else:
        said = [
            piece if given else frontend.pronounce(piece) for given, piece in parts(spoken) if piece.strip()
        ]
        print(f"pronunciation: {' '.join(said)}")
    if voice is not None and voice.tokens == PINYIN_BAKER:  # what the voice's ids are made of
        print(f"symbols:       {' '.join(baker_symbols(pinyin(spoken), voice.syllables))}")
    if voice is not None:
        print(f"ids:           {TextReader(voice).read([spoken])[0].ids}")
    return 0


def cmd_export_int8(args: argparse.Namespace) -> int:
    from triton_tts.export import quantize
    from triton_tts.ops.repository import ensure_default_voice
    from triton_tts.quality.intelligibility import gate_thresholds

    quantize.run(ensure_default_voice(args.voice), args.out, gate_thresholds(args), tuple(args.stages))
    return 0


def _add_inspection_commands(sub: Any, defaults: type[argparse.HelpFormatter]) -> None:
    """What the front-end makes of a text (frontend), speakers."""
    frontend = sub.add_parser(
        "frontend", help="print the normalised text and its pronunciation (offline)", formatter_class=defaults
    )
    frontend.add_argument("text", nargs="+", help="the text (several words are joined with spaces)")
    chosen = frontend.add_mutually_exclusive_group()
    chosen.add_argument("--voice", help="voice folder or name (default: the default voice)")
    chosen.add_argument("--language", help="a language instead of a voice: zh (Mandarin), en-us...")
    add_lexicon_argument(frontend, "apply a lexicon, and show its entries that apply")
    frontend.set_defaults(func=cmd_frontend)
    from triton_tts.xtts.speakers import add_command  # speakers add|list: XTTS's named speakers

    add_command(sub, defaults)
    from triton_tts.quality import speaker_gate  # gate-speakers: a served voice's speakers against a baseline

    speaker_gate.add_command(sub, defaults)


def _add_export_int8(export_sub: Any, defaults: type[argparse.HelpFormatter]) -> None:
    from triton_tts.export.int8_stages import add_stages_argument
    from triton_tts.quality.intelligibility import add_gate_arguments

    int8 = export_sub.add_parser(
        "int8",
        help="a copy of a voice with its vocoder and/or VITS flow in static INT8, gated against FP32 "
        "(SNR and WER)",
        formatter_class=defaults,
    )
    int8.add_argument("--voice", type=Path, default=paths.default_voice_dir(), help="FP32 voice folder")
    int8.add_argument("--out", type=Path, required=True, help="voice folder to write")
    add_stages_argument(int8)
    add_gate_arguments(int8)
    int8.set_defaults(func=cmd_export_int8)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="triton-tts", description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    defaults = argparse.ArgumentDefaultsHelpFormatter

    serve = sub.add_parser(
        "serve", help="build the repository and run tritonserver", formatter_class=defaults
    )
    serve.add_argument(
        "--voice", type=Path, action="append", help="voice folder; repeat to serve several (first = default)"
    )
    serve.add_argument(
        "--model-repository",
        default=str(paths.default_build_dir()),
        help="repository to build and serve (with --no-build also s3://, gs://, as://)",
    )
    serve.add_argument(
        "--host",
        default=LOCAL_HOST,
        help="address Triton's HTTP, gRPC and metrics ports, the health port and the gateway listen on "
        "(0.0.0.0: every interface, as in a container)",
    )
    serve.add_argument("--http-port", type=int, default=8000)
    serve.add_argument("--grpc-port", type=int, default=8001)
    serve.add_argument("--metrics-port", type=int, default=8002)
    serve.add_argument(
        "--model-config-name", default=None, help="named config variant: gpu or tensorrt (GPU nodes)"
    )
    serve.add_argument("--log-verbose", type=int, default=0, help="tritonserver --log-verbose")
    serve.add_argument("--no-build", action="store_true", help="serve the repository as it is")
    serve.add_argument(
        "--health-port",
        type=int,
        default=8003,
        help="/ready (Triton ready and every Python-backend instance alive) and /live; 0: off",
    )
    serve.add_argument(
        "--no-watchdog",
        action="store_true",
        help="do not heal dead Python-backend instances (Triton's model control stays off)",
    )
    serve.add_argument(
        "--drain-timeout",
        type=float,
        default=DRAIN_TIMEOUT_S,
        help="on Ctrl-C/SIGTERM, seconds to let tts and tts_stream requests in flight finish "
        "their chunks before Triton stops (a second signal stops at once)",
    )
    serve.add_argument(
        "--triton-arg",
        action="append",
        metavar="ARG",
        help="extra tritonserver argument, e.g. --triton-arg=--exit-timeout-secs=30 (repeatable)",
    )
    serve.add_argument(
        "--gateway-port",
        type=int,
        default=0,
        help="also run the OpenAI-compatible gateway (triton-tts gateway) on this port; 0: off "
        f"(`make serve` uses {gateway_command.DEFAULT_PORT}). API keys: env {gateway_command.API_KEY_ENV}",
    )
    serve.add_argument(
        "--riva-port",
        type=int,
        default=int(os.environ.get(gateway_command.RIVA_PORT_ENV, gateway_command.DEFAULTS.riva_port)),
        help="with the gateway: Riva's TTS API (gRPC) on this port; 0: off "
        f"(env {gateway_command.RIVA_PORT_ENV})",
    )
    add_lexicon_argument(serve)
    add_build_options(serve)
    serve.set_defaults(func=cmd_serve)

    gateway = sub.add_parser(
        "gateway",
        help="OpenAI-compatible speech API, WebSocket streaming and a listening page in front of Triton",
        formatter_class=defaults,
    )
    gateway_command.add_arguments(gateway)
    gateway.set_defaults(func=gateway_command.run)

    add_client_commands(sub, defaults)  # say, synth, dub, voices: through a running server

    _add_inspection_commands(sub, defaults)

    export = sub.add_parser("export", help="export a voice to a voice folder")
    export_sub = export.add_subparsers(dest="family", required=True)
    piper = export_sub.add_parser("piper", help="split a Piper VITS voice", formatter_class=defaults)
    piper.add_argument("--onnx", type=Path, help="Piper .onnx (default: the bundled joe voice)")
    piper.add_argument("--config", type=Path, help="Piper .onnx.json (default: next to --onnx)")
    piper.add_argument("--name", help="voice name")
    piper.add_argument("--out", type=Path, required=True, help="voice folder to write")
    piper.set_defaults(func=cmd_export_piper)
    _add_export_int8(export_sub, defaults)
    coqui_parser = export_sub.add_parser(
        "coqui",
        help="export a Coqui TTS model (VITS, FastPitch, FastSpeech2, Glow-TTS, Tacotron2) + vocoder",
        formatter_class=defaults,
    )
    from triton_tts.export.coqui.arguments import add_arguments

    add_arguments(coqui_parser)
    coqui_parser.set_defaults(func=cmd_export_coqui)
    from triton_tts.export.kokoro_arguments import add_command as add_export_kokoro

    add_export_kokoro(export_sub, defaults, cmd_export_kokoro)

    build = sub.add_parser(
        "build-repo", help="put a voice into the model repository", formatter_class=defaults
    )
    build.add_argument(
        "--voice", type=Path, action="append", help="voice folder; repeat for several (first = default)"
    )
    build.add_argument("--out", type=Path, default=paths.default_build_dir(), help="repository to build")
    add_lexicon_argument(build)
    add_build_options(build)
    build.set_defaults(func=cmd_build_repo)
    return parser


def _broken_input(args: argparse.Namespace) -> str | None:
    """After an unexpected failure: a voice folder or graph the command reads that cannot be
    loaded (a corrupt or truncated file), or None when the inputs are sound (then: a bug)."""
    from triton_tts.contract.voice import Voice
    from triton_tts.ops.server import onnx_load_error
    from triton_tts.xtts.card import XttsCard, is_xtts_folder

    if args.command == "export" and args.family == "piper":
        if not args.onnx:  # the bundled voice
            return None
        error = onnx_load_error(args.onnx)
        if error:
            return f"{args.onnx} is not a loadable ONNX model ({error}): give a Piper voice's .onnx"
        config = args.config or args.onnx.with_suffix(args.onnx.suffix + ".json")
        try:
            json.loads(config.read_text(encoding="utf-8"))["phoneme_id_map"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            return f"{config} is not a Piper voice config ({type(err).__name__}: {err}): give its .onnx.json"
        return None
    voice = getattr(args, "voice", None)  # say/synth: a voice name, not a folder
    folders = [v for v in (voice if isinstance(voice, list) else [voice]) if isinstance(v, Path)]
    if args.command in ("serve", "build-repo") and not folders and not getattr(args, "no_build", False):
        folders = [paths.default_voice_dir()]
    again = "export the voice again (triton-tts export)"
    for folder in folders:
        xtts = is_xtts_folder(folder)  # an XTTS voice: its own card
        try:
            XttsCard.load(folder) if xtts else Voice.load(folder)
        except (OSError, ValueError, TypeError) as err:
            card = "xtts.json" if xtts else "voice.json"
            return f"voice folder {folder} has no readable {card} ({err}): {again}"
        for graph in sorted(folder.glob("*.onnx")):
            error = onnx_load_error(graph)
            if error:
                return f"{graph} is not a loadable ONNX model ({error}): {again}"
    return None


def _user_message(err: Exception, args: argparse.Namespace) -> str | None:
    """The one line for an expected failure; None for anything else (a bug: traceback)."""
    if isinstance(err, UserError | TTSError | InvalidRequest):  # InvalidRequest: what the server refuses too
        return str(err)
    if isinstance(err, InferenceServerException):  # the server's words the client did not map
        return err.message() or str(err)
    if isinstance(err, OSError):  # a user's path, permissions, a full disk, the network
        return f"{err.filename}: {err.strerror}" if err.filename and err.strerror else str(err)
    if isinstance(err, ModuleNotFoundError) and (missing := _missing_extra(err)):
        return missing
    return _broken_input(args)


# Import names that differ from the name of the distribution that provides them.
DISTRIBUTIONS = {"TTS": "coqui-tts", "yaml": "PyYAML"}


def _missing_extra(err: ModuleNotFoundError) -> str | None:
    """A module that one of our extras provides (torch: export): which extra, and how to
    install it, read from the package's own requirements (pyproject.toml, their one home).
    None for any other missing module: a broken install or a bug keeps its traceback."""
    module = (err.name or "").split(".")[0]
    wanted = _normalized(DISTRIBUTIONS.get(module, module))
    if wanted == "triton-tts":  # extras name each other ("triton-tts[quality]"): our own code
        return None
    try:
        requirements = metadata.requires("triton-tts") or []
    except metadata.PackageNotFoundError:
        return None
    sizes: dict[str, int] = {}  # requirements per extra
    providers = []  # the extras that require the missing distribution
    for requirement in requirements:
        name = re.match(r"[A-Za-z0-9._-]+", requirement)
        extra = re.search(r"extra\s*==\s*['\"]([^'\"]+)['\"]", requirement)
        if extra:
            sizes[extra.group(1)] = sizes.get(extra.group(1), 0) + 1
            if name and _normalized(name.group()) == wanted:
                providers.append((extra.group(1), name.group()))
    if not providers:
        return None
    # The smallest extra that brings it: an extra may include another's requirements
    # (dev has serve's), so the one that names it for its own sake is the smallest.
    group, distribution = min(providers, key=lambda p: (sizes[p[0]], p[0]))
    what = module if _normalized(module) == wanted else f"{module} ({distribution})"
    return (
        f"{what} is not installed (the {group} extra): pip install 'triton-tts[{group}]'"
        f" (from a checkout: pip install -e '.[{group}]')"
    )


def _normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def main(argv: list[str] | None = None) -> int:
    """Expected failures end in one line, ``triton-tts: <cause and way out>``, and exit
    code 1 (2: a bad command line, from argparse); anything else is a bug and keeps its
    traceback. -v shows the traceback of expected failures too."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(levelname)s %(name)s: %(message)s"
    )
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("triton-tts: interrupted", file=sys.stderr)
        return 130
    except SystemExit as stop:  # raise SystemExit("message"): the older form of UserError
        if not isinstance(stop.code, str):
            raise
        message: str | None = stop.code
    except Exception as err:
        message = None if args.verbose else _user_message(err, args)
        if message is None:
            raise
    print(f"triton-tts: {message}", file=sys.stderr)
    return 1
