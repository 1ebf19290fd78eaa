"""The Helm chart, rendered by the real helm binary and validated offline.

No cluster can run here: every value set in helm/triton-tts/ci/ is linted and rendered,
every manifest is validated against the Kubernetes JSON schemas in strict mode, and the
rendered objects are checked for what matters to a deployment.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.helm_chart import (
    CHART,
    CUSTOM_RESOURCES,
    GPU_TOLERATION,
    KUBERNETES_VERSIONS,
    OWN_TOLERATION,
    TRITON_METRICS,
    VALUE_SETS,
    build_line,
    by_kind,
    chart_key,
    gateway_series,
    other_allowed,
    pod_spec,
    promql_metric_names,
    render,
    required_tool,
    schema_of,
    triton_container,
)


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
