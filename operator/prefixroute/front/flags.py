"""The flags both fronts take, declared once: where the fleet comes from, the routing knobs,
precise mode, peers, tenants and the front door, body limit, ejection, scrapes, tracing, logging.

`add_front_arguments` declares them and `front_settings_fields` reads them back as the
fields of `front.settings.FrontSettings`, so `prefixroute router` and `prefixroute epp`
cannot drift: the same names, defaults, checks and help. The routing knobs and the tenant
header come from their one declaration (routing/knobs.py), shared with the bench and the
operator.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from prefixroute.front.body import DEFAULT_MAX_BODY_BYTES
from prefixroute.front.gate import GateSettings, parse_networks
from prefixroute.front.peers import add_peer_arguments, peer_settings
from prefixroute.front.precise import add_precise_arguments, precise_settings
from prefixroute.routing.adapter_residency import load_cost
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.flags import add_knob_arguments, knob_from_args, routing_config_from_args
from prefixroute.routing.flags import add_routing_arguments as add_core_routing_arguments
from prefixroute.routing.knobs import (
    BLOCK_SIZE,
    DEFAULT_TTFT_OBJECTIVE_MS,
    MAX_IN_FLIGHT_PER_MEMBER,
    MAX_WAIT_SECONDS,
    MAX_WAITING,
    OBJECTIVE_PRIORITIES,
    OTLP_ENDPOINT,
    RESERVE_PER_TENANT,
    SCRAPE_INTERVAL,
    TENANT_HEADER,
    TRACE_SAMPLE_RATIO,
)

FAIR_SHARING_KNOBS = (MAX_IN_FLIGHT_PER_MEMBER, MAX_WAITING, RESERVE_PER_TENANT, MAX_WAIT_SECONDS)
PRIORITY_KNOBS = (OBJECTIVE_PRIORITIES, DEFAULT_TTFT_OBJECTIVE_MS)

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
    --tokenizer the engine's block size in tokens; likewise the adapter load cost's default
    (`routing.adapter_residency.load_cost`)."""
    tokens = bool(getattr(args, "tokenizer", None))
    if args.block_size is None:
        args = argparse.Namespace(**{**vars(args), "block_size": TOKEN_BLOCK_SIZE if tokens else BLOCK_SIZE.default})
    if tokens and getattr(args, "adapter_load_cost", None) is None:  # unset means characters' default
        cost = load_cost(routing_config_from_args(argparse.Namespace()), tokens=True)
        args = argparse.Namespace(**{**vars(args), "adapter_load_cost": cost})
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
        help="YAML list of {sha256, tenant, maxConcurrent?, tokensPerMinute?, priority?, ttftObjectiveMs?}: "
        "clients must send "
        "'Authorization: Bearer <key>'; the tenant comes from the key; reloaded when the file changes",
    )
    door.add_argument(
        "--trusted-fronts",
        metavar="CIDR,...",
        help="with --api-keys: peers (a gateway that authenticates) whose --tenant-header counts without a key",
    )
    add_knob_arguments(door, FAIR_SHARING_KNOBS)  # declared in routing/knobs.py (also spec.router.fairSharing)
    add_knob_arguments(door, PRIORITY_KNOBS)  # also spec.router.priorities


def gate_settings(args: argparse.Namespace) -> GateSettings:
    """The GateSettings the front-door flags describe (ValueError for bad values)."""
    return GateSettings(
        tenant_header=tenant_header(args),
        api_keys=args.api_keys,
        trusted_fronts=parse_networks(args.trusted_fronts),
        **{knob.name: knob_from_args(args, knob) for knob in FAIR_SHARING_KNOBS + PRIORITY_KNOBS},
    )


@dataclass(frozen=True)
class FrontGroups:
    """The flag groups `add_front_arguments` made, for a front to add its own flags to."""

    faults: argparse._ArgumentGroup
    load: argparse._ArgumentGroup
    ops: argparse._ArgumentGroup


def add_front_arguments(parser: argparse.ArgumentParser, inference_pool: bool = False) -> FrontGroups:
    """Every flag both fronts share (`inference_pool`: also --inference-pool, the EPP's)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (the pod IP in Kubernetes)")
    add_membership_arguments(parser, inference_pool)
    add_routing_arguments(parser)
    add_precise_arguments(parser)
    add_peer_arguments(parser)
    add_gate_arguments(parser)
    faults = parser.add_argument_group("limits and faults")
    faults.add_argument("--max-body-bytes", type=positive_int, default=DEFAULT_MAX_BODY_BYTES)
    faults.add_argument("--eject-seconds", type=float, default=5.0, help="first ejection after a member failed")
    faults.add_argument("--eject-max-seconds", type=float, default=60.0, help="longest ejection (backoff cap)")
    load = parser.add_argument_group("load view and membership")
    add_knob_arguments(load, [SCRAPE_INTERVAL])
    load.add_argument("--ring-poll-interval", type=float, default=1.0, help="seconds between ring file checks")
    tracing = parser.add_argument_group("tracing (OpenTelemetry, off by default)")
    add_knob_arguments(tracing, [OTLP_ENDPOINT, TRACE_SAMPLE_RATIO])
    ops = parser.add_argument_group("operations")
    ops.add_argument("--log-level", default=os.environ.get("PREFIXROUTE_LOG_LEVEL", "INFO"))
    return FrontGroups(faults, load, ops)


def front_settings_fields(args: argparse.Namespace) -> dict[str, Any]:
    """The FrontSettings fields the shared flags describe (ValueError for a bad value)."""
    return {
        "host": args.host,
        "backends": backends(args),
        "ring_file": args.ring_file,
        "resource": args.resource,
        "inference_pool": getattr(args, "inference_pool", None),
        "routing": routing_config(args),
        "precise": precise_settings(args),
        "peers": peer_settings(args),
        "gate": gate_settings(args),
        "max_body_bytes": args.max_body_bytes,
        "scrape_interval": args.scrape_interval,
        "eject_seconds": args.eject_seconds,
        "eject_max_seconds": args.eject_max_seconds,
        "ring_poll_interval": args.ring_poll_interval,
        "otlp_endpoint": knob_from_args(args, OTLP_ENDPOINT),
        "trace_sample_ratio": knob_from_args(args, TRACE_SAMPLE_RATIO),
    }
