"""`prefixroute epp`: flags in, a running Endpoint Picker out.

Membership, routing, precise-mode and tenant flags are the router's own
(`prefixroute.front.flags`, `prefixroute.front.precise`); docs/gateway.md explains the rest.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
from typing import Any

from prefixroute.front.flags import (
    add_gate_arguments,
    add_membership_arguments,
    add_routing_arguments,
    backends,
    gate_settings,
    positive_int,
    routing_config,
)
from prefixroute.front.precise import add_precise_arguments, precise_settings
from prefixroute.front.runtime import new_event_loop, tune_gc
from prefixroute.routing.flags import add_knob_arguments
from prefixroute.routing.knobs import SCRAPE_INTERVAL


def add_epp_arguments(parser: argparse.ArgumentParser) -> None:
    from prefixroute.epp.settings import DEFAULT_HEALTH_PORT, DEFAULT_METRICS_PORT, DEFAULT_PORT

    parser.add_argument("--host", default="127.0.0.1", help="address to bind (the pod IP in Kubernetes)")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT, help="ext_proc gRPC port (endpointPickerRef.port)")
    parser.add_argument("--health-port", type=int, default=DEFAULT_HEALTH_PORT, help="gRPC health port for probes")
    parser.add_argument(
        "--metrics-port", type=int, default=DEFAULT_METRICS_PORT, help="HTTP port of /metrics (0: none)"
    )
    add_membership_arguments(parser, inference_pool=True)
    add_routing_arguments(parser)
    add_precise_arguments(parser)
    add_gate_arguments(parser)
    limits = parser.add_argument_group("limits and faults")
    limits.add_argument("--max-body-bytes", type=positive_int, default=16 * 1024 * 1024)
    limits.add_argument(
        "--eject-seconds", type=float, default=5.0, help="first ejection after the gateway reports a 5xx"
    )
    limits.add_argument("--eject-max-seconds", type=float, default=60.0, help="longest ejection (backoff cap)")
    load = parser.add_argument_group("load view and membership")
    add_knob_arguments(load, [SCRAPE_INTERVAL])
    load.add_argument("--ring-poll-interval", type=float, default=1.0, help="seconds between ring file checks")
    parser.add_argument("--log-level", default=os.environ.get("PREFIXROUTE_LOG_LEVEL", "INFO"))


def settings_from_args(args: argparse.Namespace) -> Any:
    from prefixroute.epp.settings import EppSettings

    return EppSettings(
        host=args.host,
        port=args.port,
        health_port=args.health_port,
        metrics_port=args.metrics_port,
        backends=backends(args),
        ring_file=args.ring_file,
        resource=args.resource,
        inference_pool=args.inference_pool,
        routing=routing_config(args),
        precise=precise_settings(args),
        gate=gate_settings(args),
        scrape_interval=args.scrape_interval,
        max_body_bytes=args.max_body_bytes,
        eject_seconds=args.eject_seconds,
        eject_max_seconds=args.eject_max_seconds,
        ring_poll_interval=args.ring_poll_interval,
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
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"prefixroute epp: {exc}") from None
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
