"""`--plot OUT.png`: TTFT distribution per strategy and requests per replica.

Left, the empirical CDF of TTFT (log scale: the tail is where routing shows);
right, each strategy's requests per replica, which is what `imbalance` sums up.
Simulated results are drawn dashed, so a reader sees at once which curves are
live. matplotlib comes with the `bench` extra and is imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prefixroute.bench.results import RunResult


def plot(results: Sequence[RunResult], path: str | Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = [plt.get_cmap("tab20")(i) for i in range(20)]
    fig, (cdf, load) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [3, 2]})
    replicas = sorted({name for r in results for name in r.per_replica}, key=lambda n: (len(n), n))
    for k, result in enumerate(results):
        colour = colours[(2 * k) % 20 if k < 10 else (2 * k + 1) % 20]
        style = "--" if result.mode == "simulate" or result.strategy.startswith("simulated/") else "-"
        values = sorted(v for v in result.ttfts if v > 0)
        if values:
            ys = [(i + 1) / len(values) for i in range(len(values))]
            cdf.step(
                values,
                ys,
                where="post",
                color=colour,
                linestyle=style,
                label=f"{result.strategy} (hit {result.hit_rate:.0%})",
            )
        counts = [result.per_replica.get(n, 0) for n in replicas]
        load.plot(
            range(len(replicas)),
            counts,
            marker="o",
            color=colour,
            linestyle=style,
            label=f"{result.strategy} (max/mean {result.imbalance:.2f})",
        )
    cdf.set_xscale("log")
    cdf.set_xlabel("TTFT (engine seconds, log scale)")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title("TTFT CDF (dashed: simulated)")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(fontsize=7, loc="upper left")
    load.set_xticks(range(len(replicas)))
    load.set_xticklabels([n.replace("engine-", "") for n in replicas])
    load.set_xlabel("replica")
    load.set_ylabel("requests")
    load.set_title("Requests per replica")
    load.grid(True, alpha=0.3)
    load.legend(fontsize=7, loc="lower left")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
