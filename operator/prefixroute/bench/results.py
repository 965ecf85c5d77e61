"""What one run (a strategy in simulation, or a target live) measured, and how it is reported.

Field names are the bench's JSON contract: `strategy`, `requests`, `errors`,
`hit_rate` (cached prompt tokens / prompt tokens), `ttft_p50`, `ttft_p90`,
`ttft_p99` (seconds, engine time), `imbalance` (max / mean requests per
replica), `throughput_rps` and `output_tokens_per_s`; a simulation that charges the
router's own time (keying and decision, measured per request) adds it to each TTFT and
reports it beside as `router_ms_p50` and `router_ms_p99` (None where nothing was charged,
and live, where the client's TTFT holds the router's time already). Every table also shows
ratios against a baseline measured in the same run (round-robin by default),
so a figure is never compared with one from another machine or day.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass
class RunResult:
    strategy: str  # the strategy or target label
    mode: str  # "simulate" or "replay"
    requests: int = 0  # answered successfully
    errors: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    duration_s: float = 0.0  # first arrival to last completion, engine time
    ttfts: list[float] = field(default_factory=list, repr=False)
    tenant_ttfts: dict[str, list[float]] = field(default_factory=dict, repr=False)  # the same, by tenant
    router_times: list[float] = field(default_factory=list, repr=False)  # seconds charged to each TTFT (simulate)
    per_replica: dict[str, int] = field(default_factory=dict)
    host_load: tuple[float, float] | None = None  # 1-minute load average at start and end (live runs)
    adapter_loads: int = 0  # LoRA adapters the engines brought into a slot (simulated adapter runs)

    @property
    def hit_rate(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def imbalance(self) -> float:
        counts = list(self.per_replica.values())
        if not counts or sum(counts) == 0:
            return 1.0
        return max(counts) / (sum(counts) / len(counts))

    def summary(self) -> dict[str, Any]:
        duration = self.duration_s if self.duration_s > 0 else math.nan
        return {
            "strategy": self.strategy,
            "mode": self.mode,
            "requests": self.requests,
            "errors": self.errors,
            "hit_rate": round(self.hit_rate, 4),
            "ttft_p50": _round(percentile(self.ttfts, 50)),
            "ttft_p90": _round(percentile(self.ttfts, 90)),
            "ttft_p99": _round(percentile(self.ttfts, 99)),
            "router_ms_p50": _round(1e3 * percentile(self.router_times, 50)),
            "router_ms_p99": _round(1e3 * percentile(self.router_times, 99)),
            "imbalance": round(self.imbalance, 3),
            "throughput_rps": _round(self.requests / duration),
            "output_tokens_per_s": _round(self.output_tokens / duration),
            "prompt_tokens": self.prompt_tokens,
            "cached_tokens": self.cached_tokens,
            "per_replica": dict(self.per_replica),
            "host_load_1m": list(self.host_load) if self.host_load else None,
        }


def _round(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 4)


def with_ratios(summaries: list[dict[str, Any]], baseline: str | None) -> list[dict[str, Any]]:
    """Add `ttft_p50_vs_baseline` etc. (value / baseline's value) and `hit_rate_minus_baseline`."""
    base = next((s for s in summaries if s["strategy"] == baseline), None)
    out = []
    for s in summaries:
        s = dict(s)
        if base is not None:
            s["baseline"] = baseline
            for key in ("ttft_p50", "ttft_p90", "ttft_p99"):
                a, b = s.get(key), base.get(key)
                s[f"{key}_vs_baseline"] = round(a / b, 3) if a is not None and b else None
            s["hit_rate_minus_baseline"] = round(s["hit_rate"] - base["hit_rate"], 4)
        out.append(s)
    return out


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(summaries: list[dict[str, Any]], stream: TextIO) -> None:
    header = (
        "target",
        "reqs",
        "errs",
        "hit rate",
        "Δhit",
        "TTFT p50",
        "p90",
        "p99",
        "router ms p50",
        "p50 x",
        "p99 x",
        "imbal",
        "req/s",
    )
    rows = [header]
    for s in summaries:
        rows.append(
            (
                s["strategy"],
                str(s["requests"]),
                str(s["errors"]),
                f"{s['hit_rate']:.1%}",
                _fmt(s.get("hit_rate_minus_baseline"), "+.1%"),
                _fmt(s["ttft_p50"], ".3f"),
                _fmt(s["ttft_p90"], ".3f"),
                _fmt(s["ttft_p99"], ".3f"),
                _fmt(s.get("router_ms_p50"), ".3f"),
                _fmt(s.get("ttft_p50_vs_baseline"), ".2f"),
                _fmt(s.get("ttft_p99_vs_baseline"), ".2f"),
                f"{s['imbalance']:.2f}",
                _fmt(s["throughput_rps"], ".2f"),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        stream.write("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
        stream.write("\n")
        if n == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")
    base = next((s.get("baseline") for s in summaries if s.get("baseline")), None)
    if base:
        stream.write(f"(x = ratio to {base} in this run; Δhit = hit rate minus {base}'s; TTFT in engine seconds)\n")
    if any(s.get("router_ms_p50") is not None for s in summaries):
        stream.write("(router ms: the router's keying and decision, measured per request and included in TTFT)\n")


def write_json(summaries: list[dict[str, Any]], path: str | Path, meta: dict[str, Any]) -> None:
    """A JSON array, one object per strategy or target, each carrying the run's settings under "run"."""
    Path(path).write_text(json.dumps([{**s, "run": meta} for s in summaries], indent=1) + "\n")
