"""The autoscaling signals: the chart's recording rules run by promtool on synthetic traffic
of every mix, and on the series a real tritonserver exports.

Two signals, per pod (definitions and reasons: helm/triton-tts/templates/_autoscaling.tpl):
the average queue time per request at the stage models, and demand over capacity (audio
asked of tts and tts_stream per second over the audio the pod makes per second, summed
over voices). The rule group is taken from the chart as helm renders it, so what is tested
is what is deployed.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tritonclient.http as httpclient
import yaml

from tests.autoscaling_traffic import (
    CAPACITY,
    DEMAND_SERIES,
    DEMANDED,
    ENTRY_MODELS,
    NAMESPACE,
    POD_TEMPLATE_HASH,
    QUEUE,
    QUEUE_SERIES,
    SCENARIOS,
    SUCCESS,
    Rules,
    Scenario,
    Signal,
    by_model,
    is_stage,
    pod,
    promtool_case,
    run_promtool,
    scrape,
    selector,
    stage_regex,
    stream,
)
from tests.helm_chart import CHART, by_kind, render, required_tool
from triton_tts.ops.repository import STAGES
from triton_tts.ops.server import TritonServer


@pytest.fixture(scope="session")
def promtool() -> Path:
    return required_tool("promtool", "scripts/fetch_promtool.py")


@pytest.fixture(scope="module")
def rules(helm: Path) -> Rules:
    docs = render(
        helm, "--set", "prometheusRule.enabled=true", "--set", "prometheusAdapterRules.enabled=true"
    )
    config_map = by_kind(docs, "ConfigMap")["data"]
    groups = yaml.safe_load(config_map["recording-rules.yaml"])
    assert groups == by_kind(docs, "PrometheusRule")["spec"]  # one group, two ways to load it
    (group,) = groups["groups"]
    records = {r["record"]: r["expr"] for r in group["rules"]}
    assert set(records) == {QUEUE_SERIES, DEMAND_SERIES}
    adapter_rules = yaml.safe_load(config_map["config.yaml"])["rules"]

    def signal(series: str) -> Signal:
        (adapter,) = [r for r in adapter_rules if r["seriesQuery"].startswith(series + "{")]
        return Signal(series, records[series], adapter["metricsQuery"], adapter["name"]["as"])

    return Rules(groups, signal(QUEUE_SERIES), signal(DEMAND_SERIES))


def test_scenarios_expect_the_queue_time_their_traffic_had() -> None:
    """The scenarios' own arithmetic: stream-only traffic has an ordinary queue time (a rule
    dividing by `tts` requests alone read it as ~1e9 times too large), long texts read as
    short ones do, idle pods as 0."""
    by_name = {s.name: s for s in SCENARIOS}
    assert by_name["tts_stream_only"].expected() == {pod("stream"): 2_500}
    assert list(by_name["long_texts"].expected().values()) == list(by_name["tts_only"].expected().values())
    assert by_name["idle"].expected() == {pod("idle1"): 0, pod("idle2"): 0, pod("idle3"): 0}


def test_scenarios_expect_the_demand_their_traffic_had() -> None:
    """Demand over capacity, by hand: one voice asked half its capacity reads 0.5; long
    texts are more work than short ones; two voices add up, each over its own capacity
    (direct tts_chunk calls are not counted); refused demand counts, so a saturated pod
    reads above 1; idle pods read 0, with capacity published or not."""
    by_name = {s.name: s.expected_demand() for s in SCENARIOS}
    assert by_name["tts_only"] == {pod("short"): 500}
    assert by_name["tts_stream_only"] == {pod("stream"): 400}
    assert by_name["long_texts"] == {pod("long"): 800}  # 8 s of audio asked per second, of 10
    assert by_name["mixed"] == {pod("mixed"): 200 + 400}  # joe 1.6 of 8, ljs 0.8 of 2
    assert by_name["one_saturated_among_idle"] == {pod("hot"): 1500, pod("cold1"): 0, pod("cold2"): 0}
    assert by_name["idle"] == {pod("idle1"): 0, pod("idle2"): 0, pod("idle3"): 0}


@pytest.mark.parametrize(
    ("release", "fullname"),
    [("tts", "tts-triton-tts"), ("speech-synthesis-production-europe-west", None)],
)
def test_rule_selects_the_releases_pods_even_with_long_names(
    helm: Path, release: str, fullname: str | None
) -> None:
    """Pods are <deployment>-<hash>-<5 random>, the part before the random one cut at 58
    characters by the API server: the rule must still find them, and not a sibling
    release's pods where the name leaves room to tell them apart."""
    command = [str(helm), "template", release, str(CHART), "--namespace", NAMESPACE]
    done = subprocess.run(
        [*command, "--set", "prometheusRule.enabled=true"], capture_output=True, text=True, check=True
    )
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    exprs = [r["expr"] for r in by_kind(docs, "PrometheusRule")["spec"]["groups"][0]["rules"]]
    assert len(exprs) == 2
    (pattern,) = {p for expr in exprs for p in re.findall(r'pod=~"([^"]+)"', expr)}  # every rule, one
    name = fullname or f"{release}-triton-tts"
    pod_name = f"{name}-{POD_TEMPLATE_HASH}-"[:58] + "x7k2q"
    assert re.fullmatch(pattern, pod_name), (pattern, pod_name)
    if len(name) <= 46:
        assert not re.fullmatch(pattern, f"{name}-blue-{POD_TEMPLATE_HASH}-x7k2q")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_rule_reads_the_real_queue_time_for_every_mix_of_traffic(
    promtool: Path, rules: Rules, scenario: Scenario, tmp_path: Path
) -> None:
    run_promtool(promtool, tmp_path, rules, [promtool_case(rules.queue, scenario, scenario.expected())])


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_demand_rule_reads_demand_over_capacity_for_every_mix_of_traffic(
    promtool: Path, rules: Rules, scenario: Scenario, tmp_path: Path
) -> None:
    """Demanded seconds summed over every instance and both outcomes, over each voice's
    capacity taken once however many instances publish it, summed over voices (in
    thousandths)."""
    case = promtool_case(rules.demand, scenario, scenario.expected_demand(), scale=1000)
    run_promtool(promtool, tmp_path, rules, [case])


@pytest.mark.parametrize(
    ("values", "signal", "target"),
    [([], "queue", "20000"), (["--set", "autoscaling.signal=demand"], "demand", "0.7")],
)
def test_the_hpa_reads_the_chosen_signal_through_the_adapter(
    helm: Path, rules: Rules, values: list[str], signal: str, target: str
) -> None:
    """autoscaling.signal picks the HPA's metric (queue time by default); the adapter
    exposes both, each reading its recorded series."""
    docs = render(
        helm, "--set", "autoscaling.enabled=true", "--set", "prometheusAdapterRules.enabled=true", *values
    )
    chosen = rules.queue if signal == "queue" else rules.demand
    (metric,) = by_kind(docs, "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert metric == {
        "type": "Pods",
        "pods": {
            "metric": {"name": chosen.custom_metric},
            "target": {"type": "AverageValue", "averageValue": target},
        },
    }
    exposed = yaml.safe_load(by_kind(docs, "ConfigMap")["data"]["config.yaml"])["rules"]
    reads = {r["name"]["as"]: r["seriesQuery"].split("{")[0] for r in exposed}
    assert reads[rules.queue.custom_metric] == QUEUE_SERIES
    assert reads[rules.demand.custom_metric] == DEMAND_SERIES
    assert "triton_tts_demanded" not in chosen.adapter_query  # the PromQL lives in the rule only


def test_stage_selector_is_the_repository_stages(rules: Rules) -> None:
    """The chart's list of stage models is the repository's (triton_tts.ops.repository.STAGES)."""
    stages = stage_regex(rules)
    for stage in STAGES:
        assert stages.fullmatch(stage) and stages.fullmatch(stage + "__ljs")
    for model in (*ENTRY_MODELS, "tts_chunk__ljs", "vocoderx", "my_acoustic"):
        assert not stages.fullmatch(model), model


def test_triton_exports_what_the_rule_reads(
    server: TritonServer,
    http: httpclient.InferenceServerClient,
    promtool: Path,
    rules: Rules,
    tmp_path: Path,
) -> None:
    """Triton 2.51's own counters: names, types and labels the rule selects, counted per
    stage request whatever the entry model; then the rule on them reads the queue time
    that a stream-only interval really had."""
    served = {m["name"] for m in http.get_model_repository_index() if m.get("state") == "READY"}
    stages = stage_regex(rules)
    assert set(STAGES) <= served
    assert {m for m in served if stages.fullmatch(m)} == {m for m in served if is_stage(m)}

    before, types = scrape(server)
    for metric in (QUEUE, SUCCESS, "nv_inference_count", "nv_inference_exec_count"):
        assert types.get(metric) == "counter", metric
        assert set(by_model(before, metric)) >= served  # every model, from load on (idle reads 0)

    chunks = stream(server.grpc_url, "Hello there. This answer is streamed. It has three sentences.")
    after, _ = scrape(server)
    delta = {
        metric: {m: by_model(after, metric)[m] - by_model(before, metric)[m] for m in served}
        for metric in (QUEUE, SUCCESS)
    }
    # a stream of N chunks is N requests at every stage, one stream at tts_stream, none at tts
    assert chunks >= 2
    assert {delta[SUCCESS][stage] for stage in STAGES} == {chunks}
    assert delta[SUCCESS]["tts_stream"] == 1 and delta[SUCCESS]["tts"] == 0

    # The rule on these very counters, one minute apart, for one pod of this release.
    series = []
    for (metric, labels), value in before.items():
        if metric not in (QUEUE, SUCCESS):
            continue
        labels_out = {"namespace": NAMESPACE, "pod": pod("real1"), **dict(labels)}
        later = after[metric, labels]
        series.append(
            {"series": selector(metric, labels_out), "values": f"{value:.0f} {value:.0f} {later:.0f}"}
        )
    waited = sum(delta[QUEUE][m] for m in served if is_stage(m))
    requests = sum(delta[SUCCESS][m] for m in served if is_stage(m))
    expected = waited / requests
    check = f'abs({rules.queue.series}{{pod="{pod("real1")}"}} - {expected!r}) < bool 0.001'
    run_promtool(
        promtool,
        tmp_path,
        rules,
        [
            {
                "name": "real tritonserver counters, stream only",
                "interval": "30s",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": check,
                        "eval_time": "60s",
                        "exp_samples": [
                            {
                                "labels": selector("", {"namespace": NAMESPACE, "pod": pod("real1")}),
                                "value": 1,
                            }
                        ],
                    }
                ],
            }
        ],
    )


def test_triton_exports_what_the_demand_rule_reads(
    server: TritonServer, promtool: Path, rules: Rules, tmp_path: Path
) -> None:
    """The TTS series the demand rule reads, as a real tritonserver exports them: the
    demanded counter per instance, voice and outcome; the capacity gauge per instance and
    voice, once an instance has executed (the same value in each); then the rule on them
    reads what a minute with one stream asked, over the measured capacity."""
    before, types = scrape(server)
    chunks = stream(server.grpc_url, "Hello there. This answer is streamed. It has three sentences.")
    after, types = scrape(server)
    assert chunks >= 2
    assert types.get(DEMANDED) == "counter" and types.get(CAPACITY) == "gauge"
    demanded = {labels: value for (name, labels), value in after.items() if name == DEMANDED}
    capacity = {labels: value for (name, labels), value in after.items() if name == CAPACITY}
    assert demanded and capacity
    for labels in demanded:
        assert set(dict(labels)) == {"model", "model_instance", "voice", "outcome"}, sorted(labels)
        assert (DEMANDED, labels) in before  # every instance counts from load on (idle reads 0)
    for labels in capacity:
        assert set(dict(labels)) == {"model", "model_instance", "voice"}, sorted(labels)
    # one ledger: every instance publishes its value (an instance that has not executed
    # since the ledger corrected it shows the older one; the rule takes max)
    per_voice: dict[str, set[float]] = {}
    for labels, value in capacity.items():
        per_voice.setdefault(dict(labels)["voice"], set()).add(value)
    assert all(min(values) > 0 for values in per_voice.values()), per_voice

    asked: dict[str, float] = {}
    for labels, value in demanded.items():
        voice = dict(labels)["voice"]
        asked[voice] = asked.get(voice, 0.0) + value - before[DEMANDED, labels]
    assert sum(asked.values()) > 0
    # the rule's rate over one minute: what was asked between the scrapes, per second
    expected = sum(asked[v] / 60 / max(per_voice[v]) for v in per_voice if v in asked)
    assert expected > 0

    series = []
    for labels, value in demanded.items():
        labels_out = {"namespace": NAMESPACE, "pod": pod("real1"), **dict(labels)}
        start = before[DEMANDED, labels]
        series.append({"series": selector(DEMANDED, labels_out), "values": f"{start!r} {start!r} {value!r}"})
    for labels, value in capacity.items():
        labels_out = {"namespace": NAMESPACE, "pod": pod("real1"), **dict(labels)}
        series.append({"series": selector(CAPACITY, labels_out), "values": f"{value!r} {value!r} {value!r}"})
    check = f'abs({rules.demand.series}{{pod="{pod("real1")}"}} - {expected!r}) < bool 0.0001'
    run_promtool(
        promtool,
        tmp_path,
        rules,
        [
            {
                "name": "real tritonserver series, one stream",
                "interval": "30s",
                "input_series": series,
                "promql_expr_test": [
                    {
                        "expr": check,
                        "eval_time": "60s",
                        "exp_samples": [
                            {
                                "labels": selector("", {"namespace": NAMESPACE, "pod": pod("real1")}),
                                "value": 1,
                            }
                        ],
                    }
                ],
            }
        ],
    )
