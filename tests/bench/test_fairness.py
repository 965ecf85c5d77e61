"""`bench fairness`: the workload (quiet tenants and a noisy one), the simulated runs, the report."""

import io
import json
from collections import Counter

import pytest

from prefixroute.bench.errors import BenchError
from prefixroute.bench.fairness import NOISY, FairRun, Scenario, print_table, simulate_run, workload
from prefixroute.bench.simulate import Prepared, prepare
from prefixroute.cli import main
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.routing.config import RoutingConfig

SMALL = Scenario(quiet_tenants=2, quiet_rate=1.0, noisy_factor=3.0, seconds=200.0, system_tokens=64, question_tokens=8)
ENGINE = EngineConfig(model="m", kv_blocks=2000, max_running=4, latency=LatencyModel(20_000.0, 200.0))


def test_each_tenant_arrives_at_its_own_rate_in_time_order():
    requests = workload(SMALL, seed=1)
    counts = Counter(r.tenant for r in requests)
    assert set(counts) == {"quiet-0", "quiet-1", NOISY}
    assert [r.at for r in requests] == sorted(r.at for r in requests)
    assert requests[-1].at < SMALL.seconds
    for quiet in ("quiet-0", "quiet-1"):
        assert 150 <= counts[quiet] <= 250  # 1/s for 200 s
        assert 2.5 <= counts[NOISY] / counts[quiet] <= 3.5  # three times that


def test_the_baseline_has_exactly_the_quiet_requests_of_the_noisy_runs():
    """The ratio to the baseline compares the same quiet requests, with and without the noise."""
    alone = workload(SMALL, seed=4, noisy=False)
    noisy = workload(SMALL, seed=4, noisy=True)
    quiet = [r for r in noisy if r.tenant != NOISY]
    assert NOISY not in {r.tenant for r in alone}
    assert [(r.at, r.tenant, r.body("m")) for r in alone] == [(r.at, r.tenant, r.body("m")) for r in quiet]


def test_a_tenant_repeats_its_system_prompt_with_a_new_question_each_time():
    requests = workload(SMALL, seed=2)
    systems: dict[str, set[str]] = {}
    questions = set()
    for r in requests:
        system, user = r.body("m")["messages"]
        assert (system["role"], user["role"]) == ("system", "user")
        assert len(system["content"]) == SMALL.system_tokens * 4
        assert len(user["content"]) == SMALL.question_tokens * 4
        systems.setdefault(r.tenant, set()).add(system["content"])
        questions.add(user["content"])
    assert all(len(s) == 1 for s in systems.values())
    assert len(set.union(*systems.values())) == 3
    assert len(questions) > 0.99 * len(requests)
    assert all(r.output_tokens == SMALL.output_tokens and r.kind == "chat" for r in requests)


def test_a_row_reports_percentiles_and_the_ratio_to_the_quiet_baseline():
    baseline = FairRun("quiet alone", quiet=[1.0, 2.0, 3.0], noisy=[], served=3)
    run = FairRun("noisy", quiet=[2.0, 4.0, 6.0], noisy=[10.0], served=4, refused=1)
    assert run.row(baseline) == {
        "run": "noisy",
        "served": 4,
        "refused": 1,
        "quiet_p50": 4.0,
        "quiet_p99": 5.96,
        "noisy_p50": 10.0,
        "noisy_p99": 10.0,
        "quiet_p50_x": 2.0,
        "quiet_p99_x": 2.0,
    }
    assert baseline.row(None)["noisy_p50"] is None
    assert "quiet_p50_x" not in baseline.row(None)
    assert "quiet_p50_x" not in run.row(FairRun("empty", [], []))


def test_a_simulated_run_times_every_request_and_files_it_under_its_tenant():
    requests = workload(SMALL, seed=3)
    run = simulate_run(prepare(requests, RoutingConfig(), ENGINE), "r", 2, RoutingConfig(), ENGINE, per_member=0)
    noisy = sum(r.tenant == NOISY for r in requests)
    assert (len(run.noisy), len(run.quiet), run.served, run.refused) == (noisy, len(requests) - noisy, len(requests), 0)
    assert all(t > 0 for t in run.quiet + run.noisy)


def test_a_request_the_engine_refused_stops_the_run():
    refused = Prepared(0.0, None, (), 0, 1, error="prompt too long")
    with pytest.raises(BenchError, match="request 0 was not accepted: prompt too long"):
        simulate_run([refused], "r", 2, RoutingConfig(), ENGINE, per_member=0)


def test_the_table_lines_up_and_shows_missing_figures_as_dashes():
    stream = io.StringIO()
    print_table([{"run": "quiet alone", "served": 3, "quiet_p50": 1.5}, {"run": "x", "served": 10}], stream)
    header, rule, first, second, note = stream.getvalue().splitlines()
    assert len({len(header), len(rule), len(first), len(second)}) == 1
    assert first.split() == ["quiet", "alone", "3", "-", "1.5", "-", "-", "-", "-", "-"]
    assert note.startswith("(x = the quiet tenants' TTFT over theirs when alone")


def test_the_command_runs_three_simulations_against_the_quiet_baseline(tmp_path, capsys):
    out = tmp_path / "f.json"
    argv = ["bench", "fairness", "--quiet-tenants", "1", "--quiet-rate", "0.5", "--noisy-factor", "4"]
    assert main([*argv, "--seconds", "20", "--replicas", "2", "--json", str(out)]) == 0
    saved = json.loads(out.read_text())
    assert [r["run"] for r in saved["rows"]] == ["quiet alone", "noisy, no fair sharing", "noisy, fair sharing"]
    assert saved["rows"][0]["quiet_p50_x"] == 1.0
    assert saved["run"]["max_in_flight_per_member"] == saved["run"]["max_running"] == 8  # the engines' slots
    assert "noisy, fair sharing" in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--quiet-tenants", "--quiet-rate", "--noisy-factor", "--seconds"])
def test_a_scenario_that_is_not_positive_is_one_line_and_status_2(flag, capsys):
    assert main(["bench", "fairness", flag, "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("prefixroute bench: --quiet-tenants, --quiet-rate")
    assert err.count("\n") == 1
