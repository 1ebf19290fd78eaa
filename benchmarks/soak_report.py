"""benchmarks/soak.py's report: the summary of a run's samples (growth, trends), its plots and tables."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

GOAL_GROWTH_PCT = 5.0


SERVER = "tritonserver"

WARMUP_SHARE, WARMUP_MAX_S = 0.2, 120.0
WINDOW_SHARE, WINDOW_MAX_S = 0.1, 60.0


def median_in(samples: list[dict[str, Any]], value: Callable[[dict[str, Any]], float | None]) -> float | None:
    values = [v for v in map(value, samples) if v is not None]
    return float(np.median(values)) if values else None


def growth_pct(before: float | None, after: float | None) -> float | None:
    return 100.0 * (after - before) / before if before and after is not None else None


def trend(samples: list[dict[str, Any]], value: Callable[[dict[str, Any]], float | None]) -> float | None:
    """Slope of a least-squares line, MiB per minute: a step (a pool that grew once) and a
    steady climb (a leak) can give the same growth; only the climb keeps a slope."""
    points = [(s["t_s"] / 60, v / 1024) for s in samples if (v := value(s)) is not None]
    if len(points) < 2 or points[-1][0] - points[0][0] <= 0:
        return None
    minutes, mib = np.array(points).T
    return float(np.polyfit(minutes, mib, 1)[0])


def summarise(
    samples: list[dict[str, Any]], load_s: float, traffic_s: float, start: dict[str, Any]
) -> dict[str, Any]:
    """RSS at start, after warm-up and at the end (see the module docstring), in MiB.
    ``load_s``: the run asked for; ``traffic_s``: until the last request finished."""
    warmup_s = min(WARMUP_SHARE * load_s, WARMUP_MAX_S)
    window_s = min(WINDOW_SHARE * load_s, WINDOW_MAX_S)
    during = [s for s in samples if s["t_s"] <= traffic_s and "total_rss_kib" in s]
    if not during:
        return {"warmup_s": warmup_s, "window_s": window_s}
    last = during[-1]["t_s"]
    warm = [s for s in during if warmup_s <= s["t_s"] <= warmup_s + window_s]
    end = [s for s in during if s["t_s"] >= last - window_s]
    second_half = [s for s in during if s["t_s"] >= last / 2]
    pids: dict[str, set[int]] = {}
    for s in samples:
        for name, p in s["processes"].items():
            pids.setdefault(name, set()).add(p["pid"])

    def figures(value: Callable[[dict[str, Any]], float | None]) -> dict[str, Any]:
        first, settled = value(start), value(samples[-1])
        after_warmup, at_end = median_in(warm, value), median_in(end, value)
        mib = 1 / 1024
        return {
            "start_mib": first * mib if first is not None else None,
            "after_warmup_mib": after_warmup * mib if after_warmup is not None else None,
            "end_mib": at_end * mib if at_end is not None else None,
            "idle_after_mib": settled * mib if settled is not None else None,
            "growth_after_warmup_pct": growth_pct(after_warmup, at_end),
            "trend_mib_per_min": trend(second_half, value),
        }

    def of(name: str) -> Callable[[dict[str, Any]], float | None]:
        return lambda s: s["processes"].get(name, {}).get("rss_kib")

    total = figures(lambda s: s.get("total_rss_kib"))
    processes = {name: figures(of(name)) for name in sorted(pids, key=lambda n: (n != SERVER, n))}
    for name, ids in pids.items():
        processes[name]["pids"] = sorted(ids)  # more than one: the process was replaced
    growth = total["growth_after_warmup_pct"]
    return {
        "warmup_s": warmup_s,
        "window_s": window_s,
        "total_rss": total,
        "total_pss": figures(lambda s: s.get("total_pss_kib")),
        "total_anon": figures(lambda s: s.get("total_anon_kib")),
        "total_shmem": figures(lambda s: s.get("total_shmem_kib")),
        "processes": processes,
        "goal_growth_pct": GOAL_GROWTH_PCT,
        "goal_met": growth is not None and growth < GOAL_GROWTH_PCT,
    }


def rolling_median(
    t: npt.NDArray[np.float64], values: npt.NDArray[np.float64], span_s: float
) -> npt.NDArray[np.float64]:
    """The median of ``values`` within +-span_s/2 of each point (RSS moves with each request)."""
    lo, hi = np.searchsorted(t, t - span_s / 2), np.searchsorted(t, t + span_s / 2, side="right")
    return np.array([np.nanmedian(values[a:b]) for a, b in zip(lo, hi, strict=True)])


def plot(results: dict[str, Any], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    samples, summary = results["samples"], results["summary"]
    seconds = np.array([s["t_s"] for s in samples], dtype=float)
    minutes = seconds / 60
    with_memory = any(s["processes"] for s in samples)
    fig, axes = plt.subplots(3 if with_memory else 1, 1, figsize=(12, 11 if with_memory else 4), sharex=True)
    axes = np.atleast_1d(axes)
    if with_memory:
        total, per_process = axes[0], axes[1]
        window_s = max(summary["window_s"], 5 * results["sample_s"])
        for key, label in (
            ("total_rss_kib", "sum of VmRSS"),
            ("total_pss_kib", "sum of PSS"),
            ("total_anon_kib", "sum of RssAnon"),
        ):
            values = np.array([s.get(key, np.nan) / 1024 for s in samples])
            (line,) = total.plot(minutes, values, linewidth=0.6, alpha=0.45)
            total.plot(
                minutes,
                rolling_median(seconds, values, window_s),
                color=line.get_color(),
                linewidth=2,
                label=f"{label} (median over {window_s:.0f} s)",
            )
        for start_s, label in ((summary["warmup_s"], "after warm-up"), (None, "end")):
            lo = start_s if start_s is not None else results["traffic_s"] - summary["window_s"]
            total.axvspan(lo / 60, (lo + summary["window_s"]) / 60, color="green", alpha=0.12)
            total.annotate(
                label,
                ((lo + summary["window_s"] / 2) / 60, 1),
                xycoords=("data", "axes fraction"),
                ha="center",
                va="top",
                fontsize=8,
            )
        total.set(ylabel="MiB", title="tritonserver + Python-backend stubs")
        total.set_ylim(bottom=0)
        total.legend(loc="lower right", fontsize=8)
        colours = plt.get_cmap("tab20")
        for i, name in enumerate(summary["processes"]):
            values = np.array([s["processes"].get(name, {}).get("rss_kib", np.nan) / 1024 for s in samples])
            per_process.plot(
                minutes,
                rolling_median(seconds, values, window_s),
                label=name,
                linewidth=1.2,
                color=colours(i % 20),
            )
        per_process.set(ylabel="VmRSS, MiB", title=f"per process (median over {window_s:.0f} s)")
        per_process.set_ylim(bottom=0)
        per_process.legend(fontsize=7, ncol=1, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    rate = axes[-1]
    done = np.array([s["requests_done"] for s in samples], dtype=float)
    lag = max(1, round(10 / results["sample_s"]))  # over ~10 s: requests finish in bursts
    if len(done) > lag:
        spent = seconds[lag:] - seconds[:-lag]
        rate.plot(minutes[lag:], (done[lag:] - done[:-lag]) / np.where(spent > 0, spent, np.nan))
    rate.set(xlabel="minutes", ylabel="requests / s", title="finished requests, all kinds (over 10 s)")
    rate.set_ylim(bottom=0)
    for axis in axes:
        axis.axvspan(0, summary["warmup_s"] / 60, color="orange", alpha=0.15)
        axis.annotate("warm-up", (summary["warmup_s"] / 120, 1), xycoords=("data", "axes fraction"),
                      ha="center", va="top", fontsize=8)  # fmt: skip
        axis.axvline(results["traffic_s"] / 60, color="grey", linestyle=":", linewidth=1)
        axis.grid(alpha=0.3)
    growth = summary.get("total_rss", {}).get("growth_after_warmup_pct")
    headline = f", growth after warm-up {growth:+.1f}%" if growth is not None else ""
    fig.suptitle(f"soak, {results['machine']}, {results['date']}, {results['commit']}{headline}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fmt(mib: float | None) -> str:
    return f"{mib:,.0f} MiB" if mib is not None else "-"


def pct(value: float | None) -> str:
    return f"{value:+.1f}%" if value is not None else "-"


def slope(mib_per_min: float | None) -> str:
    return f"{mib_per_min:+.1f} MiB/min" if mib_per_min is not None else "-"


def tables(results: dict[str, Any]) -> list[str]:
    requests = [
        f"soak, {results['load_s'] / 60:g} min, {results['clients']} clients, server: {results['server']}:",
        "",
        "| kind | ok | busy (expected under load) | lost to a kill | unexpected | p50 | p99 |",
        "|---|---|---|---|---|---|---|",
    ]
    for kind, c in results["requests"].items():
        requests.append(
            f"| {kind} | {c['ok']} | {c['busy']} | {c['killed']} | {c['unexpected']} "
            f"| {c['p50_s']:.2f} s | {c['p99_s']:.2f} s |"
            if c["ok"]
            else f"| {kind} | 0 | {c['busy']} | {c['killed']} | {c['unexpected']} | - | - |"
        )
    if results.get("kills"):
        healed = [k["healed_s"] for k in results["kills"]]
        shm = results["shm"]
        requests += [
            "",
            f"{len(healed)} stubs killed (SIGKILL), each back in {min(healed):g}-{max(healed):g} s "
            f"({', '.join(sorted({k['instance'] for k in results['kills']}))}); /dev/shm regions: "
            f"{shm['before']['count']} ({shm['before']['mib']:.1f} MiB) before, "
            f"{shm['after']['count']} ({shm['after']['mib']:.1f} MiB) after.",
        ]
    summary = results["summary"]
    if "total_rss" not in summary:
        return ["\n".join(requests)]
    memory = [
        f"warm-up {summary['warmup_s']:.0f} s, medians over {summary['window_s']:.0f} s windows:",
        "",
        "| process | start | after warm-up | end | growth after warm-up | trend, 2nd half | idle after |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [
        ("**all (sum of VmRSS)**", summary["total_rss"]),
        ("all (sum of PSS)", summary["total_pss"]),
        ("all (sum of RssAnon)", summary["total_anon"]),
    ]
    for name, row in [*rows, *summary["processes"].items()]:
        memory.append(
            f"| {name} | {fmt(row['start_mib'])} | {fmt(row['after_warmup_mib'])} | {fmt(row['end_mib'])} "
            f"| {pct(row['growth_after_warmup_pct'])} | {slope(row['trend_mib_per_min'])} "
            f"| {fmt(row['idle_after_mib'])} |"
        )
    return ["\n".join(requests), "\n".join(memory)]
