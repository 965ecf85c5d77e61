"""The flags both fronts share, on a bare parser: what they parse to (the fields of
FrontSettings), their defaults, the block size that follows --tokenizer, the membership source
that must be exactly one, and a bad value refused naming its flag. Each front's own command
line: tests/router/test_cli.py, tests/epp/test_cli.py."""

from __future__ import annotations

import argparse
import ipaddress

import pytest

from prefixroute.front import flags
from prefixroute.front.body import DEFAULT_MAX_BODY_BYTES
from prefixroute.front.settings import FrontSettings
from prefixroute.routing.adapter_residency import load_cost
from prefixroute.routing.knobs import BLOCK_SIZE, MAX_WAITING, SCRAPE_INTERVAL


def parser(inference_pool: bool = False) -> argparse.ArgumentParser:
    out = argparse.ArgumentParser(prog="front")
    flags.add_front_arguments(out, inference_pool)
    return out


def fields(*argv: str, inference_pool: bool = False) -> dict[str, object]:
    return flags.front_settings_fields(parser(inference_pool).parse_args(argv))


def refused(capsys: pytest.CaptureFixture[str], *argv: str, inference_pool: bool = False) -> str:
    """What argparse says when it refuses `argv` (it exits with status 2)."""
    with pytest.raises(SystemExit) as exit_:
        parser(inference_pool).parse_args(argv)
    assert exit_.value.code == 2
    return capsys.readouterr().err


def test_the_defaults_are_frontsettings_own() -> None:
    got = fields("--backends", "http://a")
    settings = FrontSettings(**got)  # type: ignore[arg-type]
    default = FrontSettings(backends=("http://a",))
    assert settings == default
    assert (got["max_body_bytes"], got["scrape_interval"]) == (DEFAULT_MAX_BODY_BYTES, SCRAPE_INTERVAL.default)
    assert got["inference_pool"] is None  # the router's parser has no such flag


def test_every_field_is_read_back() -> None:
    got = fields(
        "--host", "0.0.0.0",
        "--ring-file", "/etc/ring.yaml",
        "--strategy", "least-load",
        "--block-size", "32",
        "--tenant-header", "X-Tenant",
        "--api-keys", "/keys.yaml",
        "--trusted-fronts", "10.0.0.0/8, fd00::1",
        "--max-waiting", "5",
        "--max-body-bytes", "1000",
        "--scrape-interval", "0",
        "--eject-seconds", "2",
        "--eject-max-seconds", "8",
        "--ring-poll-interval", "0.5",
        "--otlp-endpoint", "http://otel:4318",
        "--trace-sample-ratio", "0.5",
    )  # fmt: skip
    settings = FrontSettings(**got)  # type: ignore[arg-type]
    assert (settings.host, settings.ring_file, settings.backends) == ("0.0.0.0", "/etc/ring.yaml", ())
    assert (settings.routing.strategy, settings.routing.block_size) == ("least-load", 32)
    assert (settings.gate.tenant_header, settings.gate.api_keys, settings.gate.max_waiting) == (
        "X-Tenant",
        "/keys.yaml",
        5,
    )
    assert settings.gate.trusted_fronts == (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("fd00::1"))
    assert (settings.max_body_bytes, settings.scrape_interval) == (1000, 0.0)
    assert (settings.eject_seconds, settings.eject_max_seconds, settings.ring_poll_interval) == (2.0, 8.0, 0.5)
    assert (settings.otlp_endpoint, settings.trace_sample_ratio) == ("http://otel:4318", 0.5)


def test_backends_are_split_and_blanks_dropped() -> None:
    assert fields("--backends", " http://a , ,http://b,")["backends"] == ("http://a", "http://b")


@pytest.mark.parametrize(
    ("argv", "block_size"),
    [
        ((), BLOCK_SIZE.default),  # characters
        (("--tokenizer", "engine-sim"), flags.TOKEN_BLOCK_SIZE),  # the engine's block, in tokens
        (("--tokenizer", "engine-sim", "--block-size", "32"), 32),
        (("--block-size", "7"), 7),
    ],
)
def test_the_block_size_follows_the_tokenizer_unless_given(argv: tuple[str, ...], block_size: int) -> None:
    routing = fields("--backends", "http://a", *argv)["routing"]
    assert routing.block_size == block_size  # type: ignore[attr-defined]


def test_exactly_one_membership_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert "one of the arguments --backends --ring-file --resource is required" in refused(capsys)
    assert "not allowed with argument" in refused(capsys, "--backends", "http://a", "--resource", "ns/m")


def test_an_inference_pool_only_where_the_front_asks_for_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert fields("--inference-pool", "gie/pool", inference_pool=True)["inference_pool"] == "gie/pool"
    assert "unrecognized arguments: --inference-pool" in refused(
        capsys, "--backends", "http://a", "--inference-pool", "p"
    )
    assert "not allowed with argument" in refused(
        capsys, "--inference-pool", "gie/pool", "--backends", "http://a", inference_pool=True
    )


@pytest.mark.parametrize("value", ["0", "-5", "ten"])
def test_the_body_limit_is_a_positive_integer(capsys: pytest.CaptureFixture[str], value: str) -> None:
    assert "--max-body-bytes" in refused(capsys, "--backends", "http://a", "--max-body-bytes", value)


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("65536", 65536)])
def test_positive_int(text: str, value: int) -> None:
    assert flags.positive_int(text) == value


@pytest.mark.parametrize("text", ["0", "-1"])
def test_positive_int_refuses_the_rest(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="positive"):
        flags.positive_int(text)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--tenant-header", "X Tenant"), "^--tenant-header: "),
        (("--block-size", "0"), "^--block-size: "),
        (("--trusted-fronts", "10.0.0.300"), "'10.0.0.300' is not an IP address or CIDR network"),
        (("--trusted-fronts", "10.0.0.0/8"), "--trusted-fronts only matters with --api-keys"),
        (("--max-waiting", "-1"), "^--max-waiting: "),
        (("--trace-sample-ratio", "2"), "^--trace-sample-ratio: "),
    ],
)
def test_a_bad_value_is_refused_naming_its_flag(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        fields("--backends", "http://a", *argv)


def test_the_fair_sharing_flags_are_their_knobs() -> None:
    assert {k.name for k in flags.FAIR_SHARING_KNOBS} >= {MAX_WAITING.name}
    gate = flags.gate_settings(parser().parse_args(["--backends", "http://a", "--max-in-flight-per-member", "4"]))
    assert (gate.max_in_flight_per_member, gate.max_waiting) == (4, MAX_WAITING.default)


def test_a_front_adds_its_own_flags_to_the_shared_groups() -> None:
    out = argparse.ArgumentParser()
    groups = flags.add_front_arguments(out)
    groups.faults.add_argument("--retries", type=int, default=2)
    groups.ops.add_argument("--port", type=int, default=8080)
    titles = {group.title: [a.dest for a in group._group_actions] for group in out._action_groups}
    assert "retries" in titles["limits and faults"]
    assert "eject_seconds" in titles["limits and faults"]
    assert titles["operations"] == ["log_level", "port"]


def test_the_log_level_defaults_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PREFIXROUTE_LOG_LEVEL", "DEBUG")
    assert parser().parse_args(["--backends", "http://a"]).log_level == "DEBUG"
    monkeypatch.delenv("PREFIXROUTE_LOG_LEVEL")
    assert parser().parse_args(["--backends", "http://a"]).log_level == "INFO"


@pytest.mark.parametrize(
    ("argv", "cost"),
    [
        ((), 4000),  # characters: 1,000 tokens of English text
        (("--tokenizer", "engine-sim"), 1000),  # tokens
        (("--adapter-load-cost", "250"), 250),
        (("--tokenizer", "engine-sim", "--adapter-load-cost", "0"), 0),
    ],
)
def test_the_adapter_load_cost_is_in_the_units_requests_are_keyed_in(argv: tuple[str, ...], cost: int) -> None:
    routing = fields("--backends", "http://a", "--adapter-slots", "4", *argv)["routing"]
    assert load_cost(routing) == cost  # type: ignore[arg-type]
    assert routing.adapter_slots == 4  # type: ignore[attr-defined]
