"""The `prefixroute` console script.

Each part owns its sub-command in its own `cli` module (a `register(subparsers)`
function); this file only lists them, and imports a part only when its command
runs so `prefixroute router` never pays for importing kopf or matplotlib.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# command name -> module that defines `register(subparsers)` and the handler it sets
COMMANDS: dict[str, tuple[str, str]] = {
    "router": ("prefixroute.router.cli", "the OpenAI-compatible prefix-aware proxy"),
    "epp": ("prefixroute.epp.cli", "the Endpoint Picker a Gateway API Inference Extension gateway calls"),
    "router-bench": (
        "prefixroute.bench.router_cost.cli",
        "the router's cost against a direct connection and sglang-router",
    ),
    "engine-sim": ("prefixroute.engine_sim.cli", "a vLLM-compatible simulated engine with a real prefix cache"),
    "bench": ("prefixroute.bench.cli", "replay traces in simulation or live, and compare routers"),
    "operator": ("prefixroute.controller.cli", "the kopf operator for PrefixRoutedModel resources"),
    "model-download": (
        "prefixroute.model_download",
        "fill a model cache with one hub revision (the operator's download Job)",
    ),
    "gie-crds": (
        "prefixroute.controller.gie_crds",
        "install the Gateway API Inference Extension's CRDs from its release (the chart's hook Job)",
    ),
}


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="prefixroute", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (module_name, summary) in COMMANDS.items():
        if name != only:
            sub.add_parser(name, help=summary)
            continue
        module = importlib.import_module(module_name)
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = args_list[0] if args_list and args_list[0] in COMMANDS else None
    parser = build_parser(only=chosen)
    args = parser.parse_args(args_list)
    result = args.handler(args)
    return int(result or 0)
