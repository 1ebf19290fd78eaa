"""The Helm chart's gateway (a sidecar in the Triton pod, or its own Deployment) and its
Riva door (gateway.riva), rendered by the real helm binary and validated offline
(tests/helm_chart.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helm_chart import (
    BACKEND_PROTOCOL,
    CHART,
    GATEWAY_DEPLOYMENT_VALUES,
    INGRESS_CONTROLLER,
    MODES,
    PEER_JOB,
    PROMETHEUS,
    RIVA_TLS,
    RIVA_TLS_INGRESS_VALUES,
    STRANGER,
    by_kind,
    check_gateway_serves_where_probed,
    container_port,
    flags,
    gateway_of,
    gateway_pod_of,
    named,
    pod_spec,
    reachable,
    render,
    scraped_ports,
    selects,
    service_port_leads_to,
)


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
