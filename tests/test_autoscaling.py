"""The autoscaling signals: the chart's recording rules run by promtool on synthetic traffic
of every mix, and on the series a real tritonserver exports.

Two signals, per pod (definitions and reasons: helm/triton-tts/templates/_autoscaling.tpl):
the average queue time per request at the stage models, and demand over capacity (audio
asked of tts and tts_stream per second over the audio the pod makes per second, summed
over voices). The rule group is taken from the chart as helm renders it, so what is tested
is what is deployed.
"""

from __future__ import annotations

import queue
import re
import subprocess
import urllib.request
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import yaml

from tests.helpers import tts_inputs
from tests.test_helm_chart import CHART, by_kind, render, required_tool
from triton_tts.ops.repository import STAGES
from triton_tts.ops.server import TritonServer

NAMESPACE = "speech"  # test_helm_chart.render installs release "tts" here
POD_TEMPLATE_HASH = "5d8f7c9b4"
SCRAPE = 15  # seconds between samples, as the chart's ServiceMonitor / PodMonitor scrape
QUEUE = "nv_inference_queue_duration_us"
SUCCESS = "nv_inference_request_success"
ENTRY_MODELS = ("tts", "tts_stream", "tts_chunk")
DEMANDED = "triton_tts_demanded_audio_seconds_total"
CAPACITY = "triton_tts_capacity_audio_seconds_per_second"
QUEUE_SERIES = "triton_tts:stage_queue_us_per_request:rate1m"
DEMAND_SERIES = "triton_tts:demand_capacity_ratio:rate1m"
# What admission predicts of one text chunk (seconds of audio), and the instances of each
# model that counts demand: every instance has its own series, of its own requests.
AUDIO_PER_CHUNK = 3
INSTANCES = {"tts": 2, "tts_stream": 2}


@pytest.fixture(scope="session")
def helm() -> Path:
    return required_tool("helm", "scripts/fetch_helm.py")


@pytest.fixture(scope="session")
def promtool() -> Path:
    return required_tool("promtool", "scripts/fetch_promtool.py")


@dataclass(frozen=True)
class Signal:
    series: str  # the recorded series
    expr: str  # its recording rule's PromQL
    adapter_query: str  # prometheus-adapter's metricsQuery for the HPA's custom metric
    custom_metric: str  # the name the HPA reads it by


@dataclass(frozen=True)
class Rules:
    groups: dict[str, Any]  # the recording rule group, as Prometheus loads it
    queue: Signal
    demand: Signal


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


def pod(name: str) -> str:
    return f"tts-triton-tts-{POD_TEMPLATE_HASH}-{name}"


@dataclass
class Traffic:
    """What one pod serves per scrape interval, and how long each stage makes a request wait.

    ``entry``: requests per interval and text chunks per request, for each entry model
    (a ``tts_chunk`` call is one chunk). Each chunk is one request at each stage of its
    voice (``acoustic`` or ``acoustic__ljs``...), as the real server counts them
    (test_triton_exports_what_the_rule_reads).

    Demand: tts and tts_stream count each request's predicted audio (AUDIO_PER_CHUNK a
    chunk), admitted (``entry``) or refused by admission (``refused``, which never reach
    the stages), each instance its own; a direct tts_chunk call is not counted (an
    ensemble, no Python of ours in front of it). Every instance publishes the voice's
    ``capacity``, the same value (the server's ledger); None: not published yet.
    """

    entry: dict[str, tuple[int, int]] = field(default_factory=dict)
    wait_us: dict[str, int] = field(default_factory=dict)  # per stage request, by stage model
    voice: str = ""  # "" for the default voice, or a suffix such as "__ljs"
    until_s: int | None = None  # traffic stops here (then the pod is idle)
    refused: dict[str, tuple[int, int]] = field(default_factory=dict)  # like entry
    capacity: Fraction | None = Fraction(10)  # audio seconds per second, when busy

    @property
    def voice_name(self) -> str:
        return self.voice.removeprefix("__") or "joe"

    def demand_increments(self) -> dict[tuple[str, int, str], int]:
        """Demanded audio seconds per scrape interval: (model, instance, outcome) -> value,
        shared unevenly between the model's instances."""
        inc: dict[tuple[str, int, str], int] = {}
        for outcome, traffic in (("admitted", self.entry), ("refused", self.refused)):
            for model, count in INSTANCES.items():
                requests, chunks = traffic.get(model, (0, 0))
                asked = requests * chunks * AUDIO_PER_CHUNK
                shares = [asked - asked // 3, asked // 3] + [0] * (count - 2)
                for instance, share in enumerate(shares):
                    inc[model, instance, outcome] = share
        return inc

    def demand(self) -> Fraction:
        """Audio seconds asked per second over capacity."""
        if self.capacity is None:
            return Fraction(0)
        asked = sum(self.demand_increments().values())
        return Fraction(asked, SCRAPE) / self.capacity

    def increments(self) -> dict[tuple[str, str], int]:
        """Counter increments per scrape interval: (metric, model) -> value."""
        chunks = sum(n * c for n, c in self.entry.values())
        inc: dict[tuple[str, str], int] = {}
        for stage in STAGES:
            model = stage + self.voice
            inc[SUCCESS, model] = chunks
            inc[QUEUE, model] = chunks * self.wait_us.get(stage, 0)
        # The entry models count differently, and the rule must not read them: tts waits
        # for its chunks inside its own execution; decoupled tts_stream counts one success
        # per stream however many responses; the tts_chunk ensemble sees every chunk.
        tts, stream = self.entry.get("tts", (0, 0)), self.entry.get("tts_stream", (0, 0))
        inc[SUCCESS, "tts"], inc[QUEUE, "tts"] = tts[0], tts[0] * 150_000
        inc[SUCCESS, "tts_stream"], inc[QUEUE, "tts_stream"] = stream[0], stream[0] * 90_000
        inc[SUCCESS, "tts_chunk" + self.voice], inc[QUEUE, "tts_chunk" + self.voice] = chunks, chunks * 3
        return inc


def pod_increments(voices: list[Traffic]) -> dict[tuple[str, str], int]:
    """One pod's counters over all its voices: the entry models are shared by the voices."""
    assert len({t.until_s for t in voices}) <= 1, "traffic of one pod stops at one time"
    total: dict[tuple[str, str], int] = {}
    for traffic in voices:
        for key, value in traffic.increments().items():
            total[key] = total.get(key, 0) + value
    return total


def counter_values(start: int, step: int, samples: int, until: int | None) -> str:
    """promtool's expanding notation: ``start+step x n`` (then flat from ``until``)."""
    if until is None or until >= samples:
        return f"{start}+{step}x{samples}"
    flat_from = start + step * until
    return f"{start}+{step}x{until} {flat_from}+0x{samples - until - 1}"


@dataclass
class Scenario:
    name: str
    pods: dict[str, list[Traffic]]  # pod name -> traffic of each voice it serves
    eval_s: int = 300
    other_pods: dict[str, dict[str, str]] = field(default_factory=dict)  # other releases: labels

    def input_series(self) -> list[dict[str, str]]:
        samples = self.eval_s // SCRAPE + 4
        series = []
        for name, voices in self.pods.items():
            stop = voices[0].until_s if voices else None
            until = None if stop is None else stop // SCRAPE
            for (metric, model), step in sorted(pod_increments(voices).items()):
                # counters start where earlier traffic and the warm-up left them
                labels = {"namespace": NAMESPACE, "pod": name, "model": model, "version": "1"}
                labels |= {"job": "tts-triton-tts", "container": "tritonserver"}
                series.append(
                    {"series": selector(metric, labels), "values": counter_values(7919, step, samples, until)}
                )
            for traffic in voices:
                series += traffic_demand_series(name, traffic, samples, until)
        for labels in self.other_pods.values():
            for metric, step in ((QUEUE, 5_000_000), (SUCCESS, 10)):
                series.append(
                    {"series": selector(metric, {**labels, "model": "vocoder", "version": "1"}),
                     "values": f"0+{step}x{samples}"}
                )  # fmt: skip
            other = {**labels, "model": "tts", "model_instance": "tts_0_0:77", "voice": "joe"}
            series.append(
                {"series": selector(DEMANDED, {**other, "outcome": "admitted"}), "values": f"0+300x{samples}"}
            )
            series.append({"series": selector(CAPACITY, other), "values": f"1+0x{samples}"})
        return series

    def expected_demand(self) -> dict[str, int]:
        """Each pod's demand over capacity, in thousandths (integers by construction)."""
        values = {}
        for name, voices in self.pods.items():
            active = [t for t in voices if t.until_s is None or t.until_s > self.eval_s]
            exact = sum((t.demand() for t in active), Fraction(0)) * 1000
            assert exact.denominator == 1, f"{self.name}: choose demand of whole thousandths"
            values[name] = int(exact)
        return values

    def expected(self) -> dict[str, int]:
        """The queue time each pod's stage requests really had (integers by construction)."""
        values = {}
        for name, voices in self.pods.items():
            active = [t for t in voices if t.until_s is None or t.until_s > self.eval_s]
            increments = pod_increments(active)
            waited = sum(v for (m, model), v in increments.items() if m == QUEUE and is_stage(model))
            requests = sum(v for (m, model), v in increments.items() if m == SUCCESS and is_stage(model))
            exact = Fraction(waited, requests) if requests else Fraction(0)
            assert exact.denominator == 1, f"{self.name}: choose waits with an integer average"
            values[name] = int(exact)
        return values


def traffic_demand_series(
    pod_name: str, traffic: Traffic, samples: int, until: int | None
) -> list[dict[str, str]]:
    """One voice's demanded counters and capacity gauges on one pod, for every instance."""
    series = []
    for model, count in INSTANCES.items():
        for instance in range(count):
            labels = {
                "namespace": NAMESPACE,
                "pod": pod_name,
                "job": "tts-triton-tts",
                "container": "tritonserver",
            }
            labels |= {"model": model, "model_instance": f"{model}_0_{instance}:{4242 + instance}"}
            labels["voice"] = traffic.voice_name
            for outcome in ("admitted", "refused"):
                step = traffic.demand_increments()[model, instance, outcome]
                series.append(
                    {
                        "series": selector(DEMANDED, {**labels, "outcome": outcome}),
                        "values": counter_values(613, step, samples, until),
                    }
                )
            if traffic.capacity is not None:  # the ledger's value, the same in every instance
                series.append(
                    {"series": selector(CAPACITY, labels), "values": f"{float(traffic.capacity)}+0x{samples}"}
                )
    return series


def is_stage(model: str) -> bool:
    return model.split("__", maxsplit=1)[0] in STAGES


def selector(metric: str, labels: dict[str, str]) -> str:
    return metric + "{" + ",".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


WAITS = {"preprocess": 1_000, "acoustic": 2_000, "vocoder": 6_000, "postprocess": 1_000}  # mean 2,500 us

# Demand: each request x chunk per interval asks AUDIO_PER_CHUNK / SCRAPE = 0.2 s of audio
# per second; the capacities make the figures round (test_scenarios_expect_the_demand...).
SCENARIOS = [
    Scenario(
        "idle",
        {
            pod("idle1"): [Traffic()],
            pod("idle2"): [Traffic({"tts": (3, 2)}, WAITS, until_s=120)],
            pod("idle3"): [Traffic(capacity=None)],  # never served: no capacity published
        },
    ),
    Scenario("tts_only", {pod("short"): [Traffic({"tts": (2, 1)}, WAITS, capacity=Fraction(4, 5))]}),
    Scenario(
        "tts_stream_only", {pod("stream"): [Traffic({"tts_stream": (3, 4)}, WAITS, capacity=Fraction(6))]}
    ),
    Scenario("long_texts", {pod("long"): [Traffic({"tts": (1, 40)}, WAITS)]}),
    Scenario(
        "mixed",
        {
            pod("mixed"): [
                Traffic(
                    {"tts": (1, 2), "tts_stream": (2, 3), "tts_chunk": (4, 1)}, WAITS, capacity=Fraction(8)
                ),
                Traffic(
                    {"tts_stream": (1, 4)},
                    {"acoustic": 3_000, "vocoder": 9_000},
                    voice="__ljs",
                    capacity=Fraction(2),
                ),
            ]
        },
        # another release's pod (blue/green) and another namespace: not this release's series
        other_pods={
            "blue": {"namespace": NAMESPACE, "pod": f"tts-triton-tts-blue-{POD_TEMPLATE_HASH}-b1b1b"},
            "elsewhere": {"namespace": "other", "pod": pod("x9x9x")},
        },
    ),
    Scenario(
        "one_saturated_among_idle",
        {
            pod("hot"): [
                Traffic(
                    {"tts_stream": (4, 5)},
                    {**WAITS, "vocoder": 400_000},
                    refused={"tts_stream": (2, 5)},  # admission refuses a third of what is asked
                    capacity=Fraction(4),
                )
            ],
            pod("cold1"): [Traffic()],
            pod("cold2"): [Traffic()],
        },
    ),
]


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


def run_promtool(promtool: Path, folder: Path, rules: Rules, tests: list[dict[str, Any]]) -> None:
    (folder / "rules.yaml").write_text(yaml.safe_dump(rules.groups))
    (folder / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": f"{SCRAPE}s", "tests": tests})
    )
    done = subprocess.run(
        [str(promtool), "test", "rules", "tests.yaml"],
        cwd=folder,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def adapter_query(signal: Signal, pods: list[str]) -> str:
    """The adapter's metricsQuery as prometheus-adapter fills it in for the HPA's pods."""
    return (
        signal.adapter_query.replace("<<.Series>>", signal.series)
        .replace("<<.LabelMatchers>>", f'namespace="{NAMESPACE}",pod=~"{"|".join(pods)}"')
        .replace("<<.GroupBy>>", "pod")
    )


def promtool_case(
    signal: Signal, scenario: Scenario, expected: dict[str, int], scale: int = 1
) -> dict[str, Any]:
    """The recorded series and the adapter's answer, each pod's ``expected`` value in units
    of 1/``scale`` (compared rounded to whole units)."""
    return {
        "name": f"{signal.series}: {scenario.name}",
        "interval": f"{SCRAPE}s",
        "input_series": scenario.input_series(),
        "promql_expr_test": [
            {  # the recorded series: one per pod of this release
                "expr": f"round({scale} * {signal.series})",
                "eval_time": f"{scenario.eval_s}s",
                "exp_samples": [
                    {"labels": selector("", {"namespace": NAMESPACE, "pod": name}), "value": value}
                    for name, value in expected.items()
                ],
            },
            {  # what the HPA receives through prometheus-adapter
                "expr": f"round({scale} * {adapter_query(signal, sorted(expected))})",
                "eval_time": f"{scenario.eval_s}s",
                "exp_samples": [
                    {"labels": selector("", {"pod": name}), "value": value}
                    for name, value in expected.items()
                ],
            },
        ],
    }


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


# --- the same rule on the counters of a real tritonserver --------------------------------------

METRIC_LINE = re.compile(r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\{(?P<labels>[^}]*)\} (?P<value>\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def scrape(
    server: TritonServer,
) -> tuple[dict[tuple[str, frozenset[tuple[str, str]]], float], dict[str, str]]:
    """(metric, labels) -> value, and metric -> its TYPE, from Triton's /metrics."""
    with urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics", timeout=30) as response:
        text = response.read().decode("utf-8")
    values: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif match := METRIC_LINE.match(line):
            labels = frozenset(LABEL.findall(match["labels"]))
            values[match["name"], labels] = float(match["value"])
    return values, types


def by_model(values: dict[tuple[str, frozenset[tuple[str, str]]], float], metric: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for (name, labels), value in values.items():
        if name == metric:
            label = dict(labels)
            assert set(label) == {"model", "version"}, f"{metric} labels: {sorted(label)}"
            found[label["model"]] = found.get(label["model"], 0.0) + value
    return found


def stream(url: str, text: str) -> int:
    """One tts_stream request, as a user sends it over gRPC; the number of audio chunks."""
    client = grpcclient.InferenceServerClient(url)
    answers: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    chunks = 0
    try:
        client.async_stream_infer(
            "tts_stream", tts_inputs(grpcclient, text), enable_empty_final_response=True
        )
        while True:
            result, error = answers.get(timeout=300)
            assert error is None, error
            response = result.get_response()
            chunks += bool(response.outputs)
            if response.parameters["triton_final_response"].bool_param:
                return chunks
    finally:
        client.stop_stream()
        client.close()


def stage_regex(rules: Rules) -> re.Pattern[str]:
    expr = rules.queue.expr
    patterns = set(re.findall(r'model=~"([^"]+)"', expr))
    assert len(patterns) == 1, patterns  # numerator and denominator select the same models
    return re.compile(patterns.pop())


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
