"""`prefixroute epp`'s flags: the router's membership, routing and front-door flags, and its own."""

from __future__ import annotations

import argparse

import pytest

from prefixroute.epp.cli import add_epp_arguments, settings_from_args
from prefixroute.front.gate import GateSettings


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="prefixroute epp")
    add_epp_arguments(parser)
    return parser.parse_args(["--backends", "http://10.0.0.1:8000", *argv])


def test_the_front_door_and_the_scraper_are_the_routers_flags(tmp_path) -> None:
    keys = tmp_path / "keys.yaml"
    settings = settings_from_args(
        parse("--api-keys", str(keys), "--trusted-fronts", "10.0.0.0/8", "--tenant-header", "X-Tenant",
              "--max-in-flight-per-member", "8", "--max-waiting", "16", "--max-wait-seconds", "2",
              "--reserve-per-tenant", "1", "--scrape-interval", "0.5")
    )  # fmt: skip
    gate = settings.gate
    assert (gate.api_keys, gate.tenant_header, [str(n) for n in gate.trusted_fronts]) == (
        str(keys),
        "X-Tenant",
        ["10.0.0.0/8"],
    )
    assert (gate.max_in_flight_per_member, gate.max_waiting, gate.max_wait_seconds, gate.reserve_per_tenant) == (
        8,
        16,
        2.0,
        1,
    )
    assert settings.scrape_interval == 0.5


def test_defaults_leave_the_door_open_and_scraping_off() -> None:
    settings = settings_from_args(parse())
    assert settings.gate == GateSettings() and settings.scrape_interval == 0.0


def test_bad_values_are_refused_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--scrape-interval"):
        settings_from_args(parse("--scrape-interval", "-1"))
    with pytest.raises(ValueError, match="--trusted-fronts only matters with --api-keys"):
        settings_from_args(parse("--trusted-fronts", "10.0.0.0/8"))
