"""``python -m e2e.scale_plot --series LABEL=A.json,B.json ... --out PNG``: the table and the
picture of docs/operator.md's "At scale" from ``e2e.operator_scale`` results.

Each series is one state of the operator measured at several sizes (e.g. the first
measurement, and the operator now); the picture puts each figure against the number of
models, with the issue's goal where it has one, and the table (Markdown, printed) has one
row per result.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

PANELS = (
    ("ring_update_p99_s", "ring update p99 (s)", 2.0, "log", ("pod_watch_p99_s", "control plane's own watch")),
    ("autoscale_tick_p99_s", "autoscaler tick p99 (s)", 10.0, "log", ("autoscale_read_p99_s", "its Prometheus read")),
    ("operator_rss_mib", "operator RSS, peak (MiB)", 500.0, "linear", None),
    ("idle_api_requests_per_min", "idle API requests / min", None, "linear", None),
)
"""(figure, axis label, goal at 1,000 models, y scale, (a part of the figure drawn dashed, its
name) or None) for each panel of the picture; a linear axis starts at zero."""

COLUMNS = (
    ("models", "models", "{:,.0f}"),
    ("ready_seconds", "all Ready (s)", "{:.0f}"),
    ("reconcile_p50_s", "1st reconcile p50 (s)", "{:.1f}"),
    ("reconcile_p99_s", "p99 (s)", "{:.1f}"),
    ("ring_update_p50_s", "ring update p50 (s)", "{:.2f}"),
    ("ring_update_p99_s", "p99 (s)", "{:.2f}"),
    ("pod_watch_p99_s", "pod watch p99 (s)", "{:.2f}"),
    ("ring_after_pod_watch_p99_s", "after it p99 (s)", "{:.2f}"),
    ("autoscale_tick_p50_s", "tick p50 (s)", "{:.2f}"),
    ("autoscale_tick_p99_s", "p99 (s)", "{:.2f}"),
    ("autoscale_read_p99_s", "its read p99 (s)", "{:.2f}"),
    ("operator_rss_mib", "RSS peak (MiB)", "{:.0f}"),
    ("operator_cpu_seconds", "CPU (s)", "{:.0f}"),
    ("idle_api_requests_per_min", "idle req/min", "{:.1f}"),
    ("idle_cpu_seconds_per_min", "idle CPU s/min", "{:.2f}"),
    ("churn_cpu_seconds.other", "others' CPU under churn (s)", "{:.0f}"),
    ("load_average_end", "load (1 min)", "{:.1f}"),
)
"""(figure, column title, format); a dotted figure is a field of a field."""


def cell(value: Any, form: str) -> str:
    if isinstance(value, list):  # a load average: its 1-minute figure
        value = value[0] if value else None
    return "—" if value is None else form.format(value)


def figure(result: Mapping[str, Any], key: str) -> Any:
    value: Any = result
    for part in key.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return value


def table(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """A Markdown table, one row per (series label, result)."""
    head = ["", *(title for _, title, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, result in rows:
        lines.append("| " + " | ".join([label, *(cell(figure(result, key), form) for key, _, form in COLUMNS)]) + " |")
    return "\n".join(lines) + "\n"


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return sorted((json.loads(p.read_text()) for p in paths), key=lambda r: int(r["models"]))


def plot(series: Mapping[str, Sequence[Mapping[str, Any]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.6))
    for ax, (key, label, goal, scale, part) in zip(axes, PANELS, strict=True):
        for name, results in series.items():
            points = [(r["models"], r[key]) for r in results if r.get(key) is not None]
            if not points:
                continue
            (line,) = ax.plot(*zip(*points, strict=True), marker="o", label=name)
            inside = [(r["models"], r[part[0]]) for r in results if part and r.get(part[0]) is not None]
            if part and inside:
                ax.plot(*zip(*inside, strict=True), linestyle="--", marker=".", color=line.get_color(),
                        label=f"{name}: {part[1]}")  # fmt: skip
        if goal is not None:
            ax.axhline(goal, color="grey", linestyle=":", label="goal at 1,000")
        ax.set_xscale("log")
        ax.set_yscale(scale)
        if scale == "linear":
            ax.set_ylim(bottom=0)
        ax.set_xlabel("models (4 engines each)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    for ax in axes[:2]:
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.scale_plot", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--series", action="append", required=True, metavar="LABEL=A.json,B.json", help="one state measured at sizes"
    )
    parser.add_argument("--out", type=Path, help="write the picture here (PNG)")
    args = parser.parse_args(argv)
    series: dict[str, list[dict[str, Any]]] = {}
    for spec in args.series:
        label, _, files = spec.partition("=")
        series[label] = load([Path(f) for f in files.split(",") if f])
    print(table([(label, r) for label, results in series.items() for r in results]), end="")
    if args.out:
        plot(series, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
