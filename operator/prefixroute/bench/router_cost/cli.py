"""`prefixroute router-bench`: registered in prefixroute.cli like every part's command."""

from __future__ import annotations

import argparse
from typing import Any


def run(args: argparse.Namespace) -> int:
    from prefixroute.bench.router_cost.run import main

    return main(args)


def register(subparsers: Any) -> None:
    from prefixroute.bench.router_cost.run import add_arguments

    parser = subparsers.add_parser(
        "router-bench", help="the router's cost against a direct connection and sglang-router, as ratios"
    )
    add_arguments(parser)
    parser.set_defaults(handler=run)
