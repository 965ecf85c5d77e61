"""`bench priorities`: goodput and the bands' effect, each target over the same workload."""

from __future__ import annotations

import json
import math

import pytest

from prefixroute.bench import mixed
from prefixroute.bench.priorities import simulate_target
from prefixroute.bench.priority_runs import TARGETS, Settings
from prefixroute.bench.simulate import prepare
from prefixroute.cli import main
from prefixroute.engine_model.config import EngineConfig
from prefixroute.routing.config import RoutingConfig

ENGINE = EngineConfig(max_running=16)
BY_LABEL = {t.label: t for t in TARGETS}


def test_at_twice_the_capacity_bands_keep_the_interactive_tail_lower() -> None:
    """The relation the bench exists to show, in a small deterministic run: with bands and
    objectives the interactive tenant's p99 TTFT is lower than with bands off (fair sharing
    alike), and the sheddable batch tenant is the one refused."""
    settings = Settings(replicas=2, per_member=16)
    routing = RoutingConfig()
    requests = mixed.workload(2.0 * mixed.capacity(ENGINE, settings.replicas), seconds=15.0, seed=4)
    prepared = prepare(requests, routing, ENGINE)
    tenants = [r.tenant or "" for r in requests]
    on = simulate_target(prepared, tenants, BY_LABEL["prefix-cache+bands"], settings, routing, ENGINE)
    off = simulate_target(prepared, tenants, BY_LABEL["prefix-cache+fair"], settings, routing, ENGINE)
    fast, slow = on.classes["interactive"], off.classes["interactive"]
    assert sorted(fast.ttfts)[int(0.99 * len(fast.ttfts))] < sorted(slow.ttfts)[int(0.99 * len(slow.ttfts))]
    assert fast.good > slow.good
    assert on.classes["batch"].shed > 0
    assert on.classes["interactive"].shed == on.classes["standard"].shed == 0
    assert on.arrived == off.arrived == len(requests)


def test_the_command_runs_every_target_at_every_load(tmp_path, capsys) -> None:
    out = tmp_path / "p.json"
    argv = ["bench", "priorities", "--loads", "0.5,2", "--seconds", "4", "--replicas", "1", "--json", str(out)]
    assert main(argv) == 0
    saved = json.loads(out.read_text())
    assert [(r["load"], r["target"]) for r in saved["rows"]] == [(x, t.label) for x in (0.5, 2.0) for t in TARGETS]
    assert all(r["goodput_x"] == 1.0 for r in saved["rows"] if r["target"] == "prefix-cache")
    assert saved["run"]["settings"]["per_member"] == 16  # the engines' running slots
    assert math.isclose(saved["run"]["capacity_rps"], mixed.capacity(ENGINE, 1), rel_tol=1e-3)
    assert "prefix-cache+bands" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--loads", "0"], "--loads must be"),
        (["--loads", "x"], "--loads must be"),
        (["--targets", "nope"], "--targets takes"),
        (["--targets", "round-robin"], "--baseline 'prefix-cache' is not among"),
        (["--seconds", "0"], "--seconds, --replicas"),
        (["--live", "--time-scale", "0"], "--time-scale must be positive"),
        (["--live", "--base-port", "80"], "--time-scale must be positive and --base-port"),
    ],
)
def test_a_bad_option_is_one_line_and_status_2(argv: list[str], message: str, capsys) -> None:
    assert main(["bench", "priorities", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
