"""`--plot OUT.png`: TTFT distribution per strategy and requests per replica.

Left, the empirical CDF of TTFT (log scale: the tail is where routing shows);
right, each strategy's requests per replica, which is what `imbalance` sums up.
matplotlib comes with the `bench` extra and is imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from prefixroute.bench.results import RunResult


def plot(results: Sequence[RunResult], path: str | Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (cdf, bars) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    for result in results:
        values = sorted(v for v in result.ttfts if v > 0)
        if not values:
            continue
        ys = [(i + 1) / len(values) for i in range(len(values))]
        cdf.step(values, ys, where="post", label=f"{result.strategy} (hit {result.hit_rate:.0%})")
    cdf.set_xscale("log")
    cdf.set_xlabel("TTFT (engine seconds, log scale)")
    cdf.set_ylabel("fraction of requests")
    cdf.set_title("TTFT CDF")
    cdf.grid(True, which="both", alpha=0.3)
    cdf.legend(fontsize=8, loc="lower right")

    replicas = sorted({name for r in results for name in r.per_replica})
    width = 0.8 / max(1, len(results))
    for k, result in enumerate(results):
        xs = [i + k * width for i in range(len(replicas))]
        bars.bar(xs, [result.per_replica.get(n, 0) for n in replicas], width=width,
                 label=f"{result.strategy} (max/mean {result.imbalance:.2f})")  # fmt: skip
    bars.set_xticks([i + 0.4 - width / 2 for i in range(len(replicas))])
    bars.set_xticklabels([n.replace("engine-", "") for n in replicas])
    bars.set_xlabel("replica")
    bars.set_ylabel("requests")
    bars.set_title("Requests per replica")
    bars.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
