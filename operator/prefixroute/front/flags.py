"""The flags both fronts take: where the fleet comes from, the routing knobs, tenants.

Declared here once, so `prefixroute router` and `prefixroute epp` cannot drift: the same
names, defaults (the routing core's `RoutingConfig`), checks and help.
"""

from __future__ import annotations

import argparse

from prefixroute.front.gate import GateSettings, parse_networks
from prefixroute.routing.blocks import DEFAULT_BLOCK_SIZE
from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig
from prefixroute.routing.ring import DEFAULT_VIRTUAL_NODES

TOKEN_BLOCK_SIZE = 16  # vLLM's and engine-sim's default KV block size, in tokens


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError("must be a number >= 0")
    return value


def add_membership_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--backends", help="comma-separated engine base URLs (a fixed fleet)")
    source.add_argument("--ring-file", help="YAML/JSON ring document, reloaded when it changes")
    source.add_argument(
        "--resource", metavar="NAMESPACE/NAME", help="follow status.ring of this PrefixRoutedModel in Kubernetes"
    )


def add_routing_arguments(parser: argparse.ArgumentParser) -> None:
    defaults = RoutingConfig()
    routing = parser.add_argument_group("routing")
    routing.add_argument("--strategy", choices=STRATEGY_NAMES, default=defaults.strategy)
    routing.add_argument(
        "--block-size",
        type=positive_int,
        default=None,
        help=f"characters per hashed block ({DEFAULT_BLOCK_SIZE}); with --tokenizer, tokens per block as the "
        f"engine cuts them ({TOKEN_BLOCK_SIZE}, vLLM's default)",
    )
    routing.add_argument(
        "--prefix-blocks",
        type=positive_int,
        default=defaults.prefix_blocks,
        help="K: blocks in the affinity key (prefix-hash, and ring tie-breaks)",
    )
    routing.add_argument(
        "--load-factor",
        type=float,
        default=defaults.load_factor,
        help="a member above this x its fair share takes no affinity traffic",
    )
    routing.add_argument(
        "--load-slack",
        type=int,
        default=defaults.load_slack,
        help="...unless it holds fewer than its fair share plus this many requests",
    )
    routing.add_argument(
        "--queue-penalty",
        type=float,
        default=defaults.queue_penalty,
        help="prefix-cache: weight of the prefill queued on a member against its cache savings",
    )
    routing.add_argument("--virtual-nodes", type=positive_int, default=DEFAULT_VIRTUAL_NODES)
    routing.add_argument(
        "--no-normalise", action="store_true", help="hash prompts exactly as sent (no whitespace collapse or NFC)"
    )
    routing.add_argument(
        "--index-blocks",
        type=positive_int,
        default=defaults.index_blocks_per_member,
        help="prefix-cache: blocks remembered per member",
    )
    tenants = parser.add_argument_group("tenants")
    tenants.add_argument("--tenant-header", help="header naming the tenant (else the API key identifies it)")
    tenants.add_argument(
        "--isolate-tenants",
        action="store_true",
        help="salt block hashes per tenant and send vLLM a per-tenant cache_salt",
    )


def routing_config(args: argparse.Namespace) -> RoutingConfig:
    """The RoutingConfig the routing flags describe (ValueError for values out of bounds)."""
    return RoutingConfig(
        strategy=args.strategy,
        block_size=args.block_size
        if args.block_size is not None
        else (TOKEN_BLOCK_SIZE if getattr(args, "tokenizer", None) else DEFAULT_BLOCK_SIZE),
        prefix_blocks=args.prefix_blocks,
        load_factor=args.load_factor,
        load_slack=args.load_slack,
        queue_penalty=args.queue_penalty,
        virtual_nodes=args.virtual_nodes,
        normalise=not args.no_normalise,
        isolate_tenants=args.isolate_tenants,
        index_blocks_per_member=args.index_blocks,
    )


def backends(args: argparse.Namespace) -> tuple[str, ...]:
    return tuple(u.strip() for u in (args.backends or "").split(",") if u.strip())


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """API keys, per-tenant limits and fair admission (`front.gate`); --tenant-header is a routing flag."""
    door = parser.add_argument_group("front door: API keys, tenant limits, fair sharing")
    door.add_argument(
        "--api-keys",
        metavar="FILE",
        help="YAML list of {sha256, tenant, maxConcurrent?, tokensPerMinute?}: clients must send "
        "'Authorization: Bearer <key>'; the tenant comes from the key; reloaded when the file changes",
    )
    door.add_argument(
        "--trusted-fronts",
        metavar="CIDR,...",
        help="with --api-keys: peers (a gateway that authenticates) whose --tenant-header counts without a key",
    )
    door.add_argument(
        "--max-in-flight-per-member",
        type=int,
        default=0,
        help="fair sharing: requests per engine before new ones wait at the front, shared fairly "
        "between tenants (0 = off)",
    )
    door.add_argument("--max-waiting", type=int, default=1024, help="requests that may wait at once (then 503)")
    door.add_argument(
        "--reserve-per-tenant",
        type=int,
        default=2,
        help="fair sharing: slots a tenant over its fair share leaves free for each other active tenant",
    )
    door.add_argument(
        "--max-wait-seconds", type=float, default=30.0, help="the longest a request waits for room (then 503)"
    )


def gate_settings(args: argparse.Namespace) -> GateSettings:
    """The GateSettings the front-door flags describe (ValueError for bad values)."""
    return GateSettings(
        tenant_header=args.tenant_header,
        api_keys=args.api_keys,
        trusted_fronts=parse_networks(args.trusted_fronts),
        max_in_flight_per_member=args.max_in_flight_per_member,
        max_waiting=args.max_waiting,
        max_wait_seconds=args.max_wait_seconds,
        reserve_per_tenant=args.reserve_per_tenant,
    )
