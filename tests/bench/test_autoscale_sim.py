"""`bench autoscale`: the scenario, the queue-only baseline, and both policies over a short run."""

import json

import pytest

from prefixroute.autoscaling.settings import AutoscalingSettings
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals
from prefixroute.bench import autoscale_sim as sim
from prefixroute.cli import main as cli_main
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.routing.config import RoutingConfig

SETTINGS = AutoscalingSettings(
    enabled=True, min_replicas=2, max_replicas=8, target_queue_depth=2.0, target_ttft_p50_seconds=0.5
)
ENGINE = EngineConfig(
    model="engine-sim", kv_blocks=3000, max_running=16, latency=LatencyModel(prefill_tokens_per_s=1500.0)
)


def test_the_scenario_ramps_swings_turns_hot_and_quietens() -> None:
    s = sim.Scenario()
    ramp, diurnal, hot, quiet = s.phases()
    assert [p.name for p in s.phases()] == ["ramp", "diurnal", "hot tenant", "quiet"] and quiet.end == 90 * 60
    assert s.rate(0) < s.rate(ramp.end - 1) == pytest.approx(s.base_peak, rel=0.01)
    assert s.rate((diurnal.start + diurnal.end) / 2) == pytest.approx(s.base_trough)
    assert s.hot_extra(hot.start) == s.hot_rate and s.hot_extra(hot.start - 1) == s.hot_extra(quiet.start) == 0


def test_the_workload_is_fixed_by_its_seed_and_the_hot_tenant_appears_when_due() -> None:
    s = sim.Scenario(minutes=20)
    first, again = sim.workload(s, seed=3), sim.workload(s, seed=3)
    assert [r.at for r in first] == [r.at for r in again] and [r.tenant for r in first] == [r.tenant for r in again]
    hot = s.phases()[2]
    during = [r for r in first if hot.start <= r.at < hot.end]
    before = [r for r in first if r.at < hot.start]
    share = lambda rs: sum(r.tenant == f"tenant-{s.hot_tenant}" for r in rs) / len(rs)  # noqa: E731
    assert share(during) > 0.3 > 0.05 > share(before)


def signals(waiting_per_member, members=4):
    return FleetSignals(0.0, tuple(MemberSignals(f"engine-{i}", waiting=waiting_per_member) for i in range(members)))


def test_the_queue_only_baseline_is_an_hpa_on_waiting_requests() -> None:
    hpa = sim.QueueOnly(SETTINGS, stabilisation_seconds=300)
    members = [f"engine-{i}" for i in range(4)]
    assert hpa.decide(signals(2.1), 4, members, 0).replicas == 4  # within the 10% tolerance
    up = hpa.decide(signals(4.0), 4, members, 15)
    assert (up.replicas, up.label, up.remove) == (8, "scale-up", ())  # ceil(4 x 4/2), capped at max 8
    held = hpa.decide(signals(0.0), 8, members + [f"engine-{i}" for i in range(4, 8)], 30)
    assert held.replicas == 8  # the stabilisation window remembers the 8
    hpa.recommendations.clear()
    down = hpa.decide(signals(0.0), 4, members, 400)
    assert down.replicas == 2 and down.remove == ("engine-3", "engine-2")  # the newest go first


@pytest.fixture(scope="module")
def short_run():
    scenario = sim.Scenario(minutes=20)
    prepared = sim.prepare(sim.workload(scenario, seed=1), RoutingConfig(), ENGINE)
    outcomes = {
        p.name: sim.run(prepared, p, SETTINGS, ENGINE, RoutingConfig(), startup_seconds=60)
        for p in (sim.Prefixroute(SETTINGS), sim.QueueOnly(SETTINGS))
    }
    return scenario, prepared, outcomes


def test_both_policies_serve_every_request(short_run) -> None:
    _, prepared, outcomes = short_run
    for outcome in outcomes.values():
        assert len(outcome.tokens) == len(prepared) and len(outcome.ttfts) == len(prepared)
        assert all(t >= 0 for _, t in outcome.ttfts)


def test_prefixroute_drains_before_it_removes_and_churns_less(short_run) -> None:
    scenario, _, outcomes = short_run
    ours, naive = outcomes[sim.OURS], outcomes[sim.NAIVE]
    labels = [t.action for t in ours.ticks]
    for i, label in enumerate(labels):
        if label == "scale-down":
            assert "drain" in labels[:i]  # the replica removed was drained first
    assert ours.replicas_moved < naive.replicas_moved
    summary = sim.summarise(ours, scenario, 5.0)
    assert set(summary["phases"]) == {"ramp", "diurnal", "hot tenant", "quiet"}
    assert summary["requests"] == len(ours.tokens) and 0 < summary["hit_rate"] < 1


def test_the_run_is_deterministic(short_run) -> None:
    scenario, prepared, outcomes = short_run
    again = sim.run(prepared, sim.Prefixroute(SETTINGS), SETTINGS, ENGINE, RoutingConfig(), startup_seconds=60)
    assert [(t.at, t.replicas) for t in again.ticks] == [(t.at, t.replicas) for t in outcomes[sim.OURS].ticks]
    assert again.ttfts == outcomes[sim.OURS].ttfts


def test_the_command_prints_ratios_and_writes_json_and_a_plot(tmp_path, capsys) -> None:
    out = tmp_path / "autoscale.json"
    argv = ["bench", "autoscale", "--minutes", "8", "--peak-rate", "4", "--json", str(out)]
    try:
        import matplotlib  # noqa: F401

        argv += ["--plot", str(tmp_path / "autoscale.png")]
    except ImportError:
        pass
    assert cli_main(argv) == 0
    printed = capsys.readouterr().out
    assert "prefixroute vs queue-only (same run): scale events x" in printed and "per phase" in printed
    doc = json.loads(out.read_text())
    assert [p["policy"] for p in doc["policies"]] == ["prefixroute", "queue-only"]
    assert {"scale_events", "replicas_moved", "mean_replicas", "ttft_p99", "hit_rate_minus"} <= doc["ratios"].keys()
    assert doc["run"]["settings"]["target_queue_depth"] == 2.0
    if "--plot" in argv:
        assert (tmp_path / "autoscale.png").stat().st_size > 10_000


def test_bad_arguments_are_one_line_and_status_2(capsys) -> None:
    assert cli_main(["bench", "autoscale", "--tenants", "1"]) == 2
    assert capsys.readouterr().err.strip() == "prefixroute bench: --tenants must be at least 2 and --minutes positive"
