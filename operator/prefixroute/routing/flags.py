"""The knobs as command-line flags, derived from their declarations (routing/knobs.py).

`prefixroute router`, `prefixroute bench simulate` and any other front add the routing
flags with `add_routing_arguments` and read them back with `routing_config_from_args`,
so every front has the same names, defaults, types and help. Values are checked once,
by `RoutingConfig` against the same declarations; a refused value names its flag.
"""

from __future__ import annotations

import argparse
from collections.abc import Collection, Iterable
from typing import Any

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import ROUTING_KNOBS, Knob, knob_named


def add_knob_arguments(parser: argparse._ActionsContainer, knobs: Iterable[Knob[Any]]) -> None:
    """One flag per knob, its value stored under the knob's name (`args.load_factor`)."""
    for knob in knobs:
        if knob.kind is bool:
            action = "store_false" if knob.default else "store_true"
            when = f"on by default; {knob.flag} turns it off" if knob.default else "off by default"
            parser.add_argument(
                knob.flag, dest=knob.name, action=action, default=knob.default, help=f"{knob.help} ({when})"
            )
            continue
        parser.add_argument(
            knob.flag,
            dest=knob.name,
            type=knob.kind,
            default=knob.default,
            choices=knob.choices or None,
            metavar=None if knob.choices else knob.flag.lstrip("-").replace("-", "_").upper(),
            help=_help(knob),
        )


def _help(knob: Knob[Any]) -> str:
    bounds = []
    if knob.minimum is not None:
        bounds.append(f">= {knob.minimum}")
    if knob.maximum is not None:
        bounds.append(f"<= {knob.maximum}")
    default = "" if knob.default is None else f"default {knob.default}"
    extra = ", ".join(p for p in (default, *bounds) if p)
    return (f"{knob.help} ({extra})" if extra else knob.help).replace("%", "%%")


def add_routing_arguments(parser: argparse.ArgumentParser, exclude: Collection[str] = ()) -> None:
    """The routing core's flags, in a "routing" group; `exclude` names knobs a front sets
    otherwise (bench simulate runs several strategies, so it takes no --strategy)."""
    group = parser.add_argument_group("routing")
    add_knob_arguments(group, (k for k in ROUTING_KNOBS if k.name not in exclude))


def routing_config_from_args(args: argparse.Namespace) -> RoutingConfig:
    """The RoutingConfig the flags describe; a knob the parser was not given keeps its
    default. A value out of bounds is a ValueError naming the flag."""
    values = {k.name: getattr(args, k.name) for k in ROUTING_KNOBS if hasattr(args, k.name)}
    try:
        return RoutingConfig(**values)
    except InvalidKnob as exc:
        raise InvalidKnob(exc.knob, f"{knob_named(exc.knob).flag}: {exc.message}") from None


def knob_from_args(args: argparse.Namespace, knob: Knob[Any]) -> Any:
    """A front knob's value from the flags, checked against its declaration."""
    value = getattr(args, knob.name)
    try:
        knob.check(value)
    except InvalidKnob as exc:
        raise InvalidKnob(knob.name, f"{knob.flag}: {exc.message}") from None
    return value
