"""The knobs as flags: one argument per knob, stored under its name, read back as a
RoutingConfig; a refused value names its flag."""

from __future__ import annotations

import argparse

import pytest

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.flags import (
    add_knob_arguments,
    add_routing_arguments,
    knob_from_args,
    routing_config_from_args,
)
from prefixroute.routing.knobs import ROUTING_KNOBS, SCRAPE_INTERVAL


def parser(exclude: tuple[str, ...] = ()) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser()
    add_routing_arguments(p, exclude=exclude)
    return p


def test_no_flags_is_the_default_config() -> None:
    assert routing_config_from_args(parser().parse_args([])) == RoutingConfig()


def test_every_routing_knob_has_its_flag() -> None:
    flags = {a.option_strings[0] for a in parser()._actions if a.option_strings and a.dest != "help"}
    assert flags == {k.flag for k in ROUTING_KNOBS}


def test_flags_set_the_config() -> None:
    args = parser().parse_args(
        [
            "--strategy",
            "least-load",
            "--load-factor",
            "2",
            "--no-normalise",
            "--isolate-tenants",
            "--index-blocks",
            "64",
        ]
    )
    assert routing_config_from_args(args) == RoutingConfig(
        strategy="least-load", load_factor=2.0, normalise=False, isolate_tenants=True, index_blocks_per_member=64
    )


def test_an_excluded_knob_has_no_flag_and_keeps_its_default() -> None:
    p = parser(exclude=("strategy",))
    with pytest.raises(SystemExit):
        p.parse_args(["--strategy", "round-robin"])
    assert routing_config_from_args(p.parse_args(["--block-size", "8"])) == RoutingConfig(block_size=8)


def test_a_refused_value_names_its_flag() -> None:
    with pytest.raises(InvalidKnob, match=r"^--virtual-nodes: virtual nodes must be at least 1$"):
        routing_config_from_args(parser().parse_args(["--virtual-nodes", "0"]))
    with pytest.raises(SystemExit):  # not a number at all: argparse's own usage error
        parser().parse_args(["--load-factor", "lots"])


def test_help_shows_default_and_bounds() -> None:
    text = parser().format_help()
    assert "(default 1.25, >= 1.0, <= 100)" in text
    assert "--no-normalise turns it off" in text


def test_a_front_knob_is_read_and_checked() -> None:
    p = argparse.ArgumentParser()
    add_knob_arguments(p, [SCRAPE_INTERVAL])
    assert knob_from_args(p.parse_args([]), SCRAPE_INTERVAL) == 0.0
    assert knob_from_args(p.parse_args(["--scrape-interval", "2"]), SCRAPE_INTERVAL) == 2.0
    with pytest.raises(InvalidKnob, match=r"^--scrape-interval: scrape interval must be at least 0"):
        knob_from_args(p.parse_args(["--scrape-interval", "-1"]), SCRAPE_INTERVAL)
