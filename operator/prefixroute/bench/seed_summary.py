"""A comparison read over several drawn workloads: `bench simulate --seeds N`.

One run's TTFT p99 is the 10th-20th slowest of 1,000-2,000 requests, and a loaded fleet's
placements are chaotic: any change of one decision moves every later one. Router replicas
whose reports arrived at once (`--peer-delay 0`) still had p99s between 0.84x and 1.22x one
router's on `sessions` at 48 requests/s, seed by seed. A difference of a few percent is
then read over seeds: each label's mean hit rate and mean p99 over the workloads drawn, the
ratio of those means to its baseline's, the range of the per-seed p99 ratios, and on how
many seeds the p99 was worse.

A label's baseline is the same strategy and mode with one router (`prefix-cache precise
x4 peers:all` against `prefix-cache precise x1`) where that ran, else the run's baseline.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from prefixroute.bench.errors import BenchError

# A per-seed p99 ratio above this counts as worse: rounding (the table's 3 decimals) is not.
WORSE = 1.005

_ROUTERS = re.compile(r" x\d+( peers:\S+)?$")


def add_seeds_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="synthetic: run everything on N workloads drawn with seeds --seed..--seed+N-1 and print the means "
        "over them, each beside its one router (or the baseline): a few percent of TTFT p99 is within what one "
        "seed's draw moves",
    )


def check_seeds(args: argparse.Namespace) -> list[int]:
    """The seeds `--seed` and `--seeds` ask for, or BenchError for what cannot be drawn."""
    if args.seeds < 1:
        raise BenchError("--seeds must be at least 1")
    if args.seeds > 1 and args.trace:
        raise BenchError("--seeds draws synthetic workloads; a trace is one workload (vary it with --speed)")
    if args.seeds > 1 and args.plot:
        raise BenchError("--plot draws one run; leave out --seeds")
    return list(range(args.seed, args.seed + args.seeds))


def drawn(args: argparse.Namespace, seed: int) -> argparse.Namespace:
    """`args` with `seed` in place of --seed: what `load_workload` draws that seed's workload from."""
    return argparse.Namespace(**{**vars(args), "seed": seed})


def one_router_label(label: str) -> str | None:
    """The label of the same strategy and mode with one router; None when `label` names no count."""
    found = _ROUTERS.search(label)
    return None if found is None else label[: found.start()] + " x1"


@dataclass(frozen=True)
class SeedRow:
    label: str
    seeds: int
    hit_rate: float  # mean over the seeds
    ttft_p99: float | None  # mean over the seeds, seconds (None: a seed answered nothing)
    baseline: str | None
    hit_ratio: float | None = None  # mean hit rate / the baseline's
    p99_ratio: float | None = None  # mean p99 / the baseline's mean p99
    p99_low: float | None = None  # the lowest per-seed p99 ratio
    p99_high: float | None = None  # the highest
    worse: int | None = None  # seeds whose p99 ratio was above WORSE (None: not compared)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def summarize(runs: Sequence[Sequence[Mapping[str, Any]]], baseline: str | None) -> list[SeedRow]:
    """`runs`: per seed, the run's summaries (`strategy`, `hit_rate`, `ttft_p99`), the same
    labels in each. A run without a p99 (nothing answered) leaves its label's ratios out."""
    if not runs:
        return []
    by_label: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        for summary in run:
            by_label.setdefault(summary["strategy"], []).append(summary)
    rows = []
    for label, seen in by_label.items():
        base_label = one_router_label(label)
        if base_label not in by_label or base_label == label:
            base_label = baseline if baseline in by_label and baseline != label else None
        rows.append(_row(label, seen, base_label, by_label.get(base_label) if base_label else None))
    return rows


def _row(
    label: str, seen: list[Mapping[str, Any]], base_label: str | None, base: list[Mapping[str, Any]] | None
) -> SeedRow:
    hits = [s["hit_rate"] for s in seen]
    p99s = [s["ttft_p99"] for s in seen]
    complete = None not in p99s
    row = SeedRow(label, len(seen), statistics.fmean(hits), statistics.fmean(p99s) if complete else None, base_label)
    if base is None or len(base) != len(seen) or row.ttft_p99 is None or None in [b["ttft_p99"] for b in base]:
        return row
    base_p99s = [b["ttft_p99"] for b in base]
    if min(base_p99s) <= 0:
        return row
    base_hit = statistics.fmean(b["hit_rate"] for b in base)
    ratios = [p / b for p, b in zip(p99s, base_p99s)]
    return SeedRow(
        label, len(seen), row.hit_rate, row.ttft_p99, base_label,
        hit_ratio=row.hit_rate / base_hit if base_hit else None,
        p99_ratio=row.ttft_p99 / statistics.fmean(base_p99s),
        p99_low=min(ratios), p99_high=max(ratios),
        worse=sum(r > WORSE for r in ratios),
    )  # fmt: skip


def print_seed_table(rows: Sequence[SeedRow], first_seed: int, stream: TextIO) -> None:
    seeds = rows[0].seeds if rows else 0
    stream.write(
        f"over {seeds} seeds ({first_seed}..{first_seed + seeds - 1}): means, and ratios to each label's baseline\n"
    )
    header = ("target", "hit rate", "TTFT p99", "vs", "hit x", "p99 x", "per seed p99 x", "seeds worse")
    table = [header]
    for r in rows:
        compared = r.p99_ratio is not None
        table.append((
            r.label, f"{r.hit_rate:.1%}", f"{r.ttft_p99:.3f}" if r.ttft_p99 is not None else "-", r.baseline or "-",
            f"{r.hit_ratio:.3f}" if r.hit_ratio is not None else "-",
            f"{r.p99_ratio:.3f}" if compared else "-",
            f"{r.p99_low:.2f}-{r.p99_high:.2f}" if compared else "-",
            f"{r.worse}/{r.seeds}" if compared else "-",
        ))  # fmt: skip
    widths = [max(len(t[i]) for t in table) for i in range(len(header))]
    for n, cells in enumerate(table):
        stream.write(
            "  ".join(c.ljust(w) if i in (0, 3) else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
        )
        stream.write("\n")
        if n == 0:
            stream.write("  ".join("-" * w for w in widths) + "\n")


def write_seed_json(
    path: str | Path, meta: Mapping[str, Any], seeds: Sequence[int], rows: Sequence[SeedRow], runs: Sequence[Any]
) -> None:
    """The run's settings, the seeds, the means (one object per label) and each seed's summaries."""
    document = {"run": dict(meta), "seeds": list(seeds), "means": [r.as_dict() for r in rows], "per_seed": list(runs)}
    Path(path).write_text(json.dumps(document, indent=1) + "\n")
