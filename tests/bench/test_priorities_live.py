"""`bench priorities --live`: the keys each target's router gets, its flags, and how a client's
outcome is counted (the processes themselves: the smoke and full runs in docs/benchmarks.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixroute.bench import mixed
from prefixroute.bench.fleet_sim import CLIENT_GONE
from prefixroute.bench.priorities_live import key_entries, record, router_flags
from prefixroute.bench.priority_runs import FAILED, TARGETS, ClassTally, Settings, Tally
from prefixroute.bench.replay import Outcome
from prefixroute.tenancy.bands import SHED_SHEDDABLE, SHED_TTL
from prefixroute.tenancy.keys import key_digest, parse_key_entries

BY_LABEL = {t.label: t for t in TARGETS}


def test_with_bands_each_key_carries_its_priority_and_its_objective_in_wall_milliseconds() -> None:
    entries, keys = key_entries(mixed.CLASSES, bands=True, time_scale=2.0)
    parsed = {k.tenant: k for k in parse_key_entries(entries)}  # the router's own reading of the file
    assert parsed["interactive"].priority == 10
    assert parsed["interactive"].ttft_objective_ms == 250  # 500 engine ms at twice real time
    assert (parsed["standard"].priority, parsed["standard"].ttft_objective_ms) == (0, None)
    assert parsed["batch"].priority == -1
    assert {tenant: key_digest(key) for tenant, key in keys.items()} == {t: k.digest for t, k in parsed.items()}


def test_without_bands_every_key_is_plain_and_keys_are_fresh_each_time() -> None:
    entries, keys = key_entries(mixed.CLASSES, bands=False, time_scale=1.0)
    assert all(set(e) == {"sha256", "tenant"} for e in entries)
    _, again = key_entries(mixed.CLASSES, bands=False, time_scale=1.0)
    assert not set(keys.values()) & set(again.values())


def _value(flags: list[str], name: str) -> str | None:
    return flags[flags.index(name) + 1] if name in flags else None


def test_a_target_with_admission_gets_fair_sharing_and_its_ttl_in_wall_seconds() -> None:
    settings = Settings(per_member=16, max_wait_seconds=30.0)
    engines = ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    flags = router_flags(BY_LABEL["prefix-cache+bands"], settings, engines, Path("/k.json"), time_scale=3.0)
    assert _value(flags, "--backends") == "http://127.0.0.1:1,http://127.0.0.1:2"
    assert (_value(flags, "--strategy"), _value(flags, "--api-keys")) == ("prefix-cache", "/k.json")
    assert (_value(flags, "--max-in-flight-per-member"), _value(flags, "--max-wait-seconds")) == ("16", "10")
    plain = router_flags(BY_LABEL["least-load"], settings, engines, Path("/k.json"), time_scale=3.0)
    assert _value(plain, "--strategy") == "least-load"
    assert "--max-in-flight-per-member" not in plain
    assert "--max-wait-seconds" not in plain


@pytest.mark.parametrize(
    ("outcome", "reason"),
    [
        (Outcome(gave_up=True), CLIENT_GONE),
        (Outcome(503, shed_reason=SHED_SHEDDABLE), SHED_SHEDDABLE),
        (Outcome(503, shed_reason=SHED_TTL), SHED_TTL),
        (Outcome(503, shed_reason="something-else"), FAILED),
        (Outcome(502), FAILED),
        (Outcome(), FAILED),
    ],
)
def test_a_request_without_a_first_token_counts_under_why(outcome: Outcome, reason: str) -> None:
    tally = Tally({c.name: ClassTally() for c in mixed.CLASSES})
    record(tally, mixed.BATCH, outcome, time_scale=1.0)
    batch = tally.classes["batch"]
    assert (batch.arrived, batch.answered, batch.good) == (1, 0, 0)
    assert batch.dropped == {reason: 1}


def test_an_answered_request_is_good_within_its_objective_in_engine_seconds() -> None:
    tally = Tally({c.name: ClassTally() for c in mixed.CLASSES})
    record(tally, mixed.INTERACTIVE, Outcome(200, ttft=0.1, done=True), time_scale=4.0)  # 0.4 engine s
    record(tally, mixed.INTERACTIVE, Outcome(200, ttft=0.2, done=True), time_scale=4.0)  # 0.8: late
    record(tally, mixed.STANDARD, Outcome(200, ttft=5.0), time_scale=4.0)  # no objective: answered is good
    inter, standard = tally.classes["interactive"], tally.classes["standard"]
    assert (inter.arrived, inter.answered, inter.good, inter.ttfts) == (2, 2, 1, [0.4, 0.8])
    assert (standard.answered, standard.good) == (1, 1)


def test_a_router_whose_metrics_cannot_be_read_gives_an_empty_page() -> None:
    from prefixroute.bench.priorities_live import router_metrics

    assert router_metrics("http://127.0.0.1:9") == b""  # port 9 (discard) refuses on loopback
