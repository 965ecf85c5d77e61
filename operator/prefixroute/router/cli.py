"""`prefixroute router`: flags in, a running router out.

The flags are those of docs/contracts.md plus the router's own tuning (timeouts,
ejection, pool size); docs/router.md explains each.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
from typing import Any

from prefixroute.router.settings import UPSTREAM_CLIENTS, RouterSettings
from prefixroute.routing.blocks import DEFAULT_BLOCK_SIZE
from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig
from prefixroute.routing.ring import DEFAULT_VIRTUAL_NODES


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be a number >= 0")
    return value


def add_router_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (the pod IP in Kubernetes)")
    parser.add_argument("--port", type=int, default=8080)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--backends", help="comma-separated engine base URLs (a fixed fleet)")
    source.add_argument("--ring-file", help="YAML/JSON ring document, reloaded when it changes")
    source.add_argument(
        "--resource", metavar="NAMESPACE/NAME", help="follow status.ring of this PrefixRoutedModel in Kubernetes"
    )
    routing = parser.add_argument_group("routing")
    routing.add_argument("--strategy", choices=STRATEGY_NAMES, default="prefix-cache")
    routing.add_argument(
        "--block-size", type=_positive_int, default=DEFAULT_BLOCK_SIZE, help="characters per hashed block"
    )
    routing.add_argument(
        "--prefix-blocks",
        type=_positive_int,
        default=4,
        help="K: blocks in the affinity key (prefix-hash, and ring tie-breaks)",
    )
    routing.add_argument(
        "--load-factor",
        type=float,
        default=RoutingConfig().load_factor,
        help="a member above this x its fair share takes no affinity traffic",
    )
    routing.add_argument(
        "--load-slack",
        type=int,
        default=RoutingConfig().load_slack,
        help="...unless it holds fewer than its fair share plus this many requests",
    )
    routing.add_argument(
        "--queue-penalty",
        type=float,
        default=RoutingConfig().queue_penalty,
        help="prefix-cache: weight of the prefill queued on a member against its cache savings",
    )
    routing.add_argument("--virtual-nodes", type=_positive_int, default=DEFAULT_VIRTUAL_NODES)
    routing.add_argument(
        "--no-normalise", action="store_true", help="hash prompts exactly as sent (no whitespace collapse or NFC)"
    )
    routing.add_argument(
        "--index-blocks",
        type=_positive_int,
        default=RoutingConfig().index_blocks_per_member,
        help="prefix-cache: blocks remembered per member",
    )
    tenants = parser.add_argument_group("tenants")
    tenants.add_argument("--tenant-header", help="header naming the tenant (else the API key identifies it)")
    tenants.add_argument(
        "--isolate-tenants",
        action="store_true",
        help="salt block hashes per tenant and send vLLM a per-tenant cache_salt",
    )
    faults = parser.add_argument_group("limits and faults")
    faults.add_argument("--retries", type=int, default=2, help="other members to try before the first byte")
    faults.add_argument("--max-body-bytes", type=_positive_int, default=16 * 1024 * 1024)
    faults.add_argument("--connect-timeout", type=float, default=3.0, help="seconds to connect to an engine")
    faults.add_argument(
        "--read-timeout",
        type=float,
        default=600.0,
        help="longest silence from an engine, before its answer and between stream chunks",
    )
    faults.add_argument("--eject-seconds", type=float, default=5.0, help="first ejection after a failure")
    faults.add_argument("--eject-max-seconds", type=float, default=60.0, help="longest ejection (backoff cap)")
    faults.add_argument("--max-connections", type=_positive_int, default=4096, help="upstream connection pool")
    faults.add_argument(
        "--upstream-client",
        choices=UPSTREAM_CLIENTS,
        default=RouterSettings.upstream_client,
        help="HTTP client for forwarded requests: the native one (httptools) or aiohttp's ClientSession (fallback)",
    )
    load = parser.add_argument_group("load view and membership")
    load.add_argument(
        "--scrape-interval",
        type=_non_negative_float,
        default=0.0,
        help="seconds between scrapes of each engine's /metrics (0 = off)",
    )
    load.add_argument("--ring-poll-interval", type=float, default=1.0, help="seconds between ring file checks")
    ops = parser.add_argument_group("operations")
    ops.add_argument("--log-level", default=os.environ.get("PREFIXROUTE_LOG_LEVEL", "INFO"))
    ops.add_argument("--access-log", action="store_true", help="log every request (off: it costs throughput)")
    ops.add_argument("--no-member-header", action="store_true", help="do not add X-Prefixroute-Member to responses")
    ops.add_argument("--backlog", type=_positive_int, default=2048, help="listen backlog")


def settings_from_args(args: argparse.Namespace) -> RouterSettings:
    routing = RoutingConfig(
        strategy=args.strategy,
        block_size=args.block_size,
        prefix_blocks=args.prefix_blocks,
        load_factor=args.load_factor,
        load_slack=args.load_slack,
        queue_penalty=args.queue_penalty,
        virtual_nodes=args.virtual_nodes,
        normalise=not args.no_normalise,
        isolate_tenants=args.isolate_tenants,
        index_blocks_per_member=args.index_blocks,
    )
    backends = tuple(u.strip() for u in (args.backends or "").split(",") if u.strip())
    return RouterSettings(
        host=args.host,
        port=args.port,
        backends=backends,
        ring_file=args.ring_file,
        resource=args.resource,
        routing=routing,
        tenant_header=args.tenant_header,
        retries=args.retries,
        max_body_bytes=args.max_body_bytes,
        scrape_interval=args.scrape_interval,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
        eject_seconds=args.eject_seconds,
        eject_max_seconds=args.eject_max_seconds,
        ring_poll_interval=args.ring_poll_interval,
        max_connections=args.max_connections,
        member_header=not args.no_member_header,
        upstream_client=args.upstream_client,
    )


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop when installed (about twice the throughput of the default loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def tune_gc() -> None:
    """Keep the cyclic garbage collector off the latency tail.

    Measured under load: a full (generation 2) collection walks every object the
    imports created and took 40-65 ms, once every few seconds — that alone set the
    p99. Freezing what exists at startup moves it out of the collector's sight (a
    full collection then took under 1 ms), and a higher generation-0 threshold
    makes young collections rare: request objects die by reference counting, so
    little cyclic garbage builds up between them.
    """
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


def malformed_request(record: logging.LogRecord) -> bool:
    """A filter for aiohttp's server log: False for its report of a malformed HTTP request.

    aiohttp answers those with 400 itself, but logs each at ERROR with a traceback, so any
    client sending garbage could fill the router's log (and hide real errors in it)."""
    from aiohttp.http_exceptions import HttpProcessingError

    exc = record.exc_info[1] if record.exc_info else None
    return not (isinstance(exc, HttpProcessingError) and 400 <= (exc.code or 0) < 500)


def run_router(args: argparse.Namespace) -> int:
    from aiohttp import web

    from prefixroute.router.app import build_app

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if logging.getLogger("prefixroute.router").getEffectiveLevel() > logging.DEBUG:
        logging.getLogger("aiohttp.server").addFilter(malformed_request)
    try:
        settings = settings_from_args(args)
    except ValueError as exc:
        raise SystemExit(f"prefixroute router: {exc}") from None
    app = build_app(settings)
    tune_gc()
    log = logging.getLogger("prefixroute.router")
    log.info("router on %s:%d, strategy %s", settings.host, settings.port, settings.routing.strategy)
    web.run_app(
        app,
        host=settings.host,
        port=settings.port,
        access_log=logging.getLogger("aiohttp.access") if args.access_log else None,
        backlog=args.backlog,
        loop=new_event_loop(),
        print=None,
    )
    return 0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("router", help="the OpenAI-compatible prefix-aware proxy")
    add_router_arguments(parser)
    parser.set_defaults(handler=run_router)
