"""`bench priorities --plot OUT.png`: goodput and the interactive tenant's p99 TTFT by load.

Left, goodput (requests good / arrived) per target at each offered load; right, the
interactive tenant's p99 TTFT on a log scale, with its objective drawn across. A p99 the table
shows as '-' (over 1% of the interactive requests never answered) is drawn at the clients'
patience with a hollow marker: no first token came within it. matplotlib is imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefixroute.bench import mixed


def series(rows: Sequence[dict[str, Any]], key: str) -> dict[str, list[tuple[float, float | None]]]:
    """Per target, in the rows' order: (load, the row's `key`) sorted by load."""
    out: dict[str, list[tuple[float, float | None]]] = {}
    for r in rows:
        out.setdefault(r["target"], []).append((r["load"], r.get(key)))
    return {target: sorted(points) for target, points in out.items()}


def plot_rows(rows: Sequence[dict[str, Any]], path: str | Path, title: str, patience: float = 30.0) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = [plt.get_cmap("tab10")(i) for i in range(10)]
    fig, (good, tail) = plt.subplots(1, 2, figsize=(13, 5.5))
    for k, (target, points) in enumerate(series(rows, "goodput").items()):
        width = 2.5 if "+bands" in target else 1.5
        good.plot([x for x, _ in points], [y or 0.0 for _, y in points], marker="o", lw=width,
                  color=colours[k % 10], label=target)  # fmt: skip
    for k, (target, points) in enumerate(series(rows, "interactive_p99").items()):
        width = 2.5 if "+bands" in target else 1.5
        xs, ys = [x for x, _ in points], [patience if y is None else y for _, y in points]
        tail.plot(xs, ys, lw=width, color=colours[k % 10], label=target)
        for x, y in points:
            hollow = y is None
            tail.plot([x], [patience if hollow else y], marker="o", color=colours[k % 10],
                      markerfacecolor="white" if hollow else colours[k % 10])  # fmt: skip
    objective = mixed.INTERACTIVE.objective
    if objective is not None:
        tail.axhline(objective, color="grey", linestyle="--", lw=1, label=f"objective ({objective * 1000:g} ms)")
    loads = sorted({r["load"] for r in rows})
    for axis in (good, tail):
        axis.set_xticks(loads)
        axis.set_xticklabels([f"{x:g}x" for x in loads])
        axis.set_xlabel("offered load (x the derived capacity)")
        axis.grid(True, which="both", alpha=0.3)
    good.set_ylim(0, 1.05)
    good.set_ylabel("goodput (good / arrived)")
    good.set_title("Goodput")
    good.legend(fontsize=8, loc="lower left")
    tail.set_yscale("log")
    tail.set_ylabel("interactive p99 TTFT (engine seconds, log)")
    tail.set_title(f"Interactive p99 TTFT (hollow: over 1% unanswered, drawn at {patience:g} s)")
    tail.legend(fontsize=8, loc="center right")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
