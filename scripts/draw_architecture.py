"""Draw docs/architecture.png: prefixroute's parts, their folders, and the three journeys
docs/architecture.md walks through (a request, a PrefixRoutedModel change, an autoscaling tick).

    .venv/bin/python scripts/draw_architecture.py     # matplotlib, from the `bench` extra

Boxes are parts (with their folders); arrows are what travels between them, coloured by
journey and numbered in the order the page tells them.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the headless backend
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "docs" / "architecture.png"

REQUEST, CONTROL, SCALE, SIM, SCRAPE = "#1f5fbf", "#1e8a3a", "#d9730d", "#7b3fb3", "#7a7a7a"
PURE = "#eef6ee"  # pure layers (import-linter contracts): no I/O library
EDGE = "#f3f3f8"  # parts that talk to the network or the API server


def box(ax: plt.Axes, x: float, y: float, w: float, h: float, title: str, body: str, fill: str = EDGE) -> None:
    ax.add_patch(
        FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.4,rounding_size=1.2", fc=fill, ec="#333333", lw=1.3)
    )
    ax.text(x + 0.8, y + h - 1.0, title, fontsize=12.5, fontweight="bold", va="top", ha="left")
    ax.text(x + 0.8, y + h - 4.4, body, fontsize=9.8, va="top", ha="left", linespacing=1.35)


def arrow(
    ax: plt.Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    color: str,
    label: str = "",
    at: tuple[float, float] | None = None,
    rad: float = 0.0,
    dashed: bool = False,
    both: bool = False,
) -> None:
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="<|-|>" if both else "-|>",
            mutation_scale=16,
            color=color,
            lw=2.0,
            linestyle="--" if dashed else "-",
            connectionstyle=f"arc3,rad={rad}",
            shrinkA=2,
            shrinkB=2,
        )
    )
    if label:
        x, y = at if at is not None else ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        ax.text(
            x,
            y,
            label,
            fontsize=9.2,
            color=color,
            ha="center",
            va="center",
            bbox={"boxstyle": "round,pad=0.25", "fc": "white", "ec": color, "lw": 0.8},
        )


def main() -> None:
    fig, ax = plt.subplots(figsize=(17, 12.5), dpi=110)
    ax.set_xlim(0, 112)
    ax.set_ylim(0, 82)
    ax.axis("off")
    ax.text(1, 81.5, "prefixroute: parts, folders and how data travels", fontsize=17, fontweight="bold", va="top")

    # Data plane, top row.
    box(ax, 1, 52, 13, 9, "client", "OpenAI API\n(completions, chat)")
    box(
        ax,
        20,
        47,
        24,
        16,
        "fronts",
        "router/   our HTTP proxy\nepp/   Endpoint Picker behind Envoy\n         (ext_proc, gRPC)\nfront/   what both share: membership,\n"
        "  gate (tenancy/: keys, limits, fair\n  admission), body, errors, metrics",
    )
    box(
        ax,
        51,
        46,
        25,
        17,
        "routing core   routing/",
        "pure: no I/O library\nDispatcher.route(request) → Ticket\n  strategy.select → member\n  strategy.on_routed, load.begin\n"
        "Ticket.first_byte()  prefill done\nTicket.finish(ok)  load released,\n  strategy.on_complete\nstrategies: factory.py, one per module",
        PURE,
    )
    box(
        ax,
        83,
        47,
        27,
        16,
        "engine pods",
        "vLLM · SGLang · engine-sim\nengine_sim/ = engine_model/ (pure:\n  KV cache, scheduler, latency)\n  over HTTP, vLLM's metric names\n"
        "KV cache events (ZMQ) → precise\n  mode: kv_subscriber/ → Dispatcher",
    )

    # Control plane, bottom row.
    box(
        ax,
        20,
        6,
        24,
        17,
        "Kubernetes API server",
        "PrefixRoutedModel (crds/, crd.py)\n  spec → children: Deployments,\n  Services, RBAC, PDB, InferencePool\n"
        "  status.ring: ready members,\n  weights, version\n  status.autoscaling",
    )
    box(
        ax,
        51,
        3,
        32,
        22,
        "operator   controller/  (kopf)",
        "handlers.py: events, pod watch, timer\nspec/ → plan.py + builders/ (pure)\n  → edge.py: server-side apply\nring_status.py, status.py (pure)\n"
        "autoscale_tick.py: every interval\n  prometheus_edge → signals\n  → autoscaling/policy.step (pure)\n  → autoscale_status: status, Events,\n"
        "     Deployment replicas",
    )
    box(
        ax,
        89,
        22,
        21,
        11,
        "Prometheus",
        "scrapes engines and\nfronts (/metrics);\nqueried by the operator\n(autoscaling/queries.py)",
    )

    # Around the edges.
    box(
        ax,
        1,
        24,
        16,
        20,
        "bench/",
        "fleet_sim.py: engines\n(engine_model/) in\nvirtual time, driven\nthrough the same\nDispatcher and Ticket\nsimulate, autoscale,\nreplay, peers, soak",
        PURE,
    )
    box(
        ax,
        1,
        3,
        16,
        14,
        "install",
        "charts/ (Helm)\nmanifests/ (kustomize,\nexamples)\ncrds/\ne2e/: a real control\nplane on this machine",
    )

    # 1. A request (blue).
    arrow(ax, (14.5, 57), (19.5, 57), REQUEST, "1", at=(17, 59))
    arrow(ax, (44.5, 56), (50.5, 56), REQUEST, "2 route()", at=(47.5, 58.6), both=True)
    arrow(ax, (44.5, 48.5), (82.5, 48.5), REQUEST, "3 forward · first byte · finish(ok)", at=(63.5, 37.6), rad=0.45)
    # 2. A PrefixRoutedModel change (green).
    arrow(ax, (17.5, 12), (19.5, 12), CONTROL, "a", at=(18.5, 15))
    arrow(ax, (44.5, 20), (50.5, 20), CONTROL, "b", at=(47.5, 22.2))
    arrow(ax, (50.5, 9), (44.5, 9), CONTROL, "c", at=(47.5, 11.2))
    arrow(ax, (32, 23.5), (32, 46.5), CONTROL, "d", at=(32, 35))
    # 3. An autoscaling tick (orange).
    arrow(ax, (89, 26), (83.5, 20), SCALE, "i", at=(87.5, 21))
    arrow(ax, (50.5, 15), (44.5, 15), SCALE, "ii", at=(47.5, 17.2))
    arrow(ax, (96, 46.5), (96, 33.5), SCRAPE, "scrape", at=(100.5, 40), dashed=True)
    # The simulators (purple).
    arrow(ax, (17.5, 40), (50.5, 48), SIM, "same dispatch,\nvirtual time", at=(24.5, 36.5), dashed=True, rad=-0.12)

    legend = [
        (REQUEST, "1-3  a request: client → front → Dispatcher.route → engine; the Ticket's first_byte and finish"),
        (
            CONTROL,
            "a-d  a PrefixRoutedModel change: a kubectl/helm apply, b the handler's event, c pure plan → apply"
            " and status.ring, d the fronts' watch of status.ring",
        ),
        (
            SCALE,
            "i-ii  an autoscaling tick: timer, i Prometheus queried → pure policy, ii status.autoscaling,"
            " Deployment replicas, Events",
        ),
        (SIM, "the simulators drive the same routing core through the same dispatch"),
        (SCRAPE, "metrics scraped by Prometheus"),
    ]
    for i, (color, text) in enumerate(legend):
        ax.text(1, 77.5 - 2.1 * i, "■ " + text, color=color, fontsize=11, va="top")
    ax.text(
        83,
        1.0,
        "green boxes: pure layers (.importlinter)",
        fontsize=9.5,
        color="#1e8a3a",
        va="bottom",
    )
    fig.savefig(OUT, bbox_inches="tight")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
