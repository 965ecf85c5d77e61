"""The flags both fronts take: where the fleet comes from, the routing knobs, tenants.

Declared here once, so `prefixroute router` and `prefixroute epp` cannot drift: the same
names, defaults, checks and help. The routing knobs and the tenant header come from their
one declaration (routing/knobs.py), shared with the bench and the operator.
"""

from __future__ import annotations

import argparse

from prefixroute.front.gate import GateSettings, parse_networks
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.flags import add_knob_arguments, knob_from_args, routing_config_from_args
from prefixroute.routing.flags import add_routing_arguments as add_core_routing_arguments
from prefixroute.routing.knobs import (
    BLOCK_SIZE,
    MAX_IN_FLIGHT_PER_MEMBER,
    MAX_WAIT_SECONDS,
    MAX_WAITING,
    RESERVE_PER_TENANT,
    TENANT_HEADER,
)

FAIR_SHARING_KNOBS = (MAX_IN_FLIGHT_PER_MEMBER, MAX_WAITING, RESERVE_PER_TENANT, MAX_WAIT_SECONDS)

TOKEN_BLOCK_SIZE = 16  # vLLM's and engine-sim's default KV block size, in tokens


def positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def add_membership_arguments(parser: argparse.ArgumentParser, inference_pool: bool = False) -> None:
    """The membership sources; `inference_pool` adds --inference-pool (the EPP's)."""
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--backends", help="comma-separated engine base URLs (a fixed fleet)")
    source.add_argument("--ring-file", help="YAML/JSON ring document, reloaded when it changes")
    source.add_argument(
        "--resource", metavar="NAMESPACE/NAME", help="follow status.ring of this PrefixRoutedModel in Kubernetes"
    )
    if inference_pool:
        source.add_argument(
            "--inference-pool",
            metavar="NAMESPACE/NAME",
            help="the ready pods of this GIE InferencePool (its selector and target port), read every second",
        )


def add_routing_arguments(parser: argparse.ArgumentParser) -> None:
    """The routing core's knobs and the tenant header, as flags derived from their
    declarations (routing/knobs.py), in the groups "routing" and "tenants"."""
    add_core_routing_arguments(parser)
    parser.set_defaults(block_size=None)  # unset: routing_config picks characters' or tokens' default
    tenants = parser.add_argument_group("tenants")
    add_knob_arguments(tenants, [TENANT_HEADER])


def routing_config(args: argparse.Namespace) -> RoutingConfig:
    """The RoutingConfig the routing flags describe (ValueError naming the flag of a value out
    of bounds). Without --block-size, blocks are the knob's default in characters, or with
    --tokenizer the engine's block size in tokens."""
    if args.block_size is None:
        size = TOKEN_BLOCK_SIZE if getattr(args, "tokenizer", None) else BLOCK_SIZE.default
        args = argparse.Namespace(**{**vars(args), "block_size": size})
    return routing_config_from_args(args)


def tenant_header(args: argparse.Namespace) -> str | None:
    """--tenant-header, checked against its declaration (an HTTP header name)."""
    value: str | None = knob_from_args(args, TENANT_HEADER)
    return value


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
    add_knob_arguments(door, FAIR_SHARING_KNOBS)  # declared in routing/knobs.py (also spec.router.fairSharing)


def gate_settings(args: argparse.Namespace) -> GateSettings:
    """The GateSettings the front-door flags describe (ValueError for bad values)."""
    return GateSettings(
        tenant_header=tenant_header(args),
        api_keys=args.api_keys,
        trusted_fronts=parse_networks(args.trusted_fronts),
        **{knob.name: knob_from_args(args, knob) for knob in FAIR_SHARING_KNOBS},
    )
