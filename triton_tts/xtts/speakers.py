"""Named speakers of an XTTS voice: a clip's conditioning stored once in the voice folder
(``speakers/<name>.npz``: STYLE (32, D) and SPEAKER (512,); a voice without the
perceiver has a STYLE row per frame of its clip), picked by a request's
``SPEAKER``. ``triton-tts speakers add NAME clip.wav --voice DIR`` adds one; an export
converts Coqui's ``speakers_xtts.pth`` (XTTS v2's studio speakers) when the checkpoint
has one. The model reads a name it has not seen from the folder again, so a speaker
added while the server runs is served without a restart (``triton-tts speakers add``
given the built repository's version folder, or the gateway's upload).
"""

from __future__ import annotations

import argparse
import re
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from triton_tts.contract.validation import UNKNOWN_SPEAKER, InvalidRequest
from triton_tts.xtts.card import XttsCard, is_xtts_folder

if TYPE_CHECKING:  # onnxruntime: not in the base install, whose CLI registers this command
    from triton_tts.xtts.runner import Conditioning, FloatArray

SPEAKERS_DIR = "speakers"
# Coqui's studio speaker names have spaces ("Claribel Dervla"): letters, digits, space, . _ -
SPEAKER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._-]{0,63}")


def unknown_speaker(message: str) -> InvalidRequest:
    """A SPEAKER name the voice does not have."""
    return InvalidRequest(message, UNKNOWN_SPEAKER)


def check_name(name: str) -> str:
    if not SPEAKER_NAME.fullmatch(name) or name.endswith((".", " ")):
        raise ValueError(f"speaker name {name!r}: 1 to 64 letters, digits, spaces, '.', '_' or '-'")
    return name


def speaker_file(folder: Path, name: str) -> Path:
    return Path(folder) / SPEAKERS_DIR / f"{check_name(name)}.npz"


def save_speaker(folder: Path, name: str, conditioning: Conditioning) -> Path:
    path = speaker_file(folder, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial.npz")
    np.savez(
        partial, STYLE=conditioning.style.astype(np.float32), SPEAKER=conditioning.speaker.astype(np.float32)
    )
    partial.replace(path)  # a reader never sees half a file
    return path


def load_speaker(path: Path) -> Conditioning:
    from triton_tts.xtts.runner import Conditioning

    with np.load(path) as data:
        return Conditioning(
            style=data["STYLE"].astype(np.float32), speaker=data["SPEAKER"].astype(np.float32)
        )


def speaker_names(folder: Path) -> list[str]:
    return sorted(
        p.name[: -len(".npz")]
        for p in (Path(folder) / SPEAKERS_DIR).glob("*.npz")
        if ".partial" not in p.name
    )


def from_coqui(speakers: dict[str, Any]) -> dict[str, Conditioning]:
    """Coqui's ``speaker_manager.speakers`` of an XTTS (name -> gpt_cond_latent (1, 32, D),
    speaker_embedding (1, 512, 1), torch tensors) as conditionings."""
    from triton_tts.xtts.runner import Conditioning

    out = {}
    for name, entry in speakers.items():
        style = np.asarray(entry["gpt_cond_latent"].detach().cpu().float().numpy(), dtype=np.float32)
        speaker = np.asarray(entry["speaker_embedding"].detach().cpu().float().numpy(), dtype=np.float32)
        out[str(name)] = Conditioning(
            style=style.reshape(style.shape[-2], style.shape[-1]), speaker=speaker.reshape(-1)
        )
    return out


class SpeakerExists(ValueError):
    """A name to store that the voice already has (speakers are not overwritten)."""


class SpeakerStore:
    """A voice folder's named speakers, read once each and kept (they are small)."""

    def __init__(self, folder: Path, card: XttsCard):
        self.folder = Path(folder)
        self.card = card
        self.known: dict[str, Conditioning] = {}
        self.lock = threading.Lock()

    def get(self, name: str) -> Conditioning:
        with self.lock:
            if name in self.known:
                return self.known[name]
        try:
            path = speaker_file(self.folder, name)
        except ValueError as err:
            raise unknown_speaker(f"SPEAKER: {err}") from None
        if not path.is_file():
            names = speaker_names(self.folder)
            raise unknown_speaker(
                f"SPEAKER {name!r}: this voice has " + (", ".join(names) if names else "no named speakers")
            )
        conditioning = load_speaker(path)
        fits = self.card.takes_style(conditioning.style.shape)
        if not fits or conditioning.speaker.shape != (self.card.speaker_dim,):
            raise unknown_speaker(f"SPEAKER {name!r}: its file is not this voice's ({path.name})")
        with self.lock:
            self.known[name] = conditioning
        return conditioning

    def check_new(self, name: str) -> Path:
        """The file a new speaker ``name`` goes to (ValueError: a bad name; SpeakerExists)."""
        path = speaker_file(self.folder, name)
        if path.exists() or name in self.known:
            raise SpeakerExists(f"speaker {name!r} exists; pick another name (speakers are not replaced)")
        return path

    def add(self, name: str, conditioning: Conditioning) -> Path:
        """Store a new speaker in the folder (ValueError: a bad name; SpeakerExists)."""
        with self.lock:
            path = self.check_new(name)
            save_speaker(self.folder, name, conditioning)
            self.known[name] = conditioning
        return path


def read_clip(path: Path, rate: int) -> FloatArray:
    """A clip file as mono at ``rate``."""
    import soundfile as sf
    import soxr

    from triton_tts.xtts.clips import ClipSettings, check_clip

    audio, file_rate = sf.read(str(path), dtype="float32", always_2d=True)
    mono = np.asarray(audio.mean(axis=1), dtype=np.float32)
    check_clip(mono, int(file_rate), ClipSettings())
    if file_rate != rate:
        mono = np.asarray(soxr.resample(mono, file_rate, rate), dtype=np.float32)
    return mono


def add_speaker(folder: Path, name: str, clip: Path) -> Path:
    from triton_tts.xtts.runner import XttsRunner

    runner = XttsRunner(folder)
    return save_speaker(folder, name, runner.conditioning(read_clip(clip, runner.card.conditioning_rate)))


def add_command(sub: Any, defaults: type[argparse.HelpFormatter]) -> None:
    """``triton-tts speakers add|list``."""
    speakers = sub.add_parser("speakers", help="named speakers of an XTTS voice", formatter_class=defaults)
    actions = speakers.add_subparsers(dest="action", required=True)
    add = actions.add_parser(
        "add", help="store a clip's conditioning as a named speaker", formatter_class=defaults
    )
    add.add_argument("name", help="the speaker's name (a request's SPEAKER)")
    add.add_argument("clip", type=Path, help="reference audio (WAV, FLAC...; 1 to 60 s of one voice)")
    listing = actions.add_parser("list", help="the voice's named speakers", formatter_class=defaults)
    for parser in (add, listing):
        parser.add_argument("--voice", type=Path, required=True, help="XTTS voice folder")
    speakers.set_defaults(func=run_command)


def run_command(args: argparse.Namespace) -> int:

    if not is_xtts_folder(args.voice):
        raise SystemExit(f"{args.voice} is not an XTTS voice folder (no xtts.json)")
    if args.action == "list":
        for name in speaker_names(args.voice):
            print(name)
        return 0
    try:
        path = add_speaker(args.voice, args.name, args.clip)
    except (ValueError, RuntimeError) as err:  # a clip refused, too
        raise SystemExit(f"speakers add: {err}") from None
    print(f"speaker '{args.name}' stored in {path}")
    return 0
