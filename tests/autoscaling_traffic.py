"""The autoscaling tests' kit (tests/test_autoscaling.py): the rules' signals, traffic scenarios as
the metrics Triton and the models publish, and promtool cases over them."""

from __future__ import annotations

import queue
import re
import subprocess
import urllib.request
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import tritonclient.grpc as grpcclient
import yaml

from tests.helpers import tts_inputs
from triton_tts.ops.repository import STAGES
from triton_tts.ops.server import TritonServer

NAMESPACE = "speech"  # tests/helm_chart.render installs release "tts" here


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
