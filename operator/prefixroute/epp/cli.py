"""`prefixroute epp`: flags in, a running Endpoint Picker out.

Every flag but the ports is the router's own, declared once (`prefixroute.front.flags`);
docs/gateway.md explains them.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from prefixroute.front.flags import add_front_arguments, front_settings_fields
from prefixroute.front.runtime import new_event_loop, start_logging_and_settings, tune_gc


def add_epp_arguments(parser: argparse.ArgumentParser) -> None:
    from prefixroute.epp.settings import DEFAULT_HEALTH_PORT, DEFAULT_METRICS_PORT, DEFAULT_PORT

    add_front_arguments(parser, inference_pool=True)
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="ext_proc gRPC port (endpointPickerRef.port)")
    parser.add_argument("--health-port", type=int, default=DEFAULT_HEALTH_PORT, help="gRPC health port for probes")
    parser.add_argument(
        "--metrics-port", type=int, default=DEFAULT_METRICS_PORT, help="HTTP port of /metrics (0: none)"
    )
    parser.add_argument(
        "--inference-objectives",
        metavar="NAMESPACE/POOL",
        help="read the priorities of this InferencePool's InferenceObjectives from the API "
        "(default: --inference-pool's pool); --objective-priorities' entries win",
    )
    parser.add_argument(
        "--objectives-poll-interval", type=float, default=5.0, help="seconds between reads of the InferenceObjectives"
    )


def settings_from_args(args: argparse.Namespace) -> Any:
    from prefixroute.epp.settings import EppSettings

    return EppSettings(
        **front_settings_fields(args),
        port=args.port,
        health_port=args.health_port,
        metrics_port=args.metrics_port,
        inference_objectives=args.inference_objectives,
        objectives_poll_interval=args.objectives_poll_interval,
    )


async def _serve(settings: Any) -> None:
    from prefixroute.epp.server import EppServer

    server = EppServer(settings)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await server.start()
    try:
        await stop.wait()
    finally:
        await server.stop()


def run_epp(args: argparse.Namespace) -> int:
    settings = start_logging_and_settings("epp", args, settings_from_args)
    tune_gc()
    loop = new_event_loop()
    try:
        loop.run_until_complete(_serve(settings))
    finally:
        loop.close()
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "epp", help="the Endpoint Picker a Gateway API Inference Extension gateway calls (ext_proc)"
    )
    add_epp_arguments(parser)
    parser.set_defaults(handler=run_epp)
