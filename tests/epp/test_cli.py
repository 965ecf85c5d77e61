"""`prefixroute epp`'s flags: the router's membership, routing and front-door flags, and its own."""

from __future__ import annotations

import argparse

import pytest

from prefixroute.epp.cli import add_epp_arguments, settings_from_args
from prefixroute.epp.settings import EppSettings
from prefixroute.front.flags import TOKEN_BLOCK_SIZE
from prefixroute.front.gate import GateSettings
from prefixroute.front.precise import PreciseSettings


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
    assert settings.gate == GateSettings()
    assert settings.scrape_interval == 0.0


def test_bad_values_are_refused_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--scrape-interval"):
        settings_from_args(parse("--scrape-interval", "-1"))
    with pytest.raises(ValueError, match="--trusted-fronts only matters with --api-keys"):
        settings_from_args(parse("--trusted-fronts", "10.0.0.0/8"))


def test_precise_mode_takes_the_routers_flags_and_tokens_make_the_blocks() -> None:
    settings = settings_from_args(
        parse("--mode", "precise", "--tokenizer", "engine-sim", "--served-model", "sim-model",
              "--kv-events", "tcp://10.0.0.1:5557", "--kv-events-replay", "tcp://10.0.0.1:5558")
    )  # fmt: skip
    assert settings.precise == PreciseSettings(
        mode="precise",
        tokenizer="engine-sim",
        served_model="sim-model",
        kv_events=("tcp://10.0.0.1:5557",),
        kv_events_replay=("tcp://10.0.0.1:5558",),
    )
    assert settings.routing.block_size == TOKEN_BLOCK_SIZE  # blocks of the engine's tokens, not characters
    by_port = settings_from_args(parse("--mode", "precise", "--tokenizer", "engine-sim", "--kv-events-port", "5557"))
    assert by_port.precise.kv_events_port == 5557
    assert by_port.precise.follows_events


def test_a_hub_tokenizer_takes_its_revision_and_cache() -> None:
    settings = settings_from_args(
        parse("--mode", "precise", "--tokenizer", "acme/m", "--tokenizer-revision", "v1",
              "--tokenizer-cache", "/scratch/hub", "--kv-events-port", "5557")
    )  # fmt: skip
    assert (settings.precise.tokenizer, settings.precise.tokenizer_revision) == ("acme/m", "v1")
    assert settings.precise.tokenizer_cache == "/scratch/hub"
    assert settings.routing.block_size == TOKEN_BLOCK_SIZE


def test_approximate_is_the_default() -> None:
    assert settings_from_args(parse()).precise == PreciseSettings(mode="approximate")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--mode", "precise", "--kv-events-port", "5557"), "--mode precise needs --tokenizer"),
        (("--mode", "precise", "--tokenizer", "engine-sim"), "--mode precise needs --kv-events"),
        (("--kv-events-port", "5557"), "need --mode precise"),
        (
            ("--mode", "precise", "--tokenizer", "engine-sim", "--kv-events", "tcp://a:1,tcp://b:1"),
            "one endpoint per backend",
        ),
        (("--mode", "precise", "--tokenizer", "engine-sim", "--kv-events", "a:1"), "tcp://HOST:PORT"),
    ],
)
def test_bad_precise_flags_are_refused_as_the_router_refuses_them(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        settings_from_args(parse(*argv))


def test_the_settings_check_precise_mode_too() -> None:
    with pytest.raises(ValueError, match="one endpoint per backend"):
        EppSettings(
            backends=("http://a", "http://b"),
            precise=PreciseSettings(mode="precise", tokenizer="engine-sim", kv_events=("tcp://a:1",)),
        )
    # a membership source without a fixed list: the event port on each member's host
    EppSettings(resource="ns/m", precise=PreciseSettings(mode="precise", tokenizer="engine-sim", kv_events_port=5557))


def test_an_unknown_mode_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        parse("--mode", "exact")
    assert "argument --mode: invalid choice: 'exact'" in capsys.readouterr().err
