"""The figures of ``e2e.operator_scale`` (pure): percentiles, a histogram's quantile, the
samples it reads from Prometheus text (the API server's and the operator's /metrics), a
process' memory and CPU from /proc, and the JSON it writes.

Nothing here talks to a cluster, so tests pin every figure on hand-made inputs
(tests/e2e/test_scale_figures.py).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

REQUIRED = (
    "models",
    "replicas",
    "ready_seconds",
    "reconcile_p50_s",
    "reconcile_p99_s",
    "ring_update_p50_s",
    "ring_update_p99_s",
    "operator_rss_mib",
    "operator_cpu_seconds",
    "idle_api_requests_per_min",
    "autoscale_tick_p50_s",
    "autoscale_tick_p99_s",
)
"""What every result carries (the issue's list, and the medians beside the tails)."""

APF_DISPATCHED = "apiserver_flowcontrol_dispatched_requests_total"
"""The API server's count of requests it let through, by flow schema: a flow schema that
matches one client alone counts exactly that client's requests."""


def percentile(values: Iterable[float], q: float) -> float | None:
    """The q-th percentile (0..100), interpolating between the two nearest ranks as numpy's
    default does; None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """A quantile (0..1) from cumulative bucket counts by upper bound, as Prometheus'
    ``histogram_quantile`` estimates it: linear within the bucket the rank falls in, the
    lowest bucket starting at 0, and a rank in the +Inf bucket answered with the highest
    finite bound. None when nothing was counted."""
    bounds = sorted(buckets)
    if not bounds or not math.isinf(bounds[-1]):
        return None
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return lower
            if count == below:
                return bound
            return lower + (bound - lower) * (rank - below) / (count - below)
        lower, below = bound, count
    return lower


def samples(text: str, name: str, **labels: str) -> list[tuple[dict[str, str], float]]:
    """Every sample named ``name`` whose labels include ``labels``, from Prometheus' text format."""
    family_name = name.removesuffix("_total").removesuffix("_bucket").removesuffix("_count").removesuffix("_sum")
    out = []
    for family in text_string_to_metric_families(text):
        if family.name != family_name:
            continue
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                out.append((dict(sample.labels), float(sample.value)))
    return out


def total(text: str, name: str, **labels: str) -> float:
    """The sum of the matching samples (0 when there are none)."""
    return sum(value for _, value in samples(text, name, **labels))


def buckets(text: str, histogram: str, **labels: str) -> dict[float, float]:
    """A histogram's cumulative bucket counts by upper bound (of the series with ``labels``),
    summed over its other labels."""
    out: dict[float, float] = {}
    for found, value in samples(text, f"{histogram}_bucket", **labels):
        bound = float(found["le"])
        out[bound] = out.get(bound, 0.0) + value
    return out


def bucket_increase(after: Mapping[float, float], before: Mapping[float, float]) -> dict[float, float]:
    """What a histogram counted between two readings."""
    return {bound: count - before.get(bound, 0.0) for bound, count in after.items()}


def per_minute(before: float, after: float, seconds: float) -> float:
    return (after - before) * 60.0 / seconds if seconds > 0 else 0.0


def proc_memory_kib(status: str) -> dict[str, int]:
    """VmRSS (now) and VmHWM (the peak) from /proc/PID/status, in KiB."""
    out = {}
    for line in status.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(rest.split()[0])
    return out


def proc_cpu_seconds(stat: str, ticks_per_second: int) -> float:
    """User and system CPU time from /proc/PID/stat (fields 14 and 15, after the command in
    parentheses, which may itself hold spaces and parentheses)."""
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def machine_cpu_seconds(stat: str, ticks_per_second: int) -> tuple[float, float]:
    """(busy, all) CPU seconds of every core together since boot, from /proc/stat's first line
    (user nice system idle iowait irq softirq steal; guest time is inside user already): busy
    is all but idle and iowait."""
    fields = [int(x) for x in stat.splitlines()[0].split()[1:9]]
    every = sum(fields)
    return (every - fields[3] - fields[4]) / ticks_per_second, every / ticks_per_second


def cpu_shares(
    before: Mapping[str, float], after: Mapping[str, float], machine: tuple[float, float]
) -> dict[str, float]:
    """CPU seconds each process used between two readings (those read both times), and
    ``other``: what the machine's cores were busy with besides them (another tenant's work,
    the kernel's). ``machine`` is the (busy, all) seconds of every core in that time."""
    used = {name: after[name] - before[name] for name in after if name in before}
    return {**used, "other": max(0.0, machine[0] - sum(used.values()))}


def load_average(loadavg: str) -> list[float]:
    """The 1, 5 and 15 minute load averages from /proc/loadavg."""
    return [float(x) for x in loadavg.split()[:3]]


def rounded(value: Any, digits: int = 3) -> Any:
    """Floats at a readable precision, everything else as it is (also inside lists and dicts)."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {k: rounded(v, digits) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [rounded(v, digits) for v in value]
    return value


def missing(result: Mapping[str, Any], required: Sequence[str] = REQUIRED) -> list[str]:
    return [key for key in required if key not in result]


def write_json(path: Path, result: Mapping[str, Any]) -> None:
    """The result as JSON; every required figure must be there (None where it could not be
    measured, e.g. no ring update under a churn of zero)."""
    absent = missing(result)
    if absent:
        raise ValueError(f"result lacks {', '.join(absent)}")
    path.write_text(json.dumps(rounded(dict(result)), indent=2, sort_keys=True) + "\n")
