"""The Helm chart, rendered by the real helm binary and validated offline.

No cluster can run here: every value set in helm/triton-tts/ci/ is linted and rendered,
every manifest is validated against the Kubernetes JSON schemas in strict mode, and the
rendered objects are checked for what matters to a deployment.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import Field
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

PROJECT_ROOT = Path(__file__).resolve().parent.parent
CHART = PROJECT_ROOT / "helm" / "triton-tts"
VALUE_SETS = sorted((CHART / "ci").glob("*-values.yaml"))
# The chart's kubeVersion floor and the newest schemas kubernetes-validate ships.
KUBERNETES_VERSIONS = ["1.27.0", kubernetes_validate.latest_version()]
CUSTOM_RESOURCES = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
}


def required_tool(name: str, fetched_by: str) -> Path:
    """A tool `make setup` puts in .tools/ (or $NAME): missing is a failure, never a skip."""
    binary = Path(os.environ.get(name.upper(), PROJECT_ROOT / ".tools" / name))
    if not binary.exists():
        pytest.fail(f"no {name} at {binary}: run `make setup` ({fetched_by})")
    return binary


@pytest.fixture(scope="session")
def helm() -> Path:
    return required_tool("helm", "scripts/fetch_helm.py")


def render(helm: Path, *args: str) -> list[dict[str, Any]]:
    done = subprocess.run(
        [str(helm), "template", "tts", str(CHART), "--namespace", "speech", *args],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    matches = [d for d in docs if d["kind"] == kind]
    assert len(matches) == 1, f"expected one {kind}, got {len(matches)}"
    return matches[0]


def triton_container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    spec = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    return next(c for c in spec["containers"] if c["name"] == "tritonserver")


@pytest.mark.parametrize("values", VALUE_SETS, ids=[v.stem for v in VALUE_SETS])
def test_lint_and_strict_schema_validation(helm: Path, values: Path) -> None:
    lint = subprocess.run(
        [str(helm), "lint", str(CHART), "--strict", "-f", str(values)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    docs = render(helm, "-f", str(values))
    assert {"Deployment", "Service"} <= {d["kind"] for d in docs}
    for doc in docs:
        if (doc["apiVersion"], doc["kind"]) in CUSTOM_RESOURCES:  # CRDs: no schema here
            assert doc["spec"]["groups"] if doc["kind"] == "PrometheusRule" else doc["spec"]["selector"]
            continue
        for version in KUBERNETES_VERSIONS:
            kubernetes_validate.validate(doc, version, strict=True)


def test_defaults_run_on_a_gpu_with_probes_and_graceful_stop(helm: Path) -> None:
    docs = render(helm)
    container = triton_container(docs)
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert container["resources"]["requests"]["nvidia.com/gpu"] == "1"
    assert "--model-config-name=gpu" in container["args"]
    assert "--model-repository=/models/repository" in container["args"]
    # `triton-tts serve` starts tritonserver with --strict-readiness (triton_tts/ops/server.py)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002, "health": 8003}
    # the watchdog's health port: ready only with every Python-backend instance alive
    assert container["command"] == ["triton-tts", "serve", "--no-build"]
    assert container["startupProbe"]["httpGet"] == {"path": "/ready", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/ready", "port": "health"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/live", "port": "health"}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300  # room for warm-up
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    exit_timeout = int(
        next(a for a in container["args"] if a.startswith("--triton-arg=--exit-timeout-secs=")).split("=")[2]
    )
    assert pod["terminationGracePeriodSeconds"] >= pre_stop + exit_timeout
    # the init container exports the voice and builds the repository, without a GPU
    init = pod["initContainers"][0]
    assert "triton-tts build-repo" in init["args"][0]
    assert "nvidia.com/gpu" not in init["resources"].get("limits", {})
    service = by_kind(docs, "Service")
    assert {p["name"]: p["port"] for p in service["spec"]["ports"]} == {
        "http": 8000,
        "grpc": 8001,
        "metrics": 8002,
        "gateway": 8080,  # the OpenAI-compatible gateway, a sidecar by default
        "riva": 50051,  # its Riva door (gRPC), on Riva's own port
    }
    assert not [d for d in docs if d["kind"] in ("HorizontalPodAutoscaler", "PodDisruptionBudget", "Ingress")]


def test_security_context_is_locked_down(helm: Path) -> None:
    pod = by_kind(render(helm), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False
    for container in pod["containers"] + pod["initContainers"]:
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["allowPrivilegeEscalation"] is False
        assert context["capabilities"]["drop"] == ["ALL"]
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert "/tmp" in mounts  # caches and espeak's temporary copy on a read-only root
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"]["medium"] == "Memory"


def test_cpu_variant_requests_no_gpu_and_scales_on_cpu(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "cpu-only-values.yaml"))
    container = triton_container(docs)
    assert not any(a.startswith("--model-config-name") for a in container["args"])
    assert "nvidia.com/gpu" not in json.dumps(container["resources"])
    hpa = by_kind(docs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"] == [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 70}},
        }
    ]
    assert by_kind(docs, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert "replicas" not in by_kind(docs, "Deployment")["spec"]  # the HPA owns it
    # CPU utilisation is over the pod's requests: without one on every container (the
    # gateway sidecar included) the HPA reports no metric and never scales
    for container in pod_spec(docs)["containers"]:
        assert container["resources"]["requests"]["cpu"], container["name"]


def test_tensorrt_with_queue_time_autoscaling(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "tensorrt-hpa-servicemonitor-values.yaml"))
    container = triton_container(docs)
    assert "--model-config-name=tensorrt" in container["args"]
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["runtimeClassName"] == "nvidia"
    assert pod["tolerations"][0]["key"] == "nvidia.com/gpu"
    init = pod["initContainers"][0]
    assert "python3 -m triton_tts.export.tensorrt --repo /models/repository" in init["args"][0]
    assert init["resources"]["limits"]["nvidia.com/gpu"] == "1"  # engines build on the GPU
    hpa = by_kind(docs, "HorizontalPodAutoscaler")
    metrics = {
        m["pods"]["metric"]["name"]: m["pods"]["target"]
        for m in hpa["spec"]["metrics"]
        if m["type"] == "Pods"
    }
    assert metrics["triton_tts_stage_queue_us_per_request"] == {
        "type": "AverageValue",
        "averageValue": "40000",
    }
    assert metrics["triton_tts_gpu_utilization_percent"]["averageValue"] == "80"
    config_map = by_kind(docs, "ConfigMap")["data"]
    rules = yaml.safe_load(config_map["config.yaml"])["rules"]
    names = {r["name"]["as"] for r in rules}
    # every signal is exposed (switching autoscaling.signal changes the HPA only)
    assert names == set(metrics) | {"triton_tts_demand_capacity_ratio"}
    # the adapter reads the recorded series; the PromQL lives in the recording rule only,
    # the same group in the PrometheusRule and in the plain rules file (tests/test_autoscaling.py)
    queue_rule = next(r for r in rules if r["name"]["as"] == "triton_tts_stage_queue_us_per_request")
    recorded = by_kind(docs, "PrometheusRule")["spec"]["groups"][0]["rules"][0]
    assert queue_rule["seriesQuery"].startswith(recorded["record"] + "{")
    assert "nv_inference_queue_duration_us" not in queue_rule["metricsQuery"]
    assert yaml.safe_load(config_map["recording-rules.yaml"]) == by_kind(docs, "PrometheusRule")["spec"]
    assert by_kind(docs, "PrometheusRule")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    monitor = by_kind(docs, "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert (  # the Ingress's default backend: the gateway (sidecar: the release's Service)
        by_kind(docs, "Ingress")["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["name"]
        == "gateway"
    )


def test_object_storage_repository_uses_the_secret_and_no_volume(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "object-storage-values.yaml"))
    container = triton_container(docs)
    assert "--model-repository=s3://ml-models/triton-tts/repository" in container["args"]
    assert container["envFrom"] == [{"secretRef": {"name": "triton-tts-s3"}}]
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert "models" not in {v["name"] for v in pod["volumes"]}


def test_pvc_repository_is_mounted_read_only(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "pvc-values.yaml"))
    container = triton_container(docs)
    assert "--model-repository=/models/repositories/joe" in container["args"]
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    volume = next(v for v in pod["volumes"] if v["name"] == "models")
    assert volume["persistentVolumeClaim"] == {"claimName": "tts-models", "readOnly": True}


def test_build_options_reach_the_export(helm: Path) -> None:
    docs = render(helm, "-f", str(CHART / "ci" / "export-memory-values.yaml"))
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    script = pod["initContainers"][0]["args"][0]
    assert "--max-batch-size 16" in script and "--gpu-instances 2" in script
    assert "--gpu-queue-delay-us 5000" in script
    models = next(v for v in pod["volumes"] if v["name"] == "models")
    assert models["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert "--triton-arg=--log-format=ISO8601" in triton_container(docs)["args"]


def chart_key(option: str) -> str:
    """A build option's chart value: max_batch_size -> build.maxBatchSize."""
    first, *rest = option.split("_")
    return first + "".join(word.capitalize() for word in rest)


def build_line(docs: list[dict[str, Any]]) -> list[str]:
    """The init container's `triton-tts build-repo` command line, after "triton-tts"."""
    import shlex

    script = by_kind(docs, "Deployment")["spec"]["template"]["spec"]["initContainers"][0]["args"][0]
    line = next(part for part in script.replace("\\\n", " ").splitlines() if "build-repo" in part)
    return shlex.split(line)[1:]


def schema_of(option: Field[Any]) -> dict[str, Any]:
    """The values.schema.json entry a build option's declaration calls for."""
    import re

    meta = option.metadata
    if meta["pattern"] and re.fullmatch(meta["pattern"], "1"):  # a count (string or number) or a word
        return {"type": ["string", "integer"], "pattern": meta["pattern"], "minimum": 1}
    if meta["pattern"]:  # words only (admission: work|requests): a number fails at install
        return {"type": "string", "pattern": meta["pattern"]}
    bounds = {"minimum": meta["minimum"], "maximum": meta["maximum"]}
    integer = {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}
    return {"type": "array", "items": integer} if isinstance(option.default, tuple) else integer


def test_chart_build_values_are_the_build_options() -> None:
    """values.yaml's build.* and the schema's are BuildOptions' options, each at its default
    and with its bounds (one owner: triton_tts/build/model_configs.py); nothing more, nothing less."""
    from triton_tts.build.model_configs import build_option_fields

    options = {chart_key(option.name): option for option in build_option_fields()}
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["build"]
    schema = json.loads((CHART / "values.schema.json").read_text(encoding="utf-8"))["properties"]["build"]
    assert not set(values) - set(options), (
        f"chart build values with no BuildOptions option: {set(values) - set(options)}"
    )
    assert not set(options) - set(values), (
        f"BuildOptions options missing from values.yaml: {set(options) - set(values)}"
    )
    assert set(schema["properties"]) == set(options) and schema["additionalProperties"] is False
    for key, option in options.items():
        default = list(option.default) if isinstance(option.default, tuple) else option.default
        assert values[key] == default, f"values.yaml build.{key}={values[key]!r}, BuildOptions: {default!r}"
        assert schema["properties"][key] == schema_of(option), f"values.schema.json build.{key}"


def test_the_charts_build_command_is_the_clis_and_its_defaults_are_the_products(helm: Path) -> None:
    """The init container's build-repo line parses with the real CLI, and with the chart's
    default values it builds exactly the default BuildOptions."""
    from triton_tts.build.model_configs import BuildOptions
    from triton_tts.cli import build_parser
    from triton_tts.cli.options import build_options

    assert build_options(build_parser().parse_args(build_line(render(helm)))) == BuildOptions()


def other_allowed(pattern: str, default: str) -> str:
    """A value a string option's pattern allows other than its default: a count where it
    takes one, else another of its words (a pattern ^(word|word...)$)."""
    import re

    if re.fullmatch(pattern, "3"):
        return "3"
    words = re.fullmatch(r"\^\(([\w|]+)\)\$", pattern)
    assert words, f"no other value known for pattern {pattern}"
    return next(w for w in words[1].split("|") if w != default)


def test_every_chart_build_value_reaches_the_build(helm: Path, tmp_path: Path) -> None:
    """Each value set away from its default arrives as that value (flag names, lists, big
    numbers: Helm reads numbers as floats, and 3e+07 would not parse)."""
    from triton_tts.build.model_configs import build_option_fields
    from triton_tts.cli import build_parser
    from triton_tts.cli.options import build_options

    changed: dict[str, Any] = {}
    for option in build_option_fields():
        default: Any = option.default
        if isinstance(default, tuple):
            changed[option.name] = (3, 5)
        elif option.metadata["pattern"]:
            changed[option.name] = other_allowed(option.metadata["pattern"], default)
        else:
            changed[option.name] = default - 1 if option.metadata["maximum"] else default + 1
    values = tmp_path / "values.yaml"
    values.write_text(
        yaml.safe_dump(
            {"build": {chart_key(k): list(v) if isinstance(v, tuple) else v for k, v in changed.items()}}
        ),
        encoding="utf-8",
    )
    built = build_options(build_parser().parse_args(build_line(render(helm, "-f", str(values)))))
    assert {name: getattr(built, name) for name in changed} == changed


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("variant=h100", "value must be one of 'gpu', 'tensorrt', 'cpu'"),
        ("modelRepository.source=pvc", "claimName"),
        ("modelRepository.source=objectStorage", "does not match pattern"),
        ("modelRepository.source=ftp", "value must be one of"),
        ("gpu.count=0", "minimum"),
        ("build.vocoderThreads=lots", "does not match pattern"),
        ("build.maxBatchSze=8", "additional properties 'maxBatchSze' not allowed"),
        ("build.maxBatchSize=512", "maximum"),
        ("build.admission=3", "got number, want string"),  # a word, not a count
        ("autoscaling.targetCPUUtilizationPercentage=150", "maximum"),
        ("strategy.type=BlueGreen", "value must be one of 'RollingUpdate', 'Recreate'"),
        ("strategy.rollingUpdate.maxSurge=lots", "does not match pattern '^[0-9]+%$'"),
        ("engineCache.enabled=true,engineCache.claimName=engines", "at '/variant': value must be 'tensorrt'"),
        ("variant=tensorrt,engineCache.enabled=true", "at '/engineCache/claimName': minLength"),
        ("variant=tensorrt,engineCache.enabled=true,engineCache.hostPath=cache", "does not match pattern"),
        ("gateway.mode=ingress", "value must be one of 'sidecar', 'deployment'"),
        ("gateway.corsOrigins[0]=https://app.example.com/", "does not match pattern"),  # never matches
        ("gateway.apiKeySecret.nmae=keys", "additional properties 'nmae' not allowed"),
    ],
)
def test_bad_values_fail_at_install_time_with_a_clear_message(
    helm: Path, override: str, message: str
) -> None:
    done = subprocess.run(
        [str(helm), "template", "tts", str(CHART), "--set", override],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert message in done.stderr, done.stderr


def test_object_storage_with_minio_style_uri_is_rejected(helm: Path) -> None:
    done = subprocess.run(
        [
            str(helm), "template", "tts", str(CHART),
            "--set", "modelRepository.source=objectStorage",
            "--set", "modelRepository.objectStorage.uri=http://minio:9000/models",
        ],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "s3|gs|as" in done.stderr


def test_strict_validation_really_rejects_unknown_fields(helm: Path) -> None:
    deployment = by_kind(render(helm), "Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["gpuCount"] = 1
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(by_kind(docs, "Deployment")["spec"]["template"]["spec"])


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
OWN_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "tts", "effect": "NoSchedule"}


def test_gpu_pods_tolerate_the_gpu_taint_and_keep_the_users_own(helm: Path) -> None:
    assert pod_spec(render(helm))["tolerations"] == [GPU_TOLERATION]
    full_pool = pod_spec(render(helm, "-f", str(CHART / "ci" / "full-gpu-pool-values.yaml")))
    assert full_pool["tolerations"] == [GPU_TOLERATION, OWN_TOLERATION]
    # a user who already listed the GPU toleration gets it once
    tensorrt = pod_spec(render(helm, "-f", str(CHART / "ci" / "tensorrt-hpa-servicemonitor-values.yaml")))
    assert tensorrt["tolerations"] == [GPU_TOLERATION]
    # the cpu variant asks for no GPU and needs no GPU node
    assert "tolerations" not in pod_spec(render(helm, "-f", str(CHART / "ci" / "cpu-only-values.yaml")))
    cpu_own = pod_spec(
        render(helm, "--set", "variant=cpu", "--set-json", f"tolerations=[{json.dumps(OWN_TOLERATION)}]")
    )
    assert cpu_own["tolerations"] == [OWN_TOLERATION]
    assert "tolerations" not in pod_spec(render(helm, "--set-json", "gpu.tolerations=[]"))


def test_rollout_strategy_surges_by_default_and_can_free_a_gpu_first(helm: Path) -> None:
    default = by_kind(render(helm), "Deployment")["spec"]["strategy"]
    assert default == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    full_pool = by_kind(render(helm, "-f", str(CHART / "ci" / "full-gpu-pool-values.yaml")), "Deployment")
    assert full_pool["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}
    percent = by_kind(render(helm, "--set", "strategy.rollingUpdate.maxSurge=25%"), "Deployment")
    assert percent["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == "25%"
    # Recreate takes no rollingUpdate, though the defaults merged one into the values
    recreate = by_kind(render(helm, "--set", "strategy.type=Recreate"), "Deployment")
    assert recreate["spec"]["strategy"] == {"type": "Recreate"}
    for version in KUBERNETES_VERSIONS:
        kubernetes_validate.validate(recreate, version, strict=True)
    stuck = subprocess.run(
        [str(helm), "template", "tts", str(CHART), "--set", "strategy.rollingUpdate.maxSurge=0"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert stuck.returncode != 0 and "cannot both be 0" in stuck.stderr


def test_engine_cache_volume_reaches_the_tensorrt_export_only(helm: Path) -> None:
    def export_and_server(
        docs: list[dict[str, Any]],
    ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        pod = pod_spec(docs)
        return pod, pod["initContainers"][0], triton_container(docs)

    pod, init, server = export_and_server(
        render(helm, "-f", str(CHART / "ci" / "tensorrt-hpa-servicemonitor-values.yaml"))
    )
    mount = next(m for m in init["volumeMounts"] if m["name"] == "engine-cache")
    assert f"--cache-dir {mount['mountPath']}" in init["args"][0]
    assert not mount.get("readOnly")  # the export stores the engines it builds
    assert "engine-cache" not in {m["name"] for m in server["volumeMounts"]}  # plans are copied
    volume = next(v for v in pod["volumes"] if v["name"] == "engine-cache")
    assert volume["persistentVolumeClaim"] == {"claimName": "trt-engines"}

    pod, init, _ = export_and_server(render(helm, "-f", str(CHART / "ci" / "full-gpu-pool-values.yaml")))
    volume = next(v for v in pod["volumes"] if v["name"] == "engine-cache")
    assert volume["hostPath"] == {"path": "/var/cache/triton-tts/engines", "type": "DirectoryOrCreate"}
    assert "--cache-dir /engine-cache" in init["args"][0]

    pod, init, _ = export_and_server(render(helm, "--set", "variant=tensorrt"))
    assert "--cache-dir" not in init["args"][0]
    assert "engine-cache" not in {v["name"] for v in pod["volumes"]}


# Triton's own series that a dashboard may read: the same names in core src/metrics.cc at
# r24.10 (2.51, the tests' server) and at main of June 2026 (26.08's 2.72, the image's).
TRITON_METRICS = {
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us", "nv_inference_pending_request_count",
    "nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage", "nv_gpu_power_limit", "nv_energy_consumption",
    "nv_cpu_utilization", "nv_cpu_memory_total_bytes", "nv_cpu_memory_used_bytes",
}  # fmt: skip
PROMQL_KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
}  # fmt: skip


def promql_metric_names(expr: str) -> set[str]:
    """The series an expression reads: what is left once label matchers, ranges and
    grouping labels are gone, less functions (a name before "(") and keywords."""
    import re

    bare = re.sub(r"\{[^}]*\}|\[[^\]]*\]", " ", expr)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", bare)
    return {
        m[0]
        for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare)
        if m[0] not in PROMQL_KEYWORDS and not bare[m.end() :].lstrip().startswith("(")
    }


def gateway_series() -> tuple[set[str], set[str]]:
    """The gateway's families and the series names they expose, from its own registry."""
    from triton_tts.gateway.metrics import GatewayMetrics

    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",)}
    families = list(GatewayMetrics().registry.collect())
    return {f.name for f in families}, {f.name + s for f in families for s in suffixes[f.type]}


def test_grafana_dashboard_reads_only_series_that_exist(helm: Path, tmp_path: Path) -> None:
    from triton_tts.runtime.metrics import FAMILIES

    assert not [d for d in render(helm) if d["kind"] == "ConfigMap"]  # off by default
    docs = render(helm, "-f", str(CHART / "ci" / "full-gpu-pool-values.yaml"))
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"  # Grafana's sidecar label
    assert config_map["metadata"]["annotations"] == {"grafana_folder": "Speech"}
    (text,) = config_map["data"].values()
    dashboard = json.loads(text)
    titles = {p["title"] for p in dashboard["panels"]}
    assert {
        "Requests by outcome", "Characters per second, per voice", "Audio seconds per second, per voice",
        "First-chunk latency (tts_stream)", "Real-time factor", "Triton queue time per stage",
        "GPU utilisation",
    } <= titles  # fmt: skip
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    ours = {
        f.name + suffix
        for f in FAMILIES
        for suffix in (("_bucket", "_sum", "_count") if f.kind == "HISTOGRAM" else ("",))
    }
    gateway_families, gateway_names = gateway_series()
    read = set().union(*(promql_metric_names(e) for e in exprs))
    assert read <= ours | gateway_names | TRITON_METRICS, read - ours - gateway_names - TRITON_METRICS
    assert {f.name for f in FAMILIES} <= {n.removesuffix("_bucket").removesuffix("_sum") for n in read}
    shown = {n.removesuffix("_total").removesuffix("_bucket") for n in read}
    assert gateway_families <= shown, gateway_families - shown  # every gateway metric has a panel
    # every selector reads this release's pods only
    for expr in exprs:
        assert expr.count('namespace="speech", pod=~"tts-triton-tts-') == expr.count("{"), expr
    # and Prometheus parses every query (Grafana's $__rate_interval is a range at run time)
    rules = tmp_path / "dashboard-rules.yaml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "dashboard",
                        "rules": [
                            {"record": f"dashboard:query{i}", "expr": e.replace("$__rate_interval", "5m")}
                            for i, e in enumerate(exprs)
                        ],
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    promtool = required_tool("promtool", "scripts/fetch_promtool.py")
    checked = subprocess.run(
        [str(promtool), "check", "rules", str(rules)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


# --- The OpenAI-compatible gateway: a sidecar in the Triton pod, or its own Deployment.

GATEWAY_DEPLOYMENT_VALUES = CHART / "ci" / "gateway-deployment-values.yaml"
RIVA_TLS = "/etc/triton-tts/riva-tls"  # where gateway.riva.tls.secretName is mounted


def named(docs: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == kind}


def container_port(container: dict[str, Any], port: int | str) -> int:
    """The container port a probe or Service targetPort (a name or a number) reaches."""
    for declared in container.get("ports", []):
        if port in (declared["name"], declared["containerPort"]):
            return int(declared["containerPort"])
    raise AssertionError(f"{container['name']} has no port {port!r}")


def flags(args: list[str]) -> dict[str, list[str]]:
    """--name=value arguments by name (a repeated flag keeps every value)."""
    found: dict[str, list[str]] = {}
    for arg in args:
        name, _, value = arg.partition("=")
        found.setdefault(name, []).append(value)
    return found


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def gateway_of(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (gateway,) = [
        c
        for d in docs
        if d["kind"] == "Deployment"
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["name"] == "gateway"
    ]
    return dict(gateway)


def check_gateway_serves_where_probed(gateway: dict[str, Any]) -> int:
    """--port is the declared container port, and both probes hit it."""
    served = container_port(gateway, "gateway")
    assert flags(gateway["args"])["--port"] == [str(served)]
    assert flags(gateway["args"])["--host"] == ["0.0.0.0"]  # reachable from the Service
    for probe, path in (("livenessProbe", "/health/live"), ("readinessProbe", "/health/ready")):
        assert gateway[probe]["httpGet"]["path"] == path
        assert container_port(gateway, gateway[probe]["httpGet"]["port"]) == served
    assert gateway["command"] == ["triton-tts", "gateway"]  # the image's entry point runs Triton
    assert "nvidia.com/gpu" not in json.dumps(gateway["resources"])
    return served


@pytest.mark.parametrize(
    "extra", [[], ["-f", str(GATEWAY_DEPLOYMENT_VALUES)]], ids=["sidecar", "gateway-deployment"]
)
def test_no_other_process_sees_the_keys_on_tritons_command_line(helm: Path, extra: list[str]) -> None:
    """Triton takes its keys on its command line (docs/deployment.md, "Keys on Triton's
    command line"): each pod runs as a non-root user in PID namespaces of its own (no
    sharing between containers, none with the node), and serve listens on every interface
    only because the chart says so (its default is 127.0.0.1)."""
    docs = render(helm, *extra)
    deployments = [d for d in docs if d["kind"] == "Deployment"]
    assert len(deployments) == (2 if extra else 1)
    for deployment in deployments:
        pod = deployment["spec"]["template"]["spec"]
        assert pod["shareProcessNamespace"] is False and pod["hostPID"] is False and pod["hostIPC"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
        assert not any(c.get("securityContext", {}).get("runAsUser") == 0 for c in pod["containers"])
    (triton,) = [
        c
        for d in deployments
        for c in d["spec"]["template"]["spec"]["containers"]
        if c["name"] == "tritonserver"
    ]
    assert flags(triton["args"])["--host"] == ["0.0.0.0"]


def test_gateway_sidecar_calls_its_own_pods_triton_and_shares_its_service(helm: Path) -> None:
    docs = render(helm)
    pod = pod_spec(docs)
    assert [c["name"] for c in pod["containers"]] == ["tritonserver", "gateway"]
    triton, gateway = pod["containers"]
    served = check_gateway_serves_where_probed(gateway)
    # over localhost to the gRPC port Triton listens on in the same pod
    grpc = container_port(triton, "grpc")
    assert f"--grpc-port={grpc}" in triton["args"]
    assert flags(gateway["args"])["--triton-url"] == [f"localhost:{grpc}"]
    # no two containers of the pod declare the same port
    declared = [p["containerPort"] for c in pod["containers"] for p in c["ports"]]
    assert len(declared) == len(set(declared))
    # the release's Service routes the gateway port to the gateway container
    (service,) = named(docs, "Service").values()
    (port,) = [p for p in service["spec"]["ports"] if p["port"] == served]
    assert container_port(gateway, port["targetPort"]) == served
    # it leaves the endpoints with Triton and keeps answering while Triton drains: same
    # preStop, the pod's grace period covers both
    assert gateway["lifecycle"] == triton["lifecycle"]
    assert {m["name"] for m in gateway["volumeMounts"]} == {"gateway-tmp"}  # nothing of Triton's
    assert "env" not in gateway  # no API key Secret: no authentication


def test_gateway_deployment_reaches_triton_through_the_triton_service(helm: Path) -> None:
    docs = render(helm, "-f", str(GATEWAY_DEPLOYMENT_VALUES))
    deployments, services = named(docs, "Deployment"), named(docs, "Service")
    assert set(deployments) == {"tts-triton-tts", "tts-triton-tts-gateway"}
    assert set(services) == {"tts-triton-tts", "tts-triton-tts-gateway", "tts-triton-tts-grpc-pods"}
    triton_pod = deployments["tts-triton-tts"]["spec"]["template"]
    gateway_pod = deployments["tts-triton-tts-gateway"]["spec"]["template"]
    assert [c["name"] for c in triton_pod["spec"]["containers"]] == ["tritonserver"]
    (gateway,) = gateway_pod["spec"]["containers"]
    served = check_gateway_serves_where_probed(gateway)
    # each Deployment, Service and PDB selects its own pods and never the other's
    own = {"tts-triton-tts": triton_pod, "tts-triton-tts-gateway": gateway_pod}
    for name, pod in own.items():
        other = next(p for n, p in own.items() if n != name)
        disruption = named(docs, "PodDisruptionBudget")[name]["spec"]["selector"]["matchLabels"]
        deployment = deployments[name]["spec"]["selector"]["matchLabels"]
        for selector in (deployment, services[name]["spec"]["selector"], disruption):
            assert selects(selector, pod["metadata"]["labels"]), name
            assert not selects(selector, other["metadata"]["labels"]), name
    # the gateway's Triton URL resolves (dns:///) to every ready Triton pod: a headless
    # Service in this namespace that selects Triton's pods only, at a port that leads to
    # the one tritonserver serves gRPC on
    host, port = flags(gateway["args"])["--triton-url"][0].rsplit(":", 1)
    assert host == "dns:///tts-triton-tts-grpc-pods.speech.svc"
    pods = services["tts-triton-tts-grpc-pods"]["spec"]
    assert pods["clusterIP"] == "None" and not pods.get("publishNotReadyAddresses")
    assert selects(pods["selector"], triton_pod["metadata"]["labels"])
    assert not selects(pods["selector"], gateway_pod["metadata"]["labels"])
    (grpc,) = [p for p in pods["ports"] if p["port"] == int(port)]
    triton = triton_pod["spec"]["containers"][0]
    assert grpc["appProtocol"] == "grpc"
    assert f"--grpc-port={container_port(triton, grpc['targetPort'])}" in triton["args"]
    # the gateway's Service leads to the gateway; Triton's no longer carries its port
    exposed = {p["name"]: p for p in services["tts-triton-tts-gateway"]["spec"]["ports"]}
    assert set(exposed) == {"gateway", "riva"}  # its HTTP port and Riva's
    assert container_port(gateway, exposed["gateway"]["targetPort"]) == served
    triton_ports = {p["name"] for p in services["tts-triton-tts"]["spec"]["ports"]}
    assert triton_ports == {"http", "grpc", "metrics"}
    # scaled and scheduled on its own: no GPU, no GPU toleration, the value set's nodes
    assert deployments["tts-triton-tts-gateway"]["spec"]["replicas"] == 4
    assert "tolerations" not in gateway_pod["spec"]
    assert gateway_pod["spec"]["nodeSelector"] == {"node-role.example.com/edge": "true"}
    assert flags(gateway["args"])["--cors-origin"] == ["https://app.example.com"]
    # the pod stays for as long as a Triton pod may drain, and is locked down like it
    spec = gateway_pod["spec"]
    assert spec["terminationGracePeriodSeconds"] == triton_pod["spec"]["terminationGracePeriodSeconds"]
    assert gateway["lifecycle"] == triton["lifecycle"]
    assert spec["securityContext"]["runAsNonRoot"] is True and spec["automountServiceAccountToken"] is False
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    (tmp,) = [m for m in gateway["volumeMounts"] if m["mountPath"] == "/tmp"]
    assert {"name": tmp["name"], "emptyDir": {}} in spec["volumes"]


@pytest.mark.parametrize("mode", ["sidecar", "deployment"])
def test_gateway_api_keys_come_from_the_secret(helm: Path, mode: str) -> None:
    docs = render(
        helm, "--set", f"gateway.mode={mode}",
        "--set", "gateway.apiKeySecret.name=tts-gateway-keys", "--set", "gateway.apiKeySecret.key=keys",
    )  # fmt: skip
    key = {
        "name": "TRITON_TTS_API_KEY",  # the gateway reads its keys from this variable only
        "valueFrom": {"secretKeyRef": {"name": "tts-gateway-keys", "key": "keys"}},
    }
    assert gateway_of(docs)["env"] == [key]

    # and `triton-tts serve` restricts Triton's inference APIs to the same key, in either mode
    def triton_env(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        pod = named(docs, "Deployment")["tts-triton-tts"]["spec"]["template"]["spec"]
        return list(next(c for c in pod["containers"] if c["name"] == "tritonserver").get("env", []))

    assert triton_env(docs) == [key]
    assert triton_env(render(helm, "--set", f"gateway.mode={mode}")) == []  # no Secret: no key


@pytest.mark.parametrize("mode", ["sidecar", "deployment"])
def test_gateway_disabled_renders_no_gateway(helm: Path, mode: str) -> None:
    docs = render(helm, "--set", "gateway.enabled=false", "--set", f"gateway.mode={mode}")
    assert [c["name"] for c in pod_spec(docs)["containers"]] == ["tritonserver"]
    assert not [d for d in docs if "gateway" in d["metadata"]["name"]]
    assert {p["name"] for p in by_kind(docs, "Service")["spec"]["ports"]} == {"http", "grpc", "metrics"}
    assert "gateway" not in json.dumps(pod_spec(docs)["volumes"])


def test_gateway_port_may_not_collide_with_triton_in_the_same_pod(helm: Path) -> None:
    done = subprocess.run(
        [str(helm), "template", "tts", str(CHART), "--set", "gateway.port=8001"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "gateway.port 8001 is taken by Triton" in done.stderr
    # in its own pod it may use any port
    gateway = gateway_of(render(helm, "--set", "gateway.mode=deployment", "--set", "gateway.port=8001"))
    assert check_gateway_serves_where_probed(gateway) == 8001


@pytest.mark.parametrize("mode", ["sidecar", "deployment"])
def test_the_charts_gateway_command_is_the_clis(
    helm: Path, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The gateway's command line parses with the real CLI and, with default values, runs
    with the CLI's defaults but for what the chart decides: where Triton is (a sidecar's
    is the default, localhost:8001) and how long a stop may take."""
    from triton_tts.cli import build_parser

    for variable in ("TRITON_TTS_TRITON_URL", "GATEWAY_PORT", "TRITON_TTS_CORS_ORIGINS", "RIVA_PORT"):
        monkeypatch.delenv(variable, raising=False)
    defaults = vars(build_parser().parse_args(["gateway"]))

    def parsed(*values: str) -> tuple[dict[str, Any], dict[str, Any]]:
        docs = render(helm, "--set", f"gateway.mode={mode}", *values)
        gateway = gateway_of(docs)
        args = vars(build_parser().parse_args([*gateway["command"][1:], *gateway["args"]]))
        pod = next(
            d
            for d in named(docs, "Deployment").values()
            if gateway in d["spec"]["template"]["spec"]["containers"]
        )
        return args, pod["spec"]["template"]["spec"]

    args, pod = parsed()
    changed = {key: value for key, value in args.items() if value != defaults[key]}
    # host: the CLI listens on 127.0.0.1 unless told; a pod's port is reached from outside
    chart_decides = {"graceful_timeout_s", "host"} | ({"triton_url"} if mode == "deployment" else set())
    assert set(changed) == chart_decides
    if mode == "deployment":
        assert changed["triton_url"] == "dns:///tts-triton-tts-grpc-pods.speech.svc:8001"
    # A stop: preStop, then responses in flight finish while Triton drains the requests
    # they wait on, within the grace period (Triton's side: the defaults test above).
    (gateway,) = [c for c in pod["containers"] if c["name"] == "gateway"]
    pre_stop = int(gateway["lifecycle"]["preStop"]["exec"]["command"][1])
    triton_drain = build_parser().parse_args(["serve"]).drain_timeout
    assert triton_drain <= args["graceful_timeout_s"] < pod["terminationGracePeriodSeconds"] - pre_stop

    origins = ["https://app.example.com", "http://localhost:3000"]
    args, _ = parsed(
        "--set-json", f"gateway.corsOrigins={json.dumps(origins)}", "--set", "gateway.maxInputChars=1000"
    )
    assert args["cors_origin"] == origins and args["max_input_chars"] == 1000
    # Riva's door: the port the chart declares (default: the CLI's, Riva's 50051), the
    # mounted certificate, or none at all
    assert args["riva_port"] == 50051 and args["riva_tls_cert"] is None and args["riva_tls_key"] is None
    args, _ = parsed("--set", "gateway.riva.port=50052", "--set", "gateway.riva.tls.secretName=riva-tls")
    assert args["riva_port"] == 50052
    assert (args["riva_tls_cert"], args["riva_tls_key"]) == (f"{RIVA_TLS}/tls.crt", f"{RIVA_TLS}/tls.key")
    args, _ = parsed("--set", "gateway.riva.enabled=false")
    assert args["riva_port"] == 0


@pytest.mark.parametrize("mode", ["sidecar", "deployment"])
def test_the_ingress_can_route_to_the_gateway(helm: Path, mode: str) -> None:
    """ingress.backend=gateway (the default): the Ingress's Service and port lead to the
    container that serves the gateway's port and probes, in either mode; triton: Triton's HTTP."""
    base = ["--set", "ingress.enabled=true", "--set", f"gateway.mode={mode}"]
    assert (
        yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["ingress"]["backend"] == "gateway"
    )
    for backend, container_name in (("triton", "tritonserver"), ("gateway", "gateway")):
        docs = render(helm, *base, "--set", f"ingress.backend={backend}")
        (ingress,) = named(docs, "Ingress").values()
        (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
        target = path["backend"]["service"]
        service = named(docs, "Service")[target["name"]]
        (port,) = [p for p in service["spec"]["ports"] if p["name"] == target["port"]["name"]]
        (pod,) = [
            d["spec"]["template"]
            for d in named(docs, "Deployment").values()
            if selects(service["spec"]["selector"], d["spec"]["template"]["metadata"]["labels"])
        ]
        (container,) = [c for c in pod["spec"]["containers"] if c["name"] == container_name]
        reached = container_port(container, port["targetPort"])
        if backend == "gateway":
            assert reached == check_gateway_serves_where_probed(container)
        else:
            assert f"--http-port={reached}" in container["args"]
    with pytest.raises(AssertionError, match=r"needs gateway\.enabled"):
        render(helm, *base, "--set", "ingress.backend=gateway", "--set", "gateway.enabled=false")


def scraped_ports(docs: list[dict[str, Any]], kind: str) -> list[tuple[str, str, int]]:
    """What a release's monitors of ``kind`` scrape: (container, path, container port) for
    every endpoint, followed through the Service (ServiceMonitor) to the pods it selects."""
    pods = [d["spec"]["template"] for d in named(docs, "Deployment").values()]
    found: list[tuple[str, str, int]] = []
    for monitor in (d for d in docs if d["kind"] == kind):
        selector = monitor["spec"]["selector"]["matchLabels"]
        endpoints = monitor["spec"]["podMetricsEndpoints" if kind == "PodMonitor" else "endpoints"]
        for endpoint in endpoints:
            if kind == "PodMonitor":
                targets = [
                    (pod, endpoint["port"]) for pod in pods if selects(selector, pod["metadata"]["labels"])
                ]
            else:
                targets = [
                    (pod, port["targetPort"])
                    for service in named(docs, "Service").values()
                    if selects(selector, service["metadata"]["labels"])
                    for port in service["spec"]["ports"]
                    if port["name"] == endpoint["port"]
                    for pod in pods
                    if selects(service["spec"]["selector"], pod["metadata"]["labels"])
                ]
            for pod, port in targets:
                for container in pod["spec"]["containers"]:
                    if any(port in (p["name"], p["containerPort"]) for p in container.get("ports", [])):
                        found.append((container["name"], endpoint["path"], container_port(container, port)))
    return found


@pytest.mark.parametrize("mode", ["sidecar", "deployment"])
@pytest.mark.parametrize(
    ("kind", "switch"), [("ServiceMonitor", "serviceMonitor"), ("PodMonitor", "podMonitor")]
)
def test_prometheus_scrapes_triton_and_the_gateway_once_each(
    helm: Path, mode: str, kind: str, switch: str
) -> None:
    docs = render(helm, "--set", f"gateway.mode={mode}", "--set", f"{switch}.enabled=true")
    triton_pod = named(docs, "Deployment")["tts-triton-tts"]["spec"]["template"]["spec"]
    triton = next(c for c in triton_pod["containers"] if c["name"] == "tritonserver")
    gateway = gateway_of(docs)
    metrics_port = container_port(triton, "metrics")
    assert f"--metrics-port={metrics_port}" in triton["args"]
    # the gateway serves /metrics on its own port (unless told --no-metrics)
    assert "--no-metrics" not in gateway["args"]
    assert sorted(scraped_ports(docs, kind)) == sorted(
        [
            ("tritonserver", "/metrics", metrics_port),
            ("gateway", "/metrics", check_gateway_serves_where_probed(gateway)),
        ]
    )


@pytest.mark.parametrize("mode", ["sidecar", "deployment"])
def test_the_dashboards_gateway_panels_read_the_pods_that_serve_them(helm: Path, mode: str) -> None:
    """A gateway query's pod regex matches the pods whose /metrics carry its series: the
    Triton pods with a sidecar, the gateway Deployment's pods otherwise, never the other's."""
    import re

    docs = render(helm, "--set", f"gateway.mode={mode}", "--set", "grafanaDashboard.enabled=true")
    (config_map,) = [d for d in docs if d["kind"] == "ConfigMap"]
    (text,) = config_map["data"].values()
    targets = [(p["title"], t["expr"]) for p in json.loads(text)["panels"] for t in p["targets"]]
    # pod names as a ReplicaSet makes them: <deployment>-<template hash>-<5 characters>
    pod = {name: f"{name}-5d8f7c9b6-x2k4q" for name in named(docs, "Deployment")}
    serving = pod["tts-triton-tts" if mode == "sidecar" else "tts-triton-tts-gateway"]
    gateway_exprs = [e for title, e in targets if title.startswith("Gateway:")]
    assert len(gateway_exprs) >= 4
    for expr in gateway_exprs:
        for regex in re.findall(r'pod=~"([^"]+)"', expr):
            assert re.fullmatch(regex, serving), (regex, serving)
            assert not [p for p in pod.values() if p != serving and re.fullmatch(regex, p)], regex
    for expr in (e for title, e in targets if not title.startswith("Gateway:")):
        for regex in re.findall(r'pod=~"([^"]+)"', expr):
            assert re.fullmatch(regex, pod["tts-triton-tts"]), regex
            assert mode == "sidecar" or not re.fullmatch(regex, pod["tts-triton-tts-gateway"]), regex
    off = render(helm, "--set", "gateway.enabled=false", "--set", "grafanaDashboard.enabled=true")
    (config_map,) = [d for d in off if d["kind"] == "ConfigMap"]
    assert "triton_tts_gateway" not in json.dumps(config_map["data"])


# --- NetworkPolicy: who reaches which port, evaluated as Kubernetes does (Ingress rules)

NAMESPACE = "speech"  # render()'s
PEER_JOB = {"namespace": "batch", "labels": {"app": "audiobook-renderer"}}  # ci/network-policy-values.yaml
INGRESS_CONTROLLER = {
    "namespace": "ingress-nginx",
    "labels": {"app.kubernetes.io/component": "controller"},
}
PROMETHEUS = {"namespace": "monitoring", "labels": {"app.kubernetes.io/name": "prometheus"}}
STRANGER = {"namespace": "speech", "labels": {"app": "someone-else"}}  # a pod beside ours


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) on ``labels``."""
    if not selects(selector.get("matchLabels", {}), labels):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values", [])
        if not {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]:
            return False
    return True


def peer_admits(peer: dict[str, Any], source: dict[str, Any]) -> bool:
    if "ipBlock" in peer:
        import ipaddress

        ip = source.get("ip")
        block = peer["ipBlock"]
        return (
            ip is not None
            and ipaddress.ip_address(ip) in ipaddress.ip_network(block["cidr"])
            and not any(ipaddress.ip_address(ip) in ipaddress.ip_network(e) for e in block.get("except", []))
        )
    if "namespace" not in source:  # an address outside the cluster's pods
        return False
    namespace_labels = {"kubernetes.io/metadata.name": source["namespace"]}
    if "namespaceSelector" in peer:
        in_namespace = matches(peer["namespaceSelector"], namespace_labels)
    else:  # a podSelector alone: pods of the policy's own namespace
        in_namespace = source["namespace"] == NAMESPACE
    return in_namespace and matches(peer.get("podSelector", {}), source["labels"])


def reachable(docs: list[dict[str, Any]], deployment: str, source: dict[str, Any]) -> set[str]:
    """The named container ports of ``deployment``'s pods that ``source`` may connect to."""
    pod = named(docs, "Deployment")[deployment]["spec"]["template"]
    ports = {p["name"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
    policies = [
        d
        for d in docs
        if d["kind"] == "NetworkPolicy" and matches(d["spec"]["podSelector"], pod["metadata"]["labels"])
    ]
    if not policies:
        return ports  # no policy selects the pod: everything is open
    allowed: set[str] = set()
    for policy in policies:
        assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open (object storage, Triton)
        for rule in policy["spec"].get("ingress", []):
            if "from" in rule and not any(peer_admits(peer, source) for peer in rule["from"]):
                continue
            for port in rule.get("ports", [{"port": name} for name in ports]):
                assert port["port"] in ports, (
                    f"{policy['metadata']['name']}: no container port {port['port']}"
                )
                allowed.add(port["port"])
    return allowed


def test_the_network_policy_keeps_tritons_ports_to_the_pod_and_monitoring(helm: Path) -> None:
    """Defaults (gateway sidecar): from outside the pod, Triton's HTTP and gRPC are closed to
    everyone; its metrics open to the monitoring namespace; the gateway's port (what the
    Ingress routes to) open to all; the health port to no pod (the kubelet's probes come
    from the node, which no policy filters)."""
    docs = render(helm)
    (policy,) = named(docs, "NetworkPolicy").values()
    assert policy["metadata"]["name"] == "tts-triton-tts"
    triton = "tts-triton-tts"
    assert reachable(docs, triton, STRANGER) == {"gateway", "riva"}  # the gateway's two doors
    assert reachable(docs, triton, INGRESS_CONTROLLER) == {"gateway", "riva"}
    assert reachable(docs, triton, {"ip": "203.0.113.7"}) == {"gateway", "riva"}
    assert reachable(docs, triton, PROMETHEUS) == {
        "metrics",
        "gateway",
        "riva",  # anyone's while ingressFrom is []
    }  # Triton's and the gateway's /metrics
    # the gateway calls its pod's Triton over localhost: nothing to open
    assert flags(gateway_of(docs)["args"])["--triton-url"][0].startswith("localhost:")
    # the Ingress (default backend: the gateway) leads to an open port
    ingress = by_kind(render(helm, "--set", "ingress.enabled=true"), "Ingress")
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["name"] in reachable(
        docs, triton, INGRESS_CONTROLLER
    )
    # no gateway, no Ingress: only monitoring gets in
    alone = render(helm, "--set", "gateway.enabled=false")
    assert reachable(alone, triton, STRANGER) == set()
    assert reachable(alone, triton, PROMETHEUS) == {"metrics"}
    # a value turns it off
    assert not named(render(helm, "--set", "networkPolicy.enabled=false"), "NetworkPolicy")


def test_the_network_policy_lets_the_gateway_deployment_reach_triton_over_grpc_only(helm: Path) -> None:
    docs = render(helm, "-f", str(GATEWAY_DEPLOYMENT_VALUES))
    assert set(named(docs, "NetworkPolicy")) == {"tts-triton-tts", "tts-triton-tts-gateway"}
    gateway_pod = named(docs, "Deployment")["tts-triton-tts-gateway"]["spec"]["template"]
    gateway = {"namespace": NAMESPACE, "labels": gateway_pod["metadata"]["labels"]}
    assert reachable(docs, "tts-triton-tts", gateway) == {"grpc"}  # what --triton-url calls
    assert flags(gateway_of(docs)["args"])["--triton-url"][0].endswith(":8001")
    assert reachable(docs, "tts-triton-tts", STRANGER) == set()
    assert reachable(docs, "tts-triton-tts", PROMETHEUS) == {"metrics"}
    # the gateway's own pods: its HTTP port and Riva's, for the Ingress (and Prometheus) alike
    for source in (STRANGER, INGRESS_CONTROLLER, PROMETHEUS):
        assert reachable(docs, "tts-triton-tts-gateway", source) == {"gateway", "riva"}
    # another release's gateway in the same namespace is not ours
    other = {
        "namespace": NAMESPACE,
        "labels": {**gateway_pod["metadata"]["labels"], "app.kubernetes.io/instance": "x"},
    }
    assert reachable(docs, "tts-triton-tts", other) == set()


def test_the_network_policy_admits_configured_peers_and_narrows_the_ingress(helm: Path) -> None:
    """ci/network-policy-values.yaml: peers reach Triton's APIs and metrics; the routed
    ports (ingress.backend=triton: Triton's HTTP, and the sidecar gateway's HTTP and Riva
    ports) only the Ingress controller's namespace; monitoring by its configured namespace."""
    docs = render(helm, "-f", str(CHART / "ci" / "network-policy-values.yaml"))
    triton = "tts-triton-tts"
    assert reachable(docs, triton, PEER_JOB) == {"http", "grpc", "metrics"}
    assert reachable(docs, triton, {"ip": "10.20.3.4"}) == {"http", "grpc", "metrics"}
    assert reachable(docs, triton, {"ip": "10.20.9.4"}) == set()  # the block's exception
    assert reachable(docs, triton, {**PEER_JOB, "labels": {"app": "other"}}) == set()
    assert reachable(docs, triton, INGRESS_CONTROLLER) == {"http", "gateway", "riva"}
    assert reachable(docs, triton, {**INGRESS_CONTROLLER, "labels": {}}) == set()
    assert reachable(docs, triton, STRANGER) == set()
    assert reachable(docs, triton, PROMETHEUS) == set()  # "monitoring" is not the configured namespace
    assert reachable(docs, triton, {**PROMETHEUS, "namespace": "observability"}) == {"metrics", "gateway"}
    # the Ingress leads to a port its controller may reach
    ingress = by_kind(docs, "Ingress")
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["name"] == "http"


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("networkPolicy.peers[0].ipBlock.cidr=10.0.0.0", "does not match pattern"),
        (
            "networkPolicy.peers[0].podSelectr.matchLabels.app=x",
            "additional properties 'podSelectr' not allowed",
        ),
        ("networkPolicy.ingressFrom[0].podSelector.matchExpressions[0].operator=Is", "value must be one of"),
        (
            "networkPolicy.ingressFrom[0].ipBlock.cidr=10.0.0.0/8,"
            "networkPolicy.ingressFrom[0].podSelector.matchLabels.app=x",
            "maxProperties",  # an ipBlock stands alone in its peer
        ),
        ("networkPolicy.enabled=yes", "got string, want boolean"),
    ],
)
def test_bad_network_policy_values_fail_with_a_clear_message(helm: Path, override: str, message: str) -> None:
    done = subprocess.run(
        [str(helm), "template", "tts", str(CHART), "--set", override],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and message in done.stderr, done.stderr


def test_lexicons_reach_the_build_as_files_of_a_configmap(helm: Path, tmp_path: Path) -> None:
    """values.lexicons: a ConfigMap of files mounted into the export step, each passed to
    build-repo as --lexicon LANG=FILE; the files as the pod sees them load as lexicons, and
    the build line parses with the real CLI into those lexicons."""
    from triton_tts.cli import build_parser
    from triton_tts.cli.options import build_options

    values = tmp_path / "lexicons.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "lexicons": [
                    {
                        "name": "names",
                        "language": "en-us",
                        "entries": "Nguyen\tŋwˈɪn\nNew York\tnˈuː jˈɔːk\n",
                    },
                    {"name": "brands", "entries": "Xiaomi\tʃaʊmˈiː\n"},
                ]
            },
            allow_unicode=True,
        ),
        encoding="utf-8",
    )
    docs = render(helm, "-f", str(values))
    config_map = next(
        d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-lexicons")
    )
    pod = by_kind(docs, "Deployment")["spec"]["template"]["spec"]
    mount = next(m for m in pod["initContainers"][0]["volumeMounts"] if m["name"] == "lexicons")
    volume = next(v for v in pod["volumes"] if v["name"] == "lexicons")
    assert volume["configMap"]["name"] == config_map["metadata"]["name"] and mount["readOnly"]
    folder = tmp_path / "lexicons"  # the ConfigMap as mounted
    folder.mkdir()
    for name, text in config_map["data"].items():
        (folder / name).write_text(text, encoding="utf-8")
    line = [arg.replace(mount["mountPath"], str(folder)) for arg in build_line(docs)]
    lexicons = build_options(build_parser().parse_args(line)).lexicons
    assert [(x.language, x.entries) for x in lexicons] == [
        ("en-us", {"nguyen": "ŋwˈɪn", "new york": "nˈuː jˈɔːk"}),
        ("en", {"xiaomi": "ʃaʊmˈiː"}),
    ]
    assert "triton-tts/lexicons" in by_kind(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    plain = render(helm)
    assert not [d for d in plain if d["metadata"]["name"].endswith("-lexicons")]


# --- Riva's door: the gateway's gRPC port for Riva's TTS API (gateway.riva)

RIVA_TLS_INGRESS_VALUES = CHART / "ci" / "riva-tls-ingress-values.yaml"
BACKEND_PROTOCOL = "nginx.ingress.kubernetes.io/backend-protocol"
MODES = [[], ["--set", "gateway.mode=deployment"]]


def gateway_pod_of(docs: list[dict[str, Any]]) -> tuple[str, dict[str, Any]]:
    """The Deployment that runs the gateway container, by name, and its pod template."""
    gateway = gateway_of(docs)
    ((name, deployment),) = [
        (name, d)
        for name, d in named(docs, "Deployment").items()
        if gateway in d["spec"]["template"]["spec"]["containers"]
    ]
    return name, deployment["spec"]["template"]


def service_port_leads_to(docs: list[dict[str, Any]], service_name: str, port_name: str) -> int:
    """The gateway container port that a Service's named port reaches."""
    service = named(docs, "Service")[service_name]
    (port,) = [p for p in service["spec"]["ports"] if p["name"] == port_name]
    _, pod = gateway_pod_of(docs)
    assert selects(service["spec"]["selector"], pod["metadata"]["labels"])
    return container_port(gateway_of(docs), port["targetPort"])


@pytest.mark.parametrize("mode", MODES, ids=["sidecar", "deployment"])
def test_the_riva_port_is_served_exposed_and_let_in_by_default(helm: Path, mode: list[str]) -> None:
    """On by default at Riva's port: the flag, the container port, the Service's port (gRPC)
    and the NetworkPolicy agree on one number and one name; the probes stay HTTP."""
    assert yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))["gateway"]["riva"] == {
        "enabled": True,
        "port": 50051,
        "tls": {"secretName": ""},
        "ingress": {
            "enabled": False,
            "className": "",
            "annotations": {},
            "hosts": [{"host": "riva.example.com", "paths": ["/"]}],
            "tls": [],
        },
    }
    docs = render(helm, *mode)
    gateway = gateway_of(docs)
    served = container_port(gateway, "riva")
    assert served == 50051 and flags(gateway["args"])["--riva-port"] == [str(served)]
    assert "--riva-tls-cert" not in flags(gateway["args"])  # plaintext unless a Secret is named
    service_name = "tts-triton-tts-gateway" if mode else "tts-triton-tts"
    (port,) = [p for p in named(docs, "Service")[service_name]["spec"]["ports"] if p["name"] == "riva"]
    assert (port["port"], port["appProtocol"]) == (50051, "grpc")
    assert service_port_leads_to(docs, service_name, "riva") == served
    # the probes are the gateway's HTTP ones; nothing probes gRPC health, which is not served
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if probe in gateway:
            assert (
                "grpc" not in gateway[probe]
                and container_port(gateway, gateway[probe]["httpGet"]["port"]) != served
            )
    # no two containers of the gateway's pod declare the same port
    _, pod = gateway_pod_of(docs)
    declared = [p["containerPort"] for c in pod["spec"]["containers"] for p in c["ports"]]
    assert len(declared) == len(set(declared))
    # the Riva port lets in whoever may call the gateway's HTTP port (ingressFrom: anyone)
    deployment, _ = gateway_pod_of(docs)
    for source in (STRANGER, INGRESS_CONTROLLER, {"ip": "203.0.113.7"}):
        assert {"gateway", "riva"} <= reachable(docs, deployment, source)
    # the Dockerfile's EXPOSE follows values (tests/test_dockerfile.py); no Ingress unless asked
    assert not named(docs, "Ingress")
    assert not named(render(helm, *mode, "--set", "ingress.enabled=true"), "Ingress").get(
        "tts-triton-tts-riva"
    )


@pytest.mark.parametrize("mode", MODES, ids=["sidecar", "deployment"])
def test_the_riva_port_admits_the_gateways_callers_only_when_narrowed(helm: Path, mode: list[str]) -> None:
    """With networkPolicy.ingressFrom narrowed, the Riva port admits exactly its peers, as the
    gateway's HTTP port does (which monitoring also reaches, for /metrics; Riva's does not)."""
    docs = render(helm, "-f", str(CHART / "ci" / "network-policy-values.yaml"), *mode)
    deployment, _ = gateway_pod_of(docs)
    assert "riva" in reachable(docs, deployment, INGRESS_CONTROLLER)
    assert "gateway" in reachable(docs, deployment, INGRESS_CONTROLLER)
    for source in (STRANGER, {**INGRESS_CONTROLLER, "labels": {}}, PEER_JOB, {"ip": "203.0.113.7"}):
        assert "riva" not in reachable(docs, deployment, source), source
        assert "gateway" not in reachable(docs, deployment, source), source
    monitoring = {**PROMETHEUS, "namespace": "observability"}  # the value set's monitoring namespace
    assert "gateway" in reachable(docs, deployment, monitoring)
    assert "riva" not in reachable(docs, deployment, monitoring)


@pytest.mark.parametrize("mode", MODES, ids=["sidecar", "deployment"])
def test_the_riva_port_serves_tls_with_the_mounted_certificate(helm: Path, mode: list[str]) -> None:
    docs = render(helm, *mode, "--set", "gateway.riva.tls.secretName=tts-riva-tls")
    gateway = gateway_of(docs)
    (mount,) = [m for m in gateway["volumeMounts"] if m["mountPath"] == RIVA_TLS]
    assert mount["readOnly"] is True
    _, pod = gateway_pod_of(docs)
    (volume,) = [v for v in pod["spec"]["volumes"] if v["name"] == mount["name"]]
    assert volume == {"name": mount["name"], "secret": {"secretName": "tts-riva-tls"}}
    # both flags, at the two files of a kubernetes.io/tls Secret as mounted
    assert flags(gateway["args"])["--riva-tls-cert"] == [f"{RIVA_TLS}/tls.crt"]
    assert flags(gateway["args"])["--riva-tls-key"] == [f"{RIVA_TLS}/tls.key"]
    # Triton's container (sidecar) never sees the key
    for container in pod["spec"]["containers"]:
        if container["name"] != "gateway":
            assert mount["name"] not in {m["name"] for m in container["volumeMounts"]}


@pytest.mark.parametrize("mode", MODES, ids=["sidecar", "deployment"])
def test_riva_disabled_renders_nothing_of_it(helm: Path, mode: list[str]) -> None:
    """riva.enabled=false: --riva-port=0 and no port, Service port, policy rule, volume or
    Ingress, whatever else riva.* says."""
    docs = render(
        helm, *mode, "--set", "gateway.riva.enabled=false",
        "--set", "gateway.riva.tls.secretName=tts-riva-tls",
    )  # fmt: skip
    gateway = gateway_of(docs)
    assert flags(gateway["args"])["--riva-port"] == ["0"]
    assert [a for a in gateway["args"] if "riva" in a] == ["--riva-port=0"]
    rest = [d for d in docs if d["kind"] != "ConfigMap"]
    text = json.dumps(rest).replace('"--riva-port=0"', "")
    assert "riva" not in text.lower(), [
        d["metadata"]["name"] for d in rest if "riva" in json.dumps(d).lower()
    ]
    done = subprocess.run(
        [str(helm), "template", "tts", str(CHART), *mode, "--set", "gateway.riva.enabled=false",
         "--set", "gateway.riva.ingress.enabled=true"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode != 0 and "gateway.riva.ingress.enabled needs" in done.stderr, done.stderr
    # no gateway, no Riva either
    off = render(helm, *mode, "--set", "gateway.enabled=false")
    assert "riva" not in json.dumps([d for d in off if d["kind"] != "ConfigMap"]).lower()


@pytest.mark.parametrize("mode", MODES, ids=["sidecar", "deployment"])
def test_the_riva_ingress_renders_only_when_asked_and_leads_to_the_riva_port(
    helm: Path, mode: list[str]
) -> None:
    """gateway.riva.ingress: an Ingress of its own (a gRPC backend is per Ingress), whose
    backend reaches the gateway container's Riva port, open to the Ingress controller;
    ingress-nginx told GRPC, or GRPCS when the gateway serves TLS itself."""
    plain = render(helm, *mode, "--set", "ingress.enabled=true")
    ((name, http),) = named(plain, "Ingress").items()
    assert name == "tts-triton-tts" and BACKEND_PROTOCOL not in (http["metadata"].get("annotations") or {})

    docs = render(helm, *mode, "--set", "gateway.riva.ingress.enabled=true")
    (ingress,) = named(docs, "Ingress").values()
    assert ingress["metadata"]["name"] == "tts-triton-tts-riva"
    assert ingress["metadata"]["annotations"] == {BACKEND_PROTOCOL: "GRPC"}
    (rule,) = ingress["spec"]["rules"]
    assert rule["host"] == "riva.example.com"
    (path,) = rule["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/", "Prefix")
    target = path["backend"]["service"]
    assert target["port"] == {"name": "riva"}
    assert service_port_leads_to(docs, target["name"], "riva") == container_port(gateway_of(docs), "riva")
    deployment, _ = gateway_pod_of(docs)
    assert "riva" in reachable(docs, deployment, INGRESS_CONTROLLER)
    # both Ingresses together: two objects, each with its own backend port
    both = named(
        render(helm, *mode, "--set", "ingress.enabled=true", "--set", "gateway.riva.ingress.enabled=true"),
        "Ingress",
    )
    assert {
        n: i["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["port"]["name"]
        for n, i in both.items()
    } == {
        "tts-triton-tts": "gateway",
        "tts-triton-tts-riva": "riva",
    }


def test_the_riva_tls_ingress_value_set(helm: Path) -> None:
    """ci/riva-tls-ingress-values.yaml: the certificate mounted, GRPCS to the backend, the
    clients' TLS at the Ingress, another port, the user's annotations kept, and the port
    open to the ingress controller's namespace only."""
    docs = render(helm, "-f", str(RIVA_TLS_INGRESS_VALUES))
    gateway = gateway_of(docs)
    assert flags(gateway["args"])["--riva-port"] == ["50052"] and container_port(gateway, "riva") == 50052
    assert flags(gateway["args"])["--riva-tls-key"] == [f"{RIVA_TLS}/tls.key"]
    (ingress,) = named(docs, "Ingress").values()
    assert ingress["metadata"]["annotations"] == {
        BACKEND_PROTOCOL: "GRPCS",
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "300",
    }
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"] == [{"secretName": "riva-example-com-tls", "hosts": ["riva.example.com"]}]
    target = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    assert service_port_leads_to(docs, target["name"], target["port"]["name"]) == 50052
    assert reachable(docs, "tts-triton-tts-gateway", INGRESS_CONTROLLER) == {"gateway", "riva"}
    assert "riva" not in reachable(docs, "tts-triton-tts-gateway", STRANGER)
    # the user's own backend-protocol wins over the chart's
    overridden = render(
        helm,
        "-f",
        str(RIVA_TLS_INGRESS_VALUES),
        "--set-string",
        r"gateway.riva.ingress.annotations.nginx\.ingress\.kubernetes\.io/backend-protocol=GRPC",
    )
    assert by_kind(overridden, "Ingress")["metadata"]["annotations"][BACKEND_PROTOCOL] == "GRPC"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "gateway.riva.port=8001"], "gateway.riva.port 8001 is taken by Triton"),
        (["--set", "gateway.riva.port=8080"], "gateway.riva.port 8080 is the gateway's HTTP port"),
        (
            ["--set", "gateway.mode=deployment", "--set", "gateway.riva.port=8080"],
            "is the gateway's HTTP port",
        ),
        (["--set", "gateway.riva.port=0"], "minimum"),
        (["--set", "gateway.riva.tsl.secretName=x"], "additional properties 'tsl' not allowed"),
    ],
)
def test_bad_riva_values_fail_with_a_clear_message(helm: Path, values: list[str], message: str) -> None:
    done = subprocess.run(
        [str(helm), "template", "tts", str(CHART), *values], capture_output=True, text=True, check=False
    )
    assert done.returncode != 0 and message in done.stderr, done.stderr
    # in its own pod the Riva port may be Triton's number
    gateway = gateway_of(render(helm, "--set", "gateway.mode=deployment", "--set", "gateway.riva.port=8001"))
    assert container_port(gateway, "riva") == 8001
