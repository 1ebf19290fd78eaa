"""The Helm chart's test kit (tests/test_helm_*.py): the real helm binary, its renders,
and what the tests look up in what it renders (containers, ports, flags, network peers)."""

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


def other_allowed(pattern: str, default: str) -> str:
    """A value a string option's pattern allows other than its default: a count where it
    takes one, else another of its words (a pattern ^(word|word...)$)."""
    import re

    if re.fullmatch(pattern, "3"):
        return "3"
    words = re.fullmatch(r"\^\(([\w|]+)\)\$", pattern)
    assert words, f"no other value known for pattern {pattern}"
    return next(w for w in words[1].split("|") if w != default)


def pod_spec(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return dict(by_kind(docs, "Deployment")["spec"]["template"]["spec"])


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}


OWN_TOLERATION = {"key": "dedicated", "operator": "Equal", "value": "tts", "effect": "NoSchedule"}


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
