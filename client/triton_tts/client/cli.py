"""Client commands of ``triton-tts``: say, say --stream, synth (a file of lines), voices."""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt
import soundfile as sf

from triton_tts.client.captions import FORMATS, captions
from triton_tts.client.sync_client import PerThreadClients
from triton_tts.client.tts_client import (
    API_KEY_ENV,
    DEFAULT_TIMEOUT_S,
    Protocol,
    RetryPolicy,
    SynthesisResult,
    TTSClient,
    TTSError,
    WordTime,
)

SUBTYPES = {"pcm16": "PCM_16", "float": "FLOAT"}


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="server address (default: localhost:8000 http, :8001 grpc)")
    parser.add_argument("--protocol", choices=["http", "grpc"], default="http")
    parser.add_argument("--model", default="tts", help="Triton model to call")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds")
    parser.add_argument(
        "--api-key",
        default=None,
        help=f"the server's API key (default: env {API_KEY_ENV}, which `ps` does not show)",
    )
    retry = RetryPolicy()
    parser.add_argument(
        "--retry-attempts",
        type=int,
        default=retry.attempts,
        help="tries in all when the server is busy (HTTP 503 / gRPC UNAVAILABLE); 1: no retries",
    )
    parser.add_argument(
        "--retry-delay",
        type=float,
        default=retry.base_delay_s,
        help="seconds: the first retry waits up to this long (random), each next one up to twice as long",
    )
    parser.add_argument(
        "--retry-max-delay", type=float, default=retry.max_delay_s, help="seconds: cap of one wait"
    )


def retry_policy(args: argparse.Namespace) -> RetryPolicy:
    return RetryPolicy(args.retry_attempts, args.retry_delay, args.retry_max_delay)


def add_synthesis_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--voice", default=None, help="voice name (default: the server's default voice)")
    parser.add_argument("--speed", type=float, default=None, help="1.0 = normal, 2.0 = twice as fast")
    parser.add_argument("--speaker-id", type=int, default=None, help="speaker of a multi-speaker voice")
    parser.add_argument("--format", choices=list(SUBTYPES), default="pcm16", help="sample format")
    parser.add_argument(
        "--say",
        type=_pronunciation,
        action="append",
        default=None,
        metavar="WORD=PHONEMES",
        help="say WORD as PHONEMES (the voice's symbols: IPA, or pinyin for Mandarin), this call only; "
        "repeatable (the server's LEXICON input)",
    )


def _pronunciation(given: str) -> tuple[str, str]:
    word, equals, phonemes = given.partition("=")
    if not equals or not word.strip() or not phonemes.strip():
        raise argparse.ArgumentTypeError(f"expected WORD=PHONEMES, got {given!r}")
    return word.strip(), phonemes.strip()


def add_say_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="text to speak ('-' reads standard input)")
    parser.add_argument(
        "-o",
        "--output",
        default="out.wav",
        help="WAV file, .pcm/.raw for headerless PCM, or '-' for raw PCM on standard output",
    )
    parser.add_argument(
        "--stream", action="store_true", help="write audio as it arrives (gRPC; implies --protocol grpc)"
    )
    parser.add_argument(
        "--captions",
        default=None,
        metavar="FILE",
        help="also write the words' timed captions: FILE.vtt (WebVTT) or FILE.srt (SubRip); "
        "voices with word timestamps only",
    )
    add_connection_arguments(parser)
    add_synthesis_arguments(parser)


class AudioSink:
    """WAV or raw PCM (file or standard output), written progressively."""

    def __init__(self, output: str, sample_rate: int, sample_format: str) -> None:
        self.raw = output == "-" or Path(output).suffix.lower() in (".pcm", ".raw")
        self.dtype = np.int16 if sample_format == "pcm16" else np.float32
        self._wav: sf.SoundFile | None = None
        self._raw: BinaryIO | None = None
        if not self.raw:
            self._wav = sf.SoundFile(output, "w", sample_rate, 1, SUBTYPES[sample_format], format="WAV")
        elif output == "-":
            self._raw = sys.stdout.buffer
        else:
            self._raw = open(output, "wb")  # noqa: SIM115 - closed in close()

    def write(self, audio: npt.NDArray[np.float32]) -> None:
        if self._wav is not None:
            self._wav.write(audio)
            return
        assert self._raw is not None
        samples = np.clip(audio, -1.0, 1.0)
        data = (samples * 32767).astype("<i2") if self.dtype == np.int16 else samples.astype("<f4")
        self._raw.write(data.tobytes())
        self._raw.flush()

    def close(self) -> None:
        if self._wav is not None:
            self._wav.close()
        elif self._raw is not None and self._raw is not sys.stdout.buffer:
            self._raw.close()


def _options(args: argparse.Namespace) -> dict[str, Any]:
    lexicon = dict(args.say) if args.say else None
    return {"speed": args.speed, "speaker_id": args.speaker_id, "voice": args.voice, "lexicon": lexicon}


def _report(message: str, args: argparse.Namespace) -> None:
    # With PCM on standard output, the report must not mix into the audio.
    print(message, file=sys.stderr if getattr(args, "output", None) == "-" else sys.stdout)


def _unwritable(output: str) -> str | None:
    """Why ``output`` cannot be written, found before the server spends time on the audio."""
    if output == "-":
        return None
    path = Path(output)
    if path.is_dir():
        return f"cannot write {output}: it is a folder (give a file name)"
    if not path.parent.is_dir():
        return f"cannot write {output}: there is no folder {path.parent} (create it first)"
    if not os.access(path.parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        return f"cannot write {output}: permission denied"
    return None


def _caption_format(path: str | None) -> tuple[str | None, str | None]:
    """--captions' format (from its suffix), or why it cannot be written."""
    if path is None:
        return None, None
    fmt = Path(path).suffix.lower().lstrip(".")
    if fmt not in FORMATS:
        return None, f"--captions {path}: name a .vtt (WebVTT) or .srt (SubRip) file"
    return fmt, _unwritable(path)


def say(args: argparse.Namespace) -> int:
    caption_format, problem = _caption_format(args.captions)
    problem = problem or _unwritable(args.output)
    if problem:
        print(f"triton-tts: {problem}", file=sys.stderr)
        return 1
    text = sys.stdin.read() if args.text == "-" else args.text
    protocol: Protocol = "grpc" if args.stream else args.protocol
    start = time.perf_counter()
    sink: AudioSink | None = None
    try:
        with TTSClient(
            args.url,
            protocol,
            model=args.model,
            timeout_s=args.timeout,
            retry=retry_policy(args),
            api_key=args.api_key,
        ) as client:
            options = {**_options(args), "timestamps": caption_format is not None}
            words: list[WordTime] = []
            if not args.stream:
                result = client.synthesize(text, **options)
                sink = AudioSink(args.output, result.sample_rate, args.format)
                sink.write(result.audio)
                seconds, rate, first = result.duration_s, result.sample_rate, None
                words += result.words
            else:
                samples = rate = 0
                first = None
                for chunk in client.stream(text, **options):
                    if sink is None:
                        first = time.perf_counter() - start
                        sink, rate = AudioSink(args.output, chunk.sample_rate, args.format), chunk.sample_rate
                    sink.write(chunk.audio)
                    samples += len(chunk.audio)
                    words += chunk.words
                seconds = samples / rate if rate else 0.0
            if caption_format is not None:
                Path(args.captions).write_text(captions(words, caption_format), encoding="utf-8")
    except TTSError as err:
        print(f"triton-tts: {err}", file=sys.stderr)
        if sink is None and args.output != "-":
            Path(args.output).unlink(missing_ok=True)
        return 1
    except (OSError, sf.SoundFileError) as err:  # the output, after all (a full disk, say)
        print(
            f"triton-tts: cannot write {getattr(err, 'filename', None) or args.output}: {err}",
            file=sys.stderr,
        )
        return 1
    finally:
        if sink is not None:
            sink.close()
    elapsed = time.perf_counter() - start
    first_note = f", first audio after {first:.2f} s" if first is not None else ""
    _report(f"wrote {args.output}: {seconds:.2f} s at {rate} Hz in {elapsed:.2f} s{first_note}", args)
    if caption_format is not None:
        _report(f"wrote {args.captions}: {len(words)} words", args)
    return 0


def _thread_clients(args: argparse.Namespace) -> PerThreadClients:
    """A client per worker thread, to the server the command line names."""

    def make() -> TTSClient:
        retry = retry_policy(args)
        return TTSClient(args.url, args.protocol, model=args.model, timeout_s=args.timeout, retry=retry,
                         api_key=args.api_key)  # fmt: skip

    return PerThreadClients(make)


def add_synth_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--input", type=Path, required=True, help="text file, one utterance per line")
    parser.add_argument("--out-dir", type=Path, default=Path("synth"), help="one WAV per line: 0001.wav, ...")
    parser.add_argument("--concurrency", type=int, default=4, help="requests in flight")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_connection_arguments(parser)
    add_synthesis_arguments(parser)


def synth(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    try:
        lines = [
            (n, line.strip()) for n, line in enumerate(args.input.read_text(encoding="utf-8").splitlines(), 1)
        ]
    except (OSError, UnicodeDecodeError) as err:
        cause = err.strerror if isinstance(err, OSError) else "not UTF-8 text"
        print(f"triton-tts: cannot read --input {args.input}: {cause}", file=sys.stderr)
        return 1
    jobs = [(n, text) for n, text in lines if text]
    try:
        args.out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        print(f"triton-tts: cannot make --out-dir {args.out_dir}: {err.strerror}", file=sys.stderr)
        return 1
    client = _thread_clients(args)

    def one(n: int, text: str) -> tuple[int, SynthesisResult]:
        result = client().synthesize(text, **_options(args))
        result.write_wav(args.out_dir / f"{n:04d}.wav", subtype=SUBTYPES[args.format])
        return n, result

    failures: list[tuple[int, str]] = []
    audio_s = 0.0
    start = time.perf_counter()
    with (
        ThreadPoolExecutor(max_workers=max(1, args.concurrency)) as pool,
        tqdm(total=len(jobs), unit="line", disable=args.no_progress, file=sys.stderr) as bar,
    ):
        futures = {pool.submit(one, n, text): n for n, text in jobs}
        for future in as_completed(futures):
            try:
                audio_s += future.result()[1].duration_s
            except (TTSError, OSError, sf.SoundFileError) as err:
                failures.append((futures[future], str(err)))
            bar.update(1)
    client.close()
    elapsed = time.perf_counter() - start
    causes = {cause for _, cause in failures}
    if len(failures) > 1 and len(causes) == 1:  # an unreachable server: one line, not one per line
        print(f"triton-tts: {len(failures)} lines failed: {causes.pop()}", file=sys.stderr)
    else:
        for n, cause in sorted(failures):
            print(f"triton-tts: line {n}: {cause}", file=sys.stderr)
    print(
        f"wrote {len(jobs) - len(failures)} of {len(jobs)} files to {args.out_dir}: "
        f"{audio_s:.1f} s of audio in {elapsed:.1f} s"
    )
    return 1 if failures else 0


def voices(args: argparse.Namespace) -> int:
    try:
        with TTSClient(
            args.url, args.protocol, model=args.model, timeout_s=args.timeout, api_key=args.api_key
        ) as client:
            served = client.voices()
    except TTSError as err:
        print(f"triton-tts: {err}", file=sys.stderr)
        return 1
    print(f"{'voice':<16} {'language':<10} {'rate':>6}  speakers")
    for v in served:
        speakers = (
            ", ".join(f"{name}={i}" for name, i in sorted(v.speakers.items(), key=lambda x: x[1])) or "1"
        )
        print(f"{v.name:<16} {v.language:<10} {v.sample_rate:>6}  {speakers}")
    return 0


TRACK_FORMATS = {".wav": "WAV", ".flac": "FLAC"}


def add_dub_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "cues", type=Path, help="subtitle file: .srt (SubRip) or .vtt (WebVTT); or a .txt script, one line a "
        "cue, placed into the speech regions of --original (the server's vad model); UTF-8",
    )  # fmt: skip
    parser.add_argument(
        "-o", "--output", type=Path, default=Path("dub.wav"), help="the track: .wav or .flac; the report "
        "goes beside it (NAME.json, and NAME.vtt with the speech as placed)",
    )  # fmt: skip
    parser.add_argument(
        "--original", type=Path, default=None, help="the original's audio: the track gets its length"
    )
    parser.add_argument(
        "--snap", type=float, default=None, metavar="SECONDS",
        help="move each timed cue to the speech onset in --original nearest its start, if within SECONDS",
    )  # fmt: skip
    parser.add_argument(
        "--max-speed", type=float, default=1.25, help="how much faster a cue may be said to fit its slot"
    )
    parser.add_argument(
        "--sample-rate", type=int, default=None, help="the track's rate (default: the voice's)"
    )
    parser.add_argument("--concurrency", type=int, default=8, help="cues in flight")
    parser.add_argument(
        "--strict", action="store_true", help="stop at a cue the voice cannot say (\"♪♪\"), naming its line; "
        "without it, such a cue is left silent and listed (stderr, and the report's status \"silent\")",
    )  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_connection_arguments(parser)
    parser.add_argument("--voice", default=None, help="voice name (default: the server's default voice)")
    parser.add_argument("--speaker-id", type=int, default=None, help="speaker of a multi-speaker voice")
    parser.add_argument("--format", choices=list(SUBTYPES), default="pcm16", help="sample format")


def _dub_problem(args: argparse.Namespace) -> str | None:
    container = TRACK_FORMATS.get(args.output.suffix.lower())
    if container is None:
        return f"-o {args.output}: name a .wav or .flac file"
    if container == "FLAC" and args.format == "float":
        return "FLAC holds integer samples only: use --format pcm16, or a .wav track"
    if not 1.0 <= args.max_speed <= 4.0:
        return f"--max-speed {args.max_speed:g}: between 1.0 (never faster) and 4.0"
    if args.sample_rate is not None and not 8000 <= args.sample_rate <= 192_000:
        return f"--sample-rate {args.sample_rate}: between 8000 and 192000 Hz"
    for path in (args.output, args.output.with_suffix(".json"), args.output.with_suffix(".vtt")):
        problem = _unwritable(str(path))
        if problem:
            return problem
    return None


def _dub_inputs(
    args: argparse.Namespace, script: bool
) -> tuple[str | None, list[Any], list[tuple[int, str]], tuple[Any, int] | None]:
    """What the dub reads before calling anyone: (why not, cues, script lines, original)."""
    from triton_tts.client.subtitles import SubtitleError, read_cues, read_script

    problem = _dub_problem(args)
    if (script or args.snap is not None) and args.original is None:
        problem = problem or f"{'a script' if script else '--snap'} needs --original: the speech to place by"
    cues: list[Any] = []
    lines: list[tuple[int, str]] = []
    original: tuple[Any, int] | None = None
    try:
        if script:
            lines = read_script(args.cues)
        else:
            cues = read_cues(args.cues)
        if args.original is not None and not problem:
            audio, rate = sf.read(str(args.original), dtype="float32")
            original = (audio, int(rate))
    except SubtitleError as err:
        problem = problem or str(err)
    except OSError as err:
        problem = problem or f"cannot read {err.filename}: {err.strerror}"
    except sf.SoundFileError as err:
        problem = problem or f"--original {args.original}: not an audio file soundfile reads ({err})"
    return problem, cues, lines, original


def dub(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from triton_tts.client.dubbing import Dubber, gives_timestamps, place_by_speech
    from triton_tts.client.subtitles import SubtitleError

    script = args.cues.suffix.lower() == ".txt"
    problem, cues, lines, original = _dub_inputs(args, script)
    if problem:
        print(f"triton-tts: {problem}", file=sys.stderr)
        return 1
    length_s = len(original[0]) / original[1] if original is not None else None
    client = _thread_clients(args)
    start = time.perf_counter()
    try:
        timestamps = gives_timestamps(client().voices(), args.voice)
        if original is not None and (script or args.snap is not None):
            regions = client().speech_regions(*original)
            cues = place_by_speech(cues if not script else None, lines, regions, args.snap, args.cues.name)
        with tqdm(total=len(cues), unit="cue", disable=args.no_progress, file=sys.stderr) as bar:

            def synthesize(text: str, speed: float) -> SynthesisResult:
                return client().synthesize(text, speed=speed, speaker_id=args.speaker_id, voice=args.voice,
                                           timestamps=timestamps)  # fmt: skip

            def progress(n: int) -> None:
                bar.total = max(bar.total or 0, bar.n + n)
                bar.update(n)

            dubber = Dubber(synthesize, args.max_speed, args.concurrency, progress, strict=args.strict)
            result = dubber.dub(cues, length_s, args.cues.name)
    except (TTSError, SubtitleError) as err:
        print(f"triton-tts: {err}", file=sys.stderr)
        return 1
    finally:
        client.close()
    _write_dub(args, result, time.perf_counter() - start)
    return 0


def _write_dub(args: argparse.Namespace, result: Any, elapsed: float) -> None:
    """The track (resampled if asked), its report beside it, the overruns on stderr."""
    track, rate = result.track, result.sample_rate
    if args.sample_rate is not None and args.sample_rate != rate:
        import soxr

        track = soxr.resample(track, rate, args.sample_rate, quality="HQ").astype(np.float32)
        rate = args.sample_rate
    container = TRACK_FORMATS[args.output.suffix.lower()]
    sf.write(
        str(args.output), np.clip(track, -1.0, 1.0), rate, subtype=SUBTYPES[args.format], format=container
    )
    args.output.with_suffix(".json").write_text(result.report_json(), encoding="utf-8")
    args.output.with_suffix(".vtt").write_text(result.report_vtt(), encoding="utf-8")
    for cue in result.cues:
        if cue.status == "silent":
            print(f"triton-tts: {args.cues.name}:{cue.line}: cue {cue.index} left silent: {cue.reason}",
                  file=sys.stderr)  # fmt: skip
        if cue.status in ("overrun", "cut"):
            cut = f", {cue.cut_s:.2f} s cut where the next cue starts" if cue.cut_s else ""
            print(
                f"triton-tts: {args.cues.name}:{cue.line}: cue {cue.index} runs {cue.overrun_s:.2f} s "
                f"past its end at speed {cue.speed:.2f}{cut}",
                file=sys.stderr,
            )
    summary = result.summary()
    print(
        f"wrote {args.output}: {len(track) / rate:.1f} s at {rate} Hz, {summary['cues']} cues "
        f"({summary['sped_up']} sped up, {summary['overrun']} overrun, {summary['cut']} cut, "
        f"{summary['silent']} silent) "
        f"in {elapsed:.1f} s; report {args.output.with_suffix('.json')}"
    )


def add_client_commands(sub: Any, defaults: type[argparse.HelpFormatter]) -> None:
    """say, synth, dub and voices: the commands that call a running server."""
    for name, about, add, run in (
        ("say", "synthesise a text to a WAV file", add_say_arguments, say),
        ("synth", "synthesise every line of a text file, concurrently", add_synth_arguments, synth),
        (
            "dub",
            "a timed audio track from a subtitle file (.srt, .vtt), concurrently",
            add_dub_arguments,
            dub,
        ),
        ("voices", "list the voices a server serves", add_connection_arguments, voices),
    ):
        parser = sub.add_parser(name, help=about, formatter_class=defaults)
        add(parser)
        parser.set_defaults(func=run)
