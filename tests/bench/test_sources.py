"""Where a bench command's requests come from, and how its results go out."""

import json
from argparse import Namespace

import pytest

from prefixroute.bench import plot as plot_module
from prefixroute.bench import synthetic
from prefixroute.bench.results import RunResult
from prefixroute.bench.sources import emit, load_workload, source_label
from prefixroute.bench.workload import BenchRequest


def workload_args(**overrides) -> Namespace:
    values = {"trace": None, "synthetic": None, "requests": None, "rate": None, "seed": 0, "speed": 1.0}
    return Namespace(**{**values, **overrides})


def test_a_trace_is_read_cut_to_its_first_requests_and_sped_up(small_trace):
    requests = load_workload(workload_args(trace=str(small_trace), requests=5, speed=2.0))
    assert [r.at for r in requests] == [0.0, 0.125, 0.25, 0.375, 0.5]  # every 250 ms, twice as fast


@pytest.fixture
def generated(monkeypatch) -> dict:
    """The generator's arguments, with one request made per call."""
    seen: dict = {}

    def generator(count, **kwargs):
        seen.update(count=count, **kwargs)
        return [BenchRequest(float(i), "completion", dict, 1) for i in range(count)]

    for name in ("tenants", "conversations"):
        monkeypatch.setitem(synthetic.GENERATORS, name, generator)
    return seen


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ({"synthetic": "tenants"}, {"count": 1000, "seed": 0}),
        ({"synthetic": "tenants", "requests": 20, "rate": 8.0, "seed": 3}, {"count": 20, "seed": 3, "rate": 8.0}),
        ({"synthetic": "conversations"}, {"count": 1000, "seed": 0, "replicas": 4}),
        (
            {"synthetic": "conversations", "replicas": 8, "kv_blocks": 1000, "block_tokens": 16},
            {"count": 1000, "seed": 0, "replicas": 8, "cache_tokens": 16_000},
        ),
        ({"synthetic": "tenants", "replicas": 8, "kv_blocks": 1000, "block_tokens": 16}, {"count": 1000, "seed": 0}),
    ],
)
def test_a_generated_workload_is_sized_by_the_commands_flags(generated, args, expected):
    load_workload(workload_args(**args))
    assert generated == expected


def test_source_label_names_the_trace_or_the_generator():
    assert source_label(workload_args(trace="t.jsonl")) == "t.jsonl"
    assert source_label(workload_args(synthetic="sessions")) == "synthetic:sessions"


def result(label: str, ttft: float) -> RunResult:
    return RunResult(label, "simulate", requests=2, prompt_tokens=100, cached_tokens=50, ttfts=[ttft, ttft])


def emit_args(**overrides) -> Namespace:
    return Namespace(**{"baseline": None, "json_out": None, "plot": None, **overrides})


def test_the_table_compares_with_round_robin_by_default(tmp_path, capsys):
    out = tmp_path / "r.json"
    results = [result("prefix-cache", 0.5), result("simulated/round-robin", 2.0)]
    emit(results, emit_args(json_out=str(out)), {"mode": "simulate"}, "title")
    assert "ratio to simulated/round-robin" in capsys.readouterr().out
    rows = json.loads(out.read_text())
    assert [r["ttft_p50_vs_baseline"] for r in rows] == [0.25, 1.0]
    assert all(r["run"] == {"mode": "simulate"} for r in rows)


def test_a_named_baseline_wins_and_without_one_there_are_no_ratios(capsys):
    results = [result("prefix-cache", 0.5), result("round-robin", 2.0)]
    emit(results, emit_args(baseline="prefix-cache"), {}, "title")
    assert "ratio to prefix-cache" in capsys.readouterr().out
    emit([result("a", 1.0), result("b", 1.0)], emit_args(), {}, "title")
    assert "ratio to" not in capsys.readouterr().out


def test_a_plot_is_drawn_only_when_asked_for(monkeypatch):
    drawn = []
    monkeypatch.setattr(plot_module, "plot", lambda results, path, title: drawn.append((path, title)))
    results = [result("round-robin", 1.0)]
    emit(results, emit_args(), {}, "no plot")
    emit(results, emit_args(plot="out.png"), {}, "a plot")
    assert drawn == [("out.png", "a plot")]
