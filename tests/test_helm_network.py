"""The Helm chart's NetworkPolicy (who reaches which port, evaluated as Kubernetes does:
Ingress rules) and the lexicons' ConfigMap, rendered by the real helm binary offline
(tests/helm_chart.py)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.helm_chart import (
    CHART,
    GATEWAY_DEPLOYMENT_VALUES,
    INGRESS_CONTROLLER,
    NAMESPACE,
    PEER_JOB,
    PROMETHEUS,
    STRANGER,
    build_line,
    by_kind,
    flags,
    gateway_of,
    named,
    reachable,
    render,
)


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
