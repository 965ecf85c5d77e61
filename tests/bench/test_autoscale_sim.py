"""`bench autoscale`: the scenario, the queue-only baseline, and both policies over a short run."""

import heapq
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
    assert [p.name for p in s.phases()] == ["ramp", "diurnal", "hot tenant", "quiet"]
    assert quiet.end == 90 * 60
    assert s.rate(0) < s.rate(ramp.end - 1) == pytest.approx(s.base_peak, rel=0.01)
    assert s.rate((diurnal.start + diurnal.end) / 2) == pytest.approx(s.base_trough)
    assert s.hot_extra(hot.start) == s.hot_rate
    assert s.hot_extra(hot.start - 1) == s.hot_extra(quiet.start) == 0


def test_the_workload_is_fixed_by_its_seed_and_the_hot_tenant_appears_when_due() -> None:
    s = sim.Scenario(minutes=20)
    first, again = sim.workload(s, seed=3), sim.workload(s, seed=3)
    assert [r.at for r in first] == [r.at for r in again]
    assert [r.tenant for r in first] == [r.tenant for r in again]
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
    assert down.replicas == 2
    assert down.remove == ("engine-3", "engine-2")  # the newest go first


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
        assert len(outcome.tokens) == len(prepared)
        assert len(outcome.ttfts) == len(prepared)
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
    assert summary["requests"] == len(ours.tokens)
    assert 0 < summary["hit_rate"] < 1


def test_the_run_is_deterministic(short_run) -> None:
    _scenario, prepared, outcomes = short_run
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
    assert "prefixroute vs queue-only (same run): scale events x" in printed
    assert "per phase" in printed
    doc = json.loads(out.read_text())
    assert [p["policy"] for p in doc["policies"]] == ["prefixroute", "queue-only"]
    assert {"scale_events", "replicas_moved", "mean_replicas", "ttft_p99", "hit_rate_minus"} <= doc["ratios"].keys()
    assert doc["run"]["settings"]["target_queue_depth"] == 2.0
    if "--plot" in argv:
        assert (tmp_path / "autoscale.png").stat().st_size > 10_000


def test_bad_arguments_are_one_line_and_status_2(capsys) -> None:
    assert cli_main(["bench", "autoscale", "--tenants", "1"]) == 2
    assert capsys.readouterr().err.strip() == "prefixroute bench: --tenants must be at least 2 and --minutes positive"


def test_counter_rate_is_the_increase_per_second_since_the_oldest_sample_in_the_span() -> None:
    from collections import deque

    samples = deque([(0.0, 0, 0, 0), (10.0, 100, 200, 5), (20.0, 300, 500, 9)])
    assert sim.counter_rate(samples, 20.0, 10.0, 1) == 20.0  # (300 - 100) / 10 s
    assert sim.counter_rate(samples, 20.0, 100.0, 2) == 25.0  # (500 - 0) / 20 s
    assert sim.counter_rate(samples, 100.0, 10.0, 3) == 0.09  # none in the span: from the oldest kept
    assert sim.counter_rate(deque([(5.0, 1, 1, 1)]), 5.0, 10.0, 1) == 0.0  # no time has passed
    assert sim.counter_rate(deque(), 5.0, 10.0, 1) == 0.0


def test_order_replicas_starts_the_missing_ones_and_cancels_the_newest_first() -> None:
    pending: list[tuple[float, int]] = []
    assert sim.order_replicas(pending, serving=2, replicas=5, ready_at=60.0, order=0) == 3
    assert sorted(pending) == [(60.0, 1), (60.0, 2), (60.0, 3)]
    assert sim.order_replicas(pending, serving=2, replicas=3, ready_at=75.0, order=3) == 3  # overtaken
    assert sorted(pending) == [(60.0, 1)]
    assert sim.order_replicas(pending, serving=2, replicas=4, ready_at=90.0, order=3) == 4
    assert [heapq.heappop(pending) for _ in range(2)] == [(60.0, 1), (90.0, 4)]  # still a heap
    sim.order_replicas(pending, serving=3, replicas=1, ready_at=99.0, order=4)
    assert pending == []  # the serving ones above the count are the policy's to remove


class Scripted:
    """A policy that answers with the actions it is given, one per tick, and remembers what it saw."""

    name = "scripted"

    def __init__(self, *actions: sim.Action) -> None:
        self.actions = list(actions)
        self.seen: list[tuple[int, list[str]]] = []

    def decide(self, signals: FleetSignals, replicas: int, members, now: float) -> sim.Action:
        self.seen.append((replicas, list(members)))
        return self.actions.pop(0)


def test_a_tick_carries_out_the_decision_and_counts_what_moved() -> None:
    policy = Scripted(
        sim.Action(4, {}, (), "scale-up"),
        sim.Action(1, {"engine-0": 0.5}, ("engine-1",), "scale-down"),
    )
    cluster = sim.SimulatedCluster(policy, SETTINGS, ENGINE, RoutingConfig(), startup_seconds=60.0, replicas=2)
    cluster.add_engine(0.0)
    cluster.add_engine(0.0)
    cluster.tick(15.0)
    assert sorted(cluster.pending) == [(75.0, 1), (75.0, 2)]
    assert cluster.replicas == 4
    cluster.tick(30.0)
    assert policy.seen == [(2, ["engine-0", "engine-1"]), (4, ["engine-0", "engine-1"])]
    assert list(cluster.records) == ["engine-0"]
    assert cluster.pending == []
    assert cluster.replicas == 1
    out = cluster.out
    assert (out.scale_events, out.replicas_moved) == (2, 2 + 3)
    assert [(t.at, t.replicas, t.serving, t.action) for t in out.ticks] == [
        (15.0, 4, 2, "scale-up"),
        (30.0, 1, 1, "scale-down"),
    ]


def test_the_signals_are_each_serving_engines_gauges_and_rates() -> None:
    cluster = sim.SimulatedCluster(Scripted(), SETTINGS, ENGINE, RoutingConfig(), startup_seconds=60.0, replicas=1)
    cluster.add_engine(0.0)
    first = cluster.signals(0.0)
    assert [m.name for m in first.members] == ["engine-0"]
    assert first.ttft_p50 is None
    assert (first.members[0].waiting, first.members[0].request_rate) == (0, 0.0)
    cluster.records["engine-0"].finished = 30
    later = cluster.signals(15.0)
    assert later.members[0].request_rate == 2.0  # 30 completions over 15 s
