"""TensorRT engine cache: keys, hits and misses, checked on CPU with injected GPU names,
TensorRT versions and a stand-in trtexec (engines themselves build only on GPU nodes)."""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from triton_tts.export import tensorrt
from triton_tts.export.tensorrt import BuildTarget

H100 = BuildTarget("NVIDIA H100 80GB HBM3", "10.5.0+b18")
A10G = BuildTarget("NVIDIA A10G", "10.5.0+b18")


def graph_file(
    path: Path, inputs: list[tuple[str, int, list[str | int | None]]], weight: float = 1.0
) -> Path:
    values = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    out = helper.make_tensor_value_info("OUT", TensorProto.FLOAT, None)
    initializer = helper.make_tensor(
        "W", TensorProto.FLOAT, [1], np.full(1, weight, np.float32).tobytes(), raw=True
    )
    node = helper.make_node("Identity", [inputs[0][0]], ["OUT"])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(helper.make_graph([node], "g", values, [out], [initializer])), str(path))
    return path


def repository(root: Path, vocoder_weight: float = 1.0) -> Path:
    """A repository with an acoustic and a vocoder graph, as `build-repo` lays them out."""
    graph_file(
        root / "acoustic/1/model.onnx",
        [("PHONEME_IDS", TensorProto.INT64, ["b", "t"]), ("PHONEME_LENGTH", TensorProto.INT64, ["b"])],
    )
    graph_file(
        root / "vocoder/1/model.onnx", [("LATENT", TensorProto.FLOAT, ["b", 192, "f"])], vocoder_weight
    )
    return root


def key(onnx_path: Path, target: BuildTarget = H100, batch: int = 32, fp16: bool = True) -> str:
    return tensorrt.engine_cache_key(
        tensorrt.onnx_sha256(onnx_path), tensorrt.vocoder_profile(batch, 192), fp16, target
    )


def test_key_changes_with_everything_an_engine_depends_on(tmp_path: Path) -> None:
    vocoder = repository(tmp_path / "a") / "vocoder/1/model.onnx"
    same = repository(tmp_path / "b") / "vocoder/1/model.onnx"
    changed = repository(tmp_path / "c", vocoder_weight=2.0) / "vocoder/1/model.onnx"
    base = key(vocoder)
    assert key(same) == base  # the same graph elsewhere: the same engine
    assert key(changed) != base  # changed ONNX (weights)
    assert key(vocoder, target=A10G) != base  # changed GPU model
    assert key(vocoder, target=BuildTarget(H100.gpu_name, "10.6.0+b26")) != base  # changed TensorRT
    assert key(vocoder, batch=16) != base  # changed optimisation profile
    assert key(vocoder, fp16=False) != base  # changed precision
    # GPU model and TensorRT version also name the folders, for pruning by hand
    path = tensorrt.cached_plan_path(tmp_path / "cache", base, H100)
    assert path.relative_to(tmp_path / "cache").parts == (
        "NVIDIA-H100-80GB-HBM3",
        "tensorrt-10.5.0-b18",
        f"{base}.plan",
    )


def test_external_weights_are_part_of_the_key(tmp_path: Path) -> None:
    model = onnx.load(str(repository(tmp_path / "repo") / "vocoder/1/model.onnx"))
    external = tmp_path / "external" / "model.onnx"
    external.parent.mkdir()
    onnx.save(model, str(external), save_as_external_data=True, location="weights.bin", size_threshold=0)
    before = tensorrt.onnx_sha256(external)
    weights = external.with_name("weights.bin")
    weights.write_bytes(weights.read_bytes()[::-1])
    assert tensorrt.onnx_sha256(external) != before


def test_miss_builds_and_stores_then_hit_copies_without_building(tmp_path: Path) -> None:
    vocoder = repository(tmp_path / "repo") / "vocoder/1/model.onnx"
    profile = tensorrt.vocoder_profile(32, 192)
    cache = tmp_path / "cache"
    builds: list[Path] = []

    def fake_build(plan: Path, content: bytes = b"engine-1") -> None:
        builds.append(plan)
        plan.write_bytes(content)

    first = vocoder.with_name("model.plan")
    hit = tensorrt.build_cached(vocoder, first, profile, True, cache, H100, lambda: fake_build(first))
    assert not hit and builds == [first]
    stored = list(cache.rglob("*.plan"))
    assert len(stored) == 1 and stored[0].read_bytes() == b"engine-1"
    assert not list(cache.rglob("*.tmp"))  # stored by rename: no half-written leftovers

    again = tmp_path / "next-pod" / "model.plan"
    again.parent.mkdir()
    hit = tensorrt.build_cached(vocoder, again, profile, True, cache, H100, lambda: fake_build(again))
    assert hit and builds == [first]  # a hit builds nothing
    assert again.read_bytes() == b"engine-1" and not again.is_symlink()  # a copy: the cache is another volume

    # a different GPU model misses and gets an engine of its own next to the first
    other = tmp_path / "a10g" / "model.plan"
    other.parent.mkdir()
    hit = tensorrt.build_cached(
        vocoder, other, profile, True, cache, A10G, lambda: fake_build(other, b"a10g")
    )
    assert not hit and builds[-1] == other
    assert len(list(cache.rglob("*.plan"))) == 2


def test_changed_onnx_never_reuses_the_stale_engine(tmp_path: Path) -> None:
    profile = tensorrt.vocoder_profile(32, 192)
    cache = tmp_path / "cache"
    old = repository(tmp_path / "old") / "vocoder/1/model.onnx"
    new = repository(tmp_path / "new", vocoder_weight=3.0) / "vocoder/1/model.onnx"
    old_plan, new_plan = old.with_name("model.plan"), new.with_name("model.plan")
    tensorrt.build_cached(old, old_plan, profile, True, cache, H100, lambda: old_plan.write_bytes(b"old"))
    built: list[bool] = []

    def rebuild() -> None:
        built.append(True)
        new_plan.write_bytes(b"new")

    assert not tensorrt.build_cached(new, new_plan, profile, True, cache, H100, rebuild)
    assert built and new_plan.read_bytes() == b"new"


def test_a_cache_that_cannot_be_written_only_costs_a_rebuild(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    vocoder = repository(tmp_path / "repo") / "vocoder/1/model.onnx"
    plan = vocoder.with_name("model.plan")
    not_a_folder = tmp_path / "cache"
    not_a_folder.write_text("a file where the cache should be")
    with caplog.at_level(logging.WARNING):
        hit = tensorrt.build_cached(
            vocoder, plan, tensorrt.vocoder_profile(32, 192), True, not_a_folder, H100,
            lambda: plan.write_bytes(b"engine"),
        )  # fmt: skip
    assert not hit and plan.read_bytes() == b"engine"
    assert "the next start rebuilds it" in caplog.text


@pytest.mark.parametrize(
    ("banner", "version"),
    [
        ("&&&& RUNNING TensorRT.trtexec [TensorRT v100500] [b18] # trtexec --help", "10.5.0+b18"),
        ("&&&& RUNNING TensorRT.trtexec [TensorRT v101303] [b9] # trtexec --version", "10.13.3+b9"),
        ("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec", "8.6.1"),
        ("trtexec: command not found", None),
    ],
)
def test_tensorrt_version_from_the_trtexec_banner(banner: str, version: str | None) -> None:
    assert tensorrt.tensorrt_version_from_banner(banner) == version


def fake_tool(folder: Path, name: str, body: str) -> Path:
    tool = folder / name
    tool.write_text(f"#!{sys.executable}\nimport sys\n{body}\n")
    tool.chmod(0o755)
    return tool


def test_gpu_name_and_tensorrt_version_come_from_the_tools_or_overrides(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert tensorrt.detect_gpu_name() is None  # no nvidia-smi: no key, no cache
    fake_tool(tmp_path, "nvidia-smi", "print('NVIDIA L4')\nprint('NVIDIA L4')")
    assert tensorrt.detect_gpu_name() == "NVIDIA L4"
    assert tensorrt.detect_gpu_name("NVIDIA A100-SXM4-80GB") == "NVIDIA A100-SXM4-80GB"
    trtexec = fake_tool(
        tmp_path, "trtexec", "print('&&&& RUNNING TensorRT.trtexec [TensorRT v100500] [b18] #')"
    )
    assert tensorrt.detect_tensorrt_version(trtexec=str(trtexec)) == "10.5.0+b18"
    assert tensorrt.detect_tensorrt_version("10.7.0", trtexec=str(trtexec)) == "10.7.0"


STAND_IN_TRTEXEC = """
from pathlib import Path
if "--help" in sys.argv:
    print("&&&& RUNNING TensorRT.trtexec [TensorRT v100500] [b18] # trtexec --help")
    sys.exit(0)
engine = next(a.split("=", 1)[1] for a in sys.argv if a.startswith("--saveEngine="))
Path(engine).write_text(" ".join(sys.argv[1:]))
with open(Path(sys.argv[0]).with_name("builds.log"), "a") as log:
    log.write(engine + "\\n")
"""


def test_main_reuses_engines_across_pod_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the chart's export init container runs, twice (two starts on fresh emptyDirs)
    and then on another GPU model: only the first start and the new GPU build."""
    tools = tmp_path / "tools"
    tools.mkdir()
    trtexec = fake_tool(tools, "trtexec", STAND_IN_TRTEXEC)
    fake_tool(tools, "nvidia-smi", "print('NVIDIA A10G')")
    monkeypatch.setenv("PATH", str(tools))
    builds = tools / "builds.log"
    template = repository(tmp_path / "template")

    def start(name: str, *extra: str) -> Path:
        repo = tmp_path / name
        shutil.copytree(template, repo)
        tensorrt.main(
            ["--repo", str(repo), "--trtexec", str(trtexec), "--cache-dir", str(tmp_path / "cache"), *extra]
        )
        return repo

    first = start("first")
    assert len(builds.read_text().splitlines()) == 2  # acoustic + vocoder
    second = start("second")
    assert len(builds.read_text().splitlines()) == 2  # both from the cache
    for stage in ("acoustic", "vocoder"):
        plan = f"{stage}/1/model.plan"
        assert (second / plan).read_bytes() == (first / plan).read_bytes()
    assert {p.parent.parent.name for p in (tmp_path / "cache").rglob("*.plan")} == {"NVIDIA-A10G"}
    start("third", "--gpu-name", "NVIDIA L40S")
    assert len(builds.read_text().splitlines()) == 4  # another GPU model: its own engines


def test_main_without_a_gpu_name_builds_without_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    trtexec = fake_tool(tools, "trtexec", STAND_IN_TRTEXEC)
    monkeypatch.setenv("PATH", str(tools))  # no nvidia-smi
    monkeypatch.delenv(tensorrt.GPU_NAME_ENV, raising=False)
    repo = repository(tmp_path / "repo")
    with caplog.at_level(logging.WARNING):
        tensorrt.main(
            ["--repo", str(repo), "--trtexec", str(trtexec), "--cache-dir", str(tmp_path / "cache")]
        )
    assert (repo / "vocoder/1/model.plan").exists()
    assert not (tmp_path / "cache").exists()
    assert "GPU model (None)" in caplog.text
