"""`prefixroute router`: flags in, a running router out.

The flags are those of docs/contracts.md plus the router's own tuning (timeouts,
ejection, pool size); docs/router.md explains each.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
from typing import TYPE_CHECKING, Any

from prefixroute.front.flags import add_front_arguments, front_settings_fields, positive_int
from prefixroute.front.runtime import new_event_loop, start_logging_and_settings, tune_gc
from prefixroute.router.settings import UPSTREAM_CLIENTS, RouterSettings
from prefixroute.routing.flags import add_knob_arguments
from prefixroute.routing.knobs import HOLD_SECONDS, MAX_HELD_REQUESTS, RETRIES

if TYPE_CHECKING:  # the server is imported when a router runs, not for every command's --help
    from prefixroute.router.app import RouterApp


def add_router_arguments(parser: argparse.ArgumentParser) -> None:
    groups = add_front_arguments(parser)
    parser.add_argument("--port", type=int, default=RouterSettings.port)
    faults = groups.faults
    add_knob_arguments(faults, [RETRIES, HOLD_SECONDS, MAX_HELD_REQUESTS])
    faults.add_argument(
        "--connect-timeout", type=float, default=RouterSettings.connect_timeout, help="seconds to connect to an engine"
    )
    faults.add_argument(
        "--read-timeout",
        type=float,
        default=RouterSettings.read_timeout,
        help="longest silence from an engine, before its answer and between stream chunks",
    )
    faults.add_argument(
        "--max-connections", type=positive_int, default=RouterSettings.max_connections, help="upstream connection pool"
    )
    faults.add_argument(
        "--upstream-client",
        choices=UPSTREAM_CLIENTS,
        default=RouterSettings.upstream_client,
        help="HTTP client for forwarded requests: the native one (httptools) or aiohttp's ClientSession (fallback)",
    )
    ops = groups.ops
    ops.add_argument("--access-log", action="store_true", help="log every request (off: it costs throughput)")
    ops.add_argument("--no-member-header", action="store_true", help="do not add X-Prefixroute-Member to responses")
    ops.add_argument("--backlog", type=positive_int, default=2048, help="listen backlog")


def settings_from_args(args: argparse.Namespace) -> RouterSettings:
    return RouterSettings(
        **front_settings_fields(args),
        port=args.port,
        retries=args.retries,
        hold_seconds=args.hold_seconds,
        max_held_requests=args.max_held_requests,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
        max_connections=args.max_connections,
        member_header=not args.no_member_header,
        upstream_client=args.upstream_client,
    )


SHUTDOWN_GRACE = 60.0  # seconds requests in flight may take to finish after SIGTERM (aiohttp's default)


async def serve_until_stopped(
    app: RouterApp, host: str, port: int, backlog: int, access_log: logging.Logger | None
) -> None:
    """Serve until SIGTERM or SIGINT, then stop listening, let requests in flight finish (up to
    SHUTDOWN_GRACE seconds) and stop the router's parts."""
    from prefixroute.router.app import http_server

    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stopping.set)
    await app.start()
    server = http_server(app, access_log)
    try:
        await server.start(host, port, backlog)
        await stopping.wait()
    finally:
        await server.close(SHUTDOWN_GRACE)
        await app.stop()


def run_router(args: argparse.Namespace) -> int:
    from prefixroute.router.app import build_app

    settings = start_logging_and_settings("router", args, settings_from_args)
    app = build_app(settings)
    tune_gc()
    log = logging.getLogger("prefixroute.router")
    loop = new_event_loop()
    log.info(
        "router on %s:%d, strategy %s, upstream client %s, event loop %s",
        settings.host,
        settings.port,
        settings.routing.strategy,
        settings.upstream_client,
        type(loop).__module__.split(".")[0],  # "uvloop", or "asyncio" when the `fast` extra is absent
    )
    access_log = logging.getLogger("prefixroute.router.access") if args.access_log else None
    try:
        loop.run_until_complete(serve_until_stopped(app, settings.host, settings.port, args.backlog, access_log))
    finally:
        loop.close()
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("router", help="the OpenAI-compatible prefix-aware proxy")
    add_router_arguments(parser)
    parser.set_defaults(handler=run_router)
