"""What `bench priorities` compares and measures, in simulation and live alike: the targets, the
run's settings, each tenant class's tally, and the table's rows and columns.

Both modes fill the same `Tally` (a request is good when its first token came within its
tenant's objective, or at all for a tenant without one) and print it with the same
`print_table`, so a live table reads exactly as a simulated one.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from prefixroute.bench import mixed
from prefixroute.bench.fleet_sim import CLIENT_GONE
from prefixroute.bench.results import percentile
from prefixroute.tenancy.bands import SHED_TTL

FAILED = "failed"  # live only: no answer and no reason given (a refused connection, a 5xx without a shed reason)


@dataclass(frozen=True)
class Target:
    label: str
    strategy: str
    admission: bool  # fair sharing at --max-in-flight-per-member
    bands: bool  # each tenant's priority and objective (else priority 0, no objective)


TARGETS = (
    Target("prefix-cache+bands", "prefix-cache", True, True),
    Target("prefix-cache+fair", "prefix-cache", True, False),
    Target("prefix-cache", "prefix-cache", False, False),
    Target("least-load", "least-load", False, False),
    Target("round-robin", "round-robin", False, False),
)
BASELINE = "prefix-cache"  # today's default: the ratios' reference


@dataclass(frozen=True)
class Settings:
    replicas: int = 4
    per_member: int = 16  # --max-in-flight-per-member for the targets with admission
    max_wait_seconds: float = 30.0  # the bands' TTL (the router's --max-wait-seconds)
    patience: float = 30.0  # seconds a client waits for its first token


@dataclass
class ClassTally:
    """What one tenant class got in one run."""

    arrived: int = 0
    good: int = 0
    answered: int = 0  # got a first token
    ttfts: list[float] = field(default_factory=list, repr=False)  # of the answered
    dropped: Counter[str] = field(default_factory=Counter)  # reason -> requests never answered

    @property
    def shed(self) -> int:
        """Refused by the router on arrival (sheddable with no room, or its band's queue full)."""
        return sum(n for reason, n in self.dropped.items() if reason not in (SHED_TTL, CLIENT_GONE, FAILED))

    @property
    def timed_out(self) -> int:
        """Waited past its band's TTL, or its client gave up."""
        return self.dropped[SHED_TTL] + self.dropped[CLIENT_GONE]

    @property
    def failed(self) -> int:
        """Live only: never answered, neither refused with a reason nor given up on."""
        return self.dropped[FAILED]


@dataclass
class Tally:
    """One target at one load: per class, and the engines' prompt and cached tokens."""

    classes: dict[str, ClassTally]
    prompt_tokens: int = 0
    cached_tokens: int = 0
    host_load: tuple[float, float] | None = None  # live: the 1-minute load average at start and end

    @property
    def arrived(self) -> int:
        return sum(c.arrived for c in self.classes.values())

    @property
    def good(self) -> int:
        return sum(c.good for c in self.classes.values())

    @property
    def ttfts(self) -> list[float]:
        return [t for c in self.classes.values() for t in c.ttfts]

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


def _p(values: list[float], q: float) -> float | None:
    return round(percentile(values, q), 4) if values else None


def late_p99(c: ClassTally) -> float | None:
    """p99 TTFT with every request never answered counted as infinitely late."""
    if not c.arrived:
        return None
    values = c.ttfts + [math.inf] * (c.arrived - c.answered)
    values.sort()
    at = values[min(len(values) - 1, math.ceil(0.99 * len(values)) - 1)]
    return None if math.isinf(at) else round(at, 4)


def _ratio(mine: float, theirs: float) -> float | None:
    return round(mine / theirs, 3) if theirs > 0 else None


def row(load: float, label: str, tally: Tally, baseline: Tally | None) -> dict[str, Any]:
    """One line of the table (and of the JSON), with ratios to `baseline` of the same load."""
    inter = tally.classes[mixed.INTERACTIVE.name]
    ttfts = tally.ttfts
    out: dict[str, Any] = {
        "load": load,
        "target": label,
        "arrived": tally.arrived,
        "goodput": round(tally.good / tally.arrived, 4) if tally.arrived else None,
        "interactive_goodput": round(inter.good / inter.arrived, 4) if inter.arrived else None,
        "interactive_p99": late_p99(inter),
        "shed": {name: c.shed for name, c in tally.classes.items()},
        "timed_out": {name: c.timed_out for name, c in tally.classes.items()},
        "hit_rate": round(tally.hit_rate, 4),
        "ttft_p50": _p(ttfts, 50),
        "ttft_p99": _p(ttfts, 99),
        "failed": sum(c.failed for c in tally.classes.values()),
    }
    if tally.host_load is not None:
        out["host_load"] = list(tally.host_load)
    if baseline is not None:
        out["goodput_x"] = _ratio(tally.good, baseline.good)
        out["hit_rate_x"] = _ratio(tally.hit_rate, baseline.hit_rate)
        out["ttft_p50_x"] = _ratio(percentile(ttfts, 50), percentile(baseline.ttfts, 50))
        out["ttft_p99_x"] = _ratio(percentile(ttfts, 99), percentile(baseline.ttfts, 99))
    return out


COLUMNS = (
    ("load", "load"),
    ("target", "target"),
    ("goodput", "goodput"),
    ("goodput_x", "x"),
    ("interactive_goodput", "inter good"),
    ("interactive_p99", "inter p99"),
    ("shed", "shed i/s/b"),
    ("timed_out", "timed out i/s/b"),
    ("hit_rate", "hit"),
    ("hit_rate_x", "x"),
    ("ttft_p50", "p50"),
    ("ttft_p50_x", "x"),
    ("ttft_p99", "p99"),
    ("ttft_p99_x", "x"),
)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        return "/".join(str(v) for v in value.values())
    return str(value)


def print_table(rows: Sequence[dict[str, Any]], stream: TextIO, baseline: str) -> None:
    header = tuple(title for _, title in COLUMNS)
    table = [header] + [
        tuple(_cell(r.get(key)) if key != "load" else f"{r['load']:g}x" for key, _ in COLUMNS) for r in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for n, line in enumerate(table):
        cells = (c.ljust(w) if i in (0, 1) else c.rjust(w) for i, (c, w) in enumerate(zip(line, widths)))
        stream.write("  ".join(cells).rstrip() + "\n")
        if n == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")
    failed = sum(r.get("failed") or 0 for r in rows)
    if failed:
        stream.write(f"({failed} requests failed without an answer or a reason: counted as not good)\n")
    stream.write(
        f"(load: x the derived capacity; x columns: over {baseline} at the same load; p99 of interactive counts "
        "unanswered as late, '-' = over 1% unanswered; TTFT in engine seconds; i/s/b: interactive/standard/batch)\n"
    )
