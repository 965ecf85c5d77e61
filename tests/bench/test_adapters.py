"""`bench adapters`: adapter-aware routing against blind prefix-cache and round-robin over the
same simulated engines. Small sizes; the assertions are properties, never times."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from prefixroute.bench.adapter_workload import AdapterMix, load_adapter_trace, placement
from prefixroute.bench.adapters import BASELINE, TARGETS, print_table, row, run_target
from prefixroute.bench.fleet_sim import AdapterSetup
from prefixroute.bench.simulate import prepare, replica_names
from prefixroute.cli import main as cli_main
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.routing.config import RoutingConfig
from tests.bench.conftest import write_trace

ENGINE = EngineConfig(model="m", kv_blocks=4000, latency=LatencyModel(20_000.0, 100.0))
MIX = AdapterMix(adapters=12, exponent=1.0, base_share=0.1, seed=1)
REPLICAS = 4


def conversations_trace(tmp_path: Path, conversations: int = 61, turns: int = 3) -> Path:
    """Conversations of a few turns, each turn extending the last by one 512-token block (a
    number of conversations prime to the replicas', so round-robin does not keep a
    conversation on one replica by accident)."""
    rows = []
    for turn in range(turns):
        for c in range(conversations):
            root = 1000 * c
            rows.append(
                {
                    "timestamp": (turn * conversations + c) * 40,
                    "input_length": 512 * (turn + 1) + 30,
                    "output_length": 4,
                    "hash_ids": [root + k for k in range(turn + 1)],
                }
            )
    return write_trace(tmp_path / "adapters.jsonl", rows)


@pytest.fixture
def runs(tmp_path: Path) -> dict[str, object]:
    requests = load_adapter_trace(conversations_trace(tmp_path), MIX)
    routing = RoutingConfig()
    prepared = prepare(requests, routing, ENGINE)
    setup = AdapterSetup(1, frozenset(MIX.names), 0.05)  # one slot each: every switch is a load
    return {t.label: run_target(prepared, t, REPLICAS, routing, ENGINE, setup) for t in TARGETS}


def test_aware_loads_fewer_adapters_than_blind_on_a_skewed_workload(runs) -> None:
    aware, blind, baseline = runs["prefix-cache+adapters"], runs["prefix-cache"], runs[BASELINE]
    assert aware.requests == blind.requests == baseline.requests == 183
    assert 0 < aware.adapter_loads < blind.adapter_loads
    assert aware.adapter_loads < baseline.adapter_loads
    assert blind.hit_rate > baseline.hit_rate  # turns still find their conversation's prefix


def test_a_row_holds_the_ratios_to_the_baseline_of_the_same_run(runs) -> None:
    baseline = row(runs[BASELINE], runs[BASELINE])
    assert baseline["ttft_p50_vs_baseline"] == baseline["adapter_loads_per_min_vs_baseline"] == 1.0
    aware = row(runs["prefix-cache+adapters"], runs[BASELINE])
    assert aware["adapter_loads_per_min_vs_baseline"] == pytest.approx(
        aware["adapter_loads_per_min"] / baseline["adapter_loads_per_min"], rel=0.01
    )


def test_a_placed_adapter_is_served_only_where_it_is_registered(tmp_path: Path) -> None:
    requests = load_adapter_trace(conversations_trace(tmp_path, conversations=30), MIX)
    prepared = prepare(requests, RoutingConfig(), ENGINE)
    placed = placement(MIX, replica_names(REPLICAS), 1)
    setup = AdapterSetup(2, frozenset(MIX.names), 0.05, placed)
    for target in TARGETS:
        result = run_target(prepared, target, REPLICAS, RoutingConfig(), ENGINE, setup)
        assert result.requests == len(prepared)
        # Each adapter on one replica, one load at least per adapter asked for there.
        asked = {r.adapter for r in requests if r.adapter is not None}
        assert result.adapter_loads >= len(asked)


def test_the_command_prints_the_table_and_writes_json(tmp_path: Path, capsys) -> None:
    trace = conversations_trace(tmp_path, conversations=10, turns=2)
    out = tmp_path / "adapters.json"
    argv = ["bench", "adapters", "--trace", str(trace), "--replicas", "2", "--adapters", "5", "--placed", "1"]
    assert cli_main([*argv, "--json", str(out), "--kv-blocks", "4000"]) == 0
    printed = capsys.readouterr().out
    for label in ("round-robin", "prefix-cache+adapters", "prefix-cache/placed"):
        assert label in printed
    rows = json.loads(out.read_text())
    assert [r["target"] for r in rows][:3] == [t.label for t in TARGETS]
    assert len(rows) == 6


def test_the_table_names_its_baseline(runs, capsys) -> None:
    import sys

    print_table([row(r, runs[BASELINE]) for r in runs.values()], sys.stdout)
    assert "ratio to round-robin" in capsys.readouterr().out


def test_live_runs_the_same_targets_through_processes_and_prints_the_same_table(
    tmp_path: Path, capsys, monkeypatch
) -> None:
    from prefixroute.bench import adapters_live
    from prefixroute.bench.results import RunResult

    seen: dict[str, object] = {}

    def run_live(args, requests, names, targets, layouts):  # the processes stood in for: their figures
        seen.update(requests=len(requests), names=list(names), targets=[t.label for t in targets])
        seen["layouts"] = [(suffix, None if held is None else sorted(held)) for suffix, held in layouts]
        return [
            [
                RunResult(t.label + suffix, "replay", requests=2, prompt_tokens=100, cached_tokens=10 * (i + 1),
                          ttfts=[1.0, 2.0], duration_s=60.0, adapter_loads=(6 - 2 * i) * (n + 1), host_load=(1.5, 2.5))
                for i, t in enumerate(targets)
            ]
            for n, (suffix, _) in enumerate(layouts)
        ]  # fmt: skip

    monkeypatch.setattr(adapters_live, "run_live", run_live)
    trace = conversations_trace(tmp_path, conversations=10, turns=2)
    out = tmp_path / "live.json"
    argv = ["bench", "adapters", "--live", "--trace", str(trace), "--adapters", "5", "--json", str(out)]
    assert cli_main([*argv, "--placed", "2", "--replicas", "3"]) == 0
    assert seen == {
        "requests": 20,
        "names": list(AdapterMix(5).names),
        "targets": [t.label for t in TARGETS],
        "layouts": [("", None), ("/placed", ["engine-0", "engine-1", "engine-2"])],  # the simulated placement's
    }
    assert "ratio to round-robin" in capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [r["target"] for r in rows] == [t.label + s for s in ("", "/placed") for t in TARGETS]
    assert [r["adapter_loads_per_min"] for r in rows] == [6.0, 4.0, 2.0, 12.0, 8.0, 4.0]
    assert rows[2]["adapter_loads_per_min_vs_baseline"] == 0.333
    assert rows[5]["adapter_loads_per_min_vs_baseline"] == 0.333  # against the placed round-robin, not the first
    assert rows[2]["hit_rate_vs_baseline"] == 3.0
    assert rows[0]["router_ms_p50"] is None  # live: the router's time is in the client's TTFT
    assert rows[0]["host_load_1m"] == [1.5, 2.5]
