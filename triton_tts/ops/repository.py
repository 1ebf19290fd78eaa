"""Fill the model repository with a voice: ONNX files, voice description, warm-up data.

The repository's configs and Python model code are committed (the template, shipped as
package data); a build copies them to a folder of its own (``paths.default_build_dir()``)
and adds what each voice brings (ONNX files, ``voice.json``, warm-up tensors), so running
the product never changes the template.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import struct
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import text_format

from triton_tts.build import model_configs
from triton_tts.build.model_configs import (
    CHUNK_MODEL,
    VOICE_SEPARATOR,
    WARMUP_IDS_LENGTH,
    BuildOptions,
    VoiceModels,
)
from triton_tts.client.voices import VoiceInfo, chunk_model
from triton_tts.contract import paths
from triton_tts.contract.styles import STYLES_FILE, StyleTable
from triton_tts.contract.voice import (
    ACOUSTIC_FILE,
    PINYIN_BAKER,
    VOCODER_FILE,
    VOCODER_UNPADDED_FILE,
    VOICE_FILE,
    Voice,
)
from triton_tts.runtime.limits import calibrate
from triton_tts.runtime.onnx_session import graph_inputs, graph_outputs
from triton_tts.runtime.stages import unpadded_twin
from triton_tts.text.frontend import is_chinese
from triton_tts.text.pronounce import check_lexicon
from triton_tts.text.reader import TextReader
from triton_tts.xtts.graphs import STAGES as XTTS_STAGES

log = logging.getLogger(__name__)

STAGES = ("preprocess", "acoustic", "vocoder", "postprocess")
VOICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
WARMUP_TEXT = "Warming up the voice, so that the first request is fast."
WARMUP_TEXT_CHINESE = "先让声音热一热身，第一个请求才会快。"  # for Mandarin voices
# WARMUP_TEXT in IPA, typed in so that building a repository needs no espeak-ng.
WARMUP_PHONEMES = "wˈɔːɹmɪŋ ˈʌp ðə vˈɔɪs, sˌoʊ ðæt ðə fˈɜːst ɹɪkwˈɛst ɪz fˈæst."


# The template's code-only models, placed per voice (their configs are rendered from the
# voice's graphs): an XTTS voice's model, and a model that is one ONNX graph (XTTS's
# stages, vad). Built repositories hold them only where a voice needs them.
XTTS_CODE = "xtts"
GRAPH_CODE = "onnx_graph"


def _not_copied(template: Path) -> Callable[[str, list[str]], set[str]]:
    """What the template's copy leaves out: graphs, engines, caches, warm-up data, voice
    files, and the code-only models (placed per voice)."""
    patterns = shutil.ignore_patterns("*.onnx", "*.plan", "__pycache__", "warmup", VOICE_FILE)

    def ignored(folder: str, names: list[str]) -> set[str]:
        left_out = set(patterns(folder, names))
        if Path(folder) == template:
            left_out |= {XTTS_CODE, GRAPH_CODE} & set(names)
        return left_out

    return ignored


def _place(source: Path, target: Path) -> None:
    """Hard-link (cheap, same disk) or copy, skipping files that are already current."""
    if target.exists():
        old, new = target.stat(), source.stat()
        if target.samefile(source) or (old.st_size == new.st_size and old.st_mtime >= new.st_mtime):
            return
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _serialize_bytes(text: str) -> bytes:
    """Triton's raw BYTES layout: little-endian uint32 length, then the bytes."""
    data = text.encode("utf-8")
    return struct.pack("<I", len(data)) + data


def write_warmup_data(repo: Path, voice: Voice, models: VoiceModels, voice_dir: Path) -> None:
    preprocess = repo / models.model("preprocess") / "warmup"
    preprocess.mkdir(parents=True, exist_ok=True)
    if is_chinese(voice.phonemizer_language):
        # Read by the voice's own front-end (pinyin needs no espeak-ng; a Chinese voice of
        # espeak phonemes is read by espeak-ng, as preprocess will).
        reader = TextReader(voice)
        (preprocess / "TEXT").write_bytes(_serialize_bytes(WARMUP_TEXT_CHINESE))
        ids = reader.read([reader.normalize(WARMUP_TEXT_CHINESE)])[0].ids[:WARMUP_IDS_LENGTH]
    else:
        (preprocess / "TEXT").write_bytes(_serialize_bytes(WARMUP_TEXT))
        symbols = WARMUP_TEXT.lower() if voice.tokens == "characters" else WARMUP_PHONEMES
        ids = voice.phonemes_to_ids(symbols)[:WARMUP_IDS_LENGTH]
    padded = np.full(WARMUP_IDS_LENGTH, voice.padding_id, dtype=np.int64)
    padded[: len(ids)] = ids
    warm = repo / models.model("acoustic") / "warmup"
    warm.mkdir(parents=True, exist_ok=True)
    (warm / "PHONEME_IDS").write_bytes(padded.tobytes())
    (warm / "PHONEME_LENGTH").write_bytes(np.array([len(ids)], np.int64).tobytes())
    scales = np.array([0.0, voice.length_scale, 0.0], np.float32)
    (warm / "SCALES").write_bytes(scales.tobytes())
    if models.acoustic_speaker:
        (warm / "SPEAKER_ID").write_bytes(np.zeros(1, np.int64).tobytes())
    if models.style:  # the default speaker's row for the warm-up's ids
        table = StyleTable.load(voice_dir)
        (warm / "STYLE").write_bytes(table.style({0: 1.0}, len(ids) - 2).tobytes())


def has_durations(voice: Voice, voice_dir: Path) -> bool:
    """Whether a voice's acoustic stage says its frames per id (word timestamps)."""
    if voice.acoustic_kind == "tacotron2":
        from triton_tts.runtime.tacotron import ATTENTION, DECODER_STEP_FILE

        return "NEW_" + ATTENTION in graph_outputs(voice_dir / DECODER_STEP_FILE)
    return voice.acoustic_kind == "single" and "DURATIONS" in graph_outputs(voice_dir / ACOUSTIC_FILE)


def voice_models(voice: Voice, voice_dir: Path, default: bool) -> VoiceModels:
    """What the configs need to know about one voice they serve."""
    acoustic_inputs = graph_inputs(voice_dir / ACOUSTIC_FILE) if voice.acoustic_kind == "single" else set()
    served = VoiceInfo(
        name=voice.name,
        language=voice.phonemizer_language,
        sample_rate=voice.sample_rate,
        speakers=voice.speakers,
        tokens=voice.tokens,
        model=chunk_model(voice.name, default),
        chunk_limits=json.loads(calibrate(voice_dir).to_json()),
        # Durations from the graph, or from Tacotron2's attention (the reader maps every
        # kind of ids to words).
        timestamps=has_durations(voice, voice_dir),
        mixes="STYLE" in acoustic_inputs,
    )
    return VoiceModels(
        served=served,
        phonemes="".join(sorted(voice.symbols)) if voice.tokens not in ("characters", PINYIN_BAKER) else "",
        syllables=dict(voice.syllables) if voice.tokens == PINYIN_BAKER else None,
        latent_channels=voice.latent_channels,
        acoustic_speaker="SPEAKER_ID" in acoustic_inputs
        or (voice.acoustic_kind != "single" and voice.num_speakers > 1),
        vocoder_speaker=voice.vocoder_uses_speaker,
        # A graph that cannot batch padded ids (max_items_per_run 1) keeps its acoustic
        # stage in Python on GPU nodes too: native backends pad ids to length buckets.
        native_acoustic=voice.acoustic_kind == "single" and voice.max_items_per_run != 1,
        max_items=voice.max_items_per_run,
        style="STYLE" in acoustic_inputs,
    )


def with_voices(options: BuildOptions, voices: Sequence[tuple[Voice, Path]]) -> BuildOptions:
    names = [voice.name for voice, _ in voices]
    if len(set(names)) != len(names):
        raise ValueError(f"voice names must differ, got {names}")
    for name in names:
        if not VOICE_NAME.fullmatch(name):
            raise ValueError(
                f"voice name {name!r}: use letters, digits, '-' and '_' (it names Triton models)"
            )
    models = tuple(voice_models(v, d, default=i == 0) for i, (v, d) in enumerate(voices))
    for lexicon in options.lexicons:
        for voice in models:
            if lexicon.serves(voice.served.language):
                check_lexicon(lexicon, voice.served.name, voice.phonemes, voice.syllables)
    return replace(options, voices=models)


def with_voice(options: BuildOptions, voice: Voice, voice_dir: Path | None = None) -> BuildOptions:
    """Single-voice form of :func:`with_voices`."""
    return with_voices(options, [(voice, voice_dir or paths.default_voice_dir())])


def _stage_files(voice: Voice, voice_dir: Path) -> dict[str, list[tuple[Path, str]]]:
    """stage -> (file in the voice folder, name in the model's version folder)."""
    if voice.acoustic_kind == "tacotron2":
        from triton_tts.runtime.tacotron import ONNX_FILES

        acoustic = [(voice_dir / name, name) for name in ONNX_FILES]
    else:
        acoustic = [(voice_dir / ACOUSTIC_FILE, "model.onnx")]
    vocoder = [(voice_dir / VOCODER_FILE, "model.onnx")]
    # A style voice's table (Kokoro): preprocess chooses rows, the acoustic model's
    # calibration and warm-up read its default speaker.
    styles = [(voice_dir / STYLES_FILE, STYLES_FILE)] if (voice_dir / STYLES_FILE).exists() else []
    if (voice_dir / VOCODER_UNPADDED_FILE).exists():  # padding-safe vocoders only
        vocoder.append((voice_dir / VOCODER_UNPADDED_FILE, unpadded_twin(Path("model.onnx")).name))
    return {
        "acoustic": [*acoustic, (voice_dir / VOICE_FILE, VOICE_FILE), *styles],
        "vocoder": [*vocoder, (voice_dir / VOICE_FILE, VOICE_FILE)],
        "preprocess": [(voice_dir / VOICE_FILE, VOICE_FILE), *styles],
        "postprocess": [(voice_dir / VOICE_FILE, VOICE_FILE)],
    }


def build_repository(
    voice_dirs: Path | Sequence[Path] | None = None,
    repo: Path | None = None,
    options: BuildOptions | None = None,
) -> Path:
    """Copy the template's model code into ``repo`` (default: the build folder), put the
    voices (default: the bundled one) into it and render every config for ``options``
    (default: the committed defaults). The first voice is the default; each further voice
    gets its own suffixed copy of the stages."""
    if voice_dirs is None:
        voice_dirs = paths.default_voice_dir()
    dirs = [Path(voice_dirs)] if isinstance(voice_dirs, str | Path) else [Path(d) for d in voice_dirs]
    repo = Path(repo) if repo is not None else paths.default_build_dir()
    template = paths.repository_template()
    if repo.resolve() == template.resolve():
        raise ValueError(f"{repo} is the repository template: build into another folder")
    from triton_tts.xtts.card import is_xtts_folder

    xtts_dirs = [d for d in dirs if is_xtts_folder(d)]
    dirs = [d for d in dirs if not is_xtts_folder(d)]
    if not dirs:  # the long-text models' default voice is a chunk voice: the bundled one
        dirs = [ensure_default_voice()]
    voices = [(Voice.load(d), d) for d in dirs]
    options = with_voices(options or BuildOptions(), voices)
    options = replace(options, cloned=tuple(xtts_info(i, d) for i, d in enumerate(xtts_dirs)))
    names = [v.served.name for v in options.voices] + [v.name for v in options.cloned]
    if len(set(names)) != len(names):
        raise ValueError(f"voice names must differ, got {names}")
    shutil.copytree(
        template,
        repo,
        dirs_exist_ok=True,
        ignore=_not_copied(template),
    )
    # Voices of an earlier build that this one does not serve would still load: remove.
    wanted = {m.model(stage) for m in options.voices for stage in (*STAGES, CHUNK_MODEL)}
    xtts_models = [xtts_model_name(i, d) for i, d in enumerate(xtts_dirs)]
    wanted |= {*xtts_models, *(model_configs.xtts_stage_name(m, s) for m in xtts_models for s in XTTS_STAGES)}
    for stale in repo.glob(f"*{VOICE_SEPARATOR}*"):
        if stale.is_dir() and stale.name not in wanted:
            shutil.rmtree(stale)
    for (voice, voice_dir), models in zip(voices, options.voices, strict=True):
        for stage, files in _stage_files(voice, voice_dir).items():
            target = repo / models.model(stage) / "1"
            if not models.default:  # the stage's model code, from the default's folder
                _place(template / stage / "1" / "model.py", target / "model.py")
            for source, name in files:
                _place(source, target / name)
            # Graphs an earlier voice left here would be loaded for this one (a vocoder's
            # mask-free copy, a model.onnx where a Tacotron2 stage has none): the folder
            # holds this voice's graphs only. Engines (model.plan) are the GPU builder's.
            placed = {name for _, name in files}
            for stale in target.glob("*.onnx"):
                if stale.name not in placed:
                    stale.unlink()
        write_warmup_data(repo, voice, models, voice_dir)
        (repo / models.model(CHUNK_MODEL) / "1").mkdir(parents=True, exist_ok=True)  # ensembles need one
    model_configs.write(repo, options)
    for name, folder in zip(xtts_models, xtts_dirs, strict=True):
        place_xtts(repo, name, folder)
    if not xtts_dirs:
        for stale_name in (
            model_configs.XTTS_MODEL,
            *(model_configs.xtts_stage_name(model_configs.XTTS_MODEL, s) for s in XTTS_STAGES),
        ):
            shutil.rmtree(repo / stale_name, ignore_errors=True)
    place_vad(repo)
    log.info("model repository %s serves %s", repo, ", ".join(f"'{v.name}'" for v, _ in voices))
    return repo


def xtts_model_name(index: int, folder: Path) -> str:
    """``xtts`` for the first XTTS voice, ``xtts__<voice>`` for the others."""
    from triton_tts.xtts.card import XttsCard

    if index == 0:
        return model_configs.XTTS_MODEL
    name = XttsCard.load(folder).name
    if not VOICE_NAME.fullmatch(name):
        raise ValueError(
            f"XTTS voice name {name!r}: use letters, digits, '-' and '_' (it names a Triton model)"
        )
    return f"{model_configs.XTTS_MODEL}{VOICE_SEPARATOR}{name}"


def xtts_info(index: int, folder: Path) -> VoiceInfo:
    """What tts, tts_stream and the gateway know of an XTTS voice: its model, its first
    language, its named speakers (SPEAKER_ID is the index in this list)."""
    from triton_tts.client.voices import XTTS_KIND
    from triton_tts.xtts.card import XttsCard
    from triton_tts.xtts.speakers import speaker_names

    card = XttsCard.load(folder)
    if not VOICE_NAME.fullmatch(card.name):
        raise ValueError(f"XTTS voice name {card.name!r}: use letters, digits, '-' and '_'")
    return VoiceInfo(
        name=card.name,
        language=card.languages[0],
        sample_rate=card.output_rate,
        speakers={name: i for i, name in enumerate(speaker_names(folder))},
        tokens="xtts",
        model=xtts_model_name(index, folder),
        kind=XTTS_KIND,
    )


def place_xtts(repo: Path, name: str, folder: Path) -> None:
    """An XTTS voice folder as model ``name`` (the GPT's loop: the voice's files, its
    speakers, the model code and config) and its three stage models
    (the conditioning encoders and the decoder: each graph as ``model.onnx``, the CPU
    model code, a config per variant, rendered from the graph)."""
    from triton_tts.xtts.card import CARD_FILE, EMBEDDINGS_FILE, GRAPH_FILES, VOCAB_FILE
    from triton_tts.xtts.speakers import SPEAKERS_DIR

    # The model's folder stays a whole voice folder (hard links: no copy), which
    # ``triton-tts speakers add --voice`` reads; the model itself loads the GPT only.
    target = repo / name / "1"
    files = [*GRAPH_FILES, EMBEDDINGS_FILE, VOCAB_FILE, CARD_FILE]
    files += [p.name for p in folder.glob("*.onnx.data")]  # a large GPT's external weights
    for file in files:
        _place(folder / file, target / file)
    _place(paths.repository_template() / XTTS_CODE / "1" / "model.py", target / "model.py")
    for speaker in (folder / SPEAKERS_DIR).glob("*.npz"):
        _place(speaker, target / SPEAKERS_DIR / speaker.name)
    _write_config(repo / name / "config.pbtxt", model_configs.xtts(name))
    for stage in XTTS_STAGES:
        stage_dir = repo / model_configs.xtts_stage_name(name, stage)
        _place(folder / stage.graph, stage_dir / "1" / "model.onnx")
        _place(paths.repository_template() / GRAPH_CODE / "1" / "model.py", stage_dir / "1" / "model.py")
        _write_variants(stage_dir, model_configs.xtts_stage(name, stage, folder / stage.graph))


def place_vad(repo: Path) -> None:
    """The ``vad`` model (Silero VAD: triton_tts/build/vad_graph.py), when its graph is found:
    the graph as ``model.onnx``, the CPU model code, a config per variant."""
    from triton_tts.build.vad_graph import HOW, vad_graph

    target = repo / model_configs.VAD_MODEL
    graph = vad_graph()
    if graph is None:
        shutil.rmtree(target, ignore_errors=True)
        log.warning("%s", HOW)
        return
    (target / "1").mkdir(parents=True, exist_ok=True)
    model = target / "1" / "model.onnx"
    if not model.is_file() or model.read_bytes() != graph:
        model.write_bytes(graph)
    _place(paths.repository_template() / GRAPH_CODE / "1" / "model.py", target / "1" / "model.py")
    _write_variants(target, model_configs.vad(model))


def _write_variants(folder: Path, configs: dict[str, Any]) -> None:
    """A model's configs by variant: ``cpu`` as config.pbtxt, the others in configs/."""
    for variant, config in configs.items():
        _write_config(folder / ("config.pbtxt" if variant == "cpu" else f"configs/{variant}.pbtxt"), config)


def _write_config(path: Path, config: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(model_configs.HEADER + text_format.MessageToString(config), encoding="utf-8")


def ensure_default_voice(voice_dir: Path | None = None) -> Path:
    """Export the bundled Piper voice on first use (later runs reuse the folder, unless it
    is an export from before word timestamps)."""
    voice_dir = Path(voice_dir) if voice_dir is not None else paths.default_voice_dir()
    default = voice_dir.resolve() == paths.default_voice_dir().resolve()
    if (voice_dir / VOICE_FILE).exists():
        # An export from before word timestamps is made again (the bundled voice only).
        if not default or "DURATIONS" in graph_outputs(voice_dir / ACOUSTIC_FILE):
            return voice_dir
        log.info("the default voice at %s predates word timestamps: exporting it again", voice_dir)
        shutil.rmtree(voice_dir)
    if not default:
        raise SystemExit(_not_a_voice(voice_dir))
    from triton_tts.export.piper import bundled_joe_paths, export_piper_voice

    onnx_path, config_path = bundled_joe_paths()
    log.info("exporting the default voice to %s", voice_dir)
    export_piper_voice(onnx_path, config_path, voice_dir)
    return voice_dir


def ensure_voice(voice_dir: Path) -> Path:
    """A folder that ``--voice`` names, of either kind: a chunk voice (``voice.json``;
    the bundled one is exported on first use) or an XTTS voice (``xtts.json``). Anything
    else stops with one line that says which files are missing."""
    from triton_tts.xtts.card import is_xtts_folder

    voice_dir = Path(voice_dir)
    if is_xtts_folder(voice_dir):
        return voice_dir
    return ensure_default_voice(voice_dir)


def _not_a_voice(folder: Path) -> str:
    from triton_tts.xtts.card import CARD_FILE

    if folder.is_dir():
        missing = f"it has neither {VOICE_FILE} (a voice) nor {CARD_FILE} (an XTTS voice)"
    else:
        missing = f"no such folder (a voice folder holds {VOICE_FILE}, an XTTS voice's {CARD_FILE})"
    return f"no voice at {folder}: {missing}; export one with 'triton-tts export'"
