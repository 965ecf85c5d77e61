import math

import pytest

from prefixroute.bench.results import RunResult, percentile, with_ratios


def test_percentile_interpolates():
    assert percentile([1, 2, 3, 4], 50) == 2.5
    assert percentile([5], 99) == 5
    assert math.isnan(percentile([], 50))


def test_hit_rate_and_imbalance():
    r = RunResult("x", "simulate", prompt_tokens=200, cached_tokens=50, per_replica={"a": 30, "b": 10})
    assert r.hit_rate == 0.25
    assert r.imbalance == pytest.approx(1.5)
    assert RunResult("idle", "simulate").imbalance == 1.0


def test_ratios_against_the_baseline_in_the_same_run():
    base = RunResult("round-robin", "simulate", requests=2, prompt_tokens=10, cached_tokens=1, ttfts=[1.0, 3.0])
    better = RunResult("prefix-cache", "simulate", requests=2, prompt_tokens=10, cached_tokens=5, ttfts=[0.5, 1.5])
    rows = with_ratios([base.summary(), better.summary()], "round-robin")
    assert rows[1]["ttft_p50_vs_baseline"] == 0.5
    assert rows[1]["hit_rate_minus_baseline"] == pytest.approx(0.4)
    assert rows[0]["ttft_p50_vs_baseline"] == 1.0
