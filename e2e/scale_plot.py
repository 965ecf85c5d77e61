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
    ("ring_update_p99_s", "ring update p99 (s)", 2.0),
    ("autoscale_tick_p99_s", "autoscaler tick p99 (s)", 10.0),
    ("operator_rss_mib", "operator RSS, peak (MiB)", 500.0),
    ("idle_api_requests_per_min", "idle API requests / min", None),
)
"""(figure, axis label, goal at 1,000 models) for each panel of the picture."""

COLUMNS = (
    ("models", "models", "{:,.0f}"),
    ("ready_seconds", "all Ready (s)", "{:.0f}"),
    ("reconcile_p50_s", "1st reconcile p50 (s)", "{:.1f}"),
    ("reconcile_p99_s", "p99 (s)", "{:.1f}"),
    ("ring_update_p50_s", "ring update p50 (s)", "{:.2f}"),
    ("ring_update_p99_s", "p99 (s)", "{:.2f}"),
    ("pod_watch_p99_s", "pod watch p99 (s)", "{:.2f}"),
    ("autoscale_tick_p50_s", "tick p50 (s)", "{:.2f}"),
    ("autoscale_tick_p99_s", "p99 (s)", "{:.2f}"),
    ("operator_rss_mib", "RSS peak (MiB)", "{:.0f}"),
    ("operator_cpu_seconds", "CPU (s)", "{:.0f}"),
    ("idle_api_requests_per_min", "idle req/min", "{:.1f}"),
    ("idle_cpu_seconds_per_min", "idle CPU s/min", "{:.2f}"),
    ("load_average_end", "load (1 min)", "{:.1f}"),
)


def cell(value: Any, form: str) -> str:
    if isinstance(value, list):  # a load average: its 1-minute figure
        value = value[0] if value else None
    return "—" if value is None else form.format(value)


def table(rows: Sequence[tuple[str, Mapping[str, Any]]]) -> str:
    """A Markdown table, one row per (series label, result)."""
    head = ["", *(title for _, title, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for label, result in rows:
        lines.append("| " + " | ".join([label, *(cell(result.get(key), form) for key, _, form in COLUMNS)]) + " |")
    return "\n".join(lines) + "\n"


def load(paths: Sequence[Path]) -> list[dict[str, Any]]:
    return sorted((json.loads(p.read_text()) for p in paths), key=lambda r: int(r["models"]))


def plot(series: Mapping[str, Sequence[Mapping[str, Any]]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PANELS), figsize=(4.2 * len(PANELS), 3.6))
    for ax, (key, label, goal) in zip(axes, PANELS, strict=True):
        for name, results in series.items():
            points = [(r["models"], r[key]) for r in results if r.get(key) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=name)
        if goal is not None:
            ax.axhline(goal, color="grey", linestyle=":", label="goal at 1,000")
        ax.set_xscale("log")
        ax.set_yscale("log" if key != "operator_rss_mib" else "linear")
        ax.set_xlabel("models (4 engines each)")
        ax.set_title(label, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
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
