"""`bench fleet`: the session workload at several fleet sizes, with the reference and the ceiling."""

import json

import pytest

from prefixroute.cli import main


def test_sweep_prints_every_size_and_strategy_with_ratios_and_writes_json(tmp_path, capsys):
    out = tmp_path / "fleet.json"
    code = main(
        [
            "bench",
            "fleet",
            "--sizes",
            "2,4",
            "--requests-per-replica",
            "12",
            "--prefix-tokens",
            "256",
            "--json",
            str(out),
        ]
    )
    assert code == 0
    rows = json.loads(out.read_text())
    names = {"round-robin", "prefix-hash", "prefix-cache", "longest-prefix"}
    assert {(r["replicas"], r["strategy"]) for r in rows} == {(n, s) for n in (2, 4) for s in names}
    for row in rows:
        assert row["errors"] == 0
        assert row["requests"] > 0
        assert 0 < row["hit_rate"] <= row["ceiling"] + 1e-9  # nothing beats one unlimited cache
        baseline = next(r for r in rows if r["replicas"] == row["replicas"] and r["strategy"] == "round-robin")
        assert row["ttft_p99_vs_rr"] == pytest.approx(row["ttft_p99"] / baseline["ttft_p99"], abs=1e-3)
    printed = capsys.readouterr().out
    assert "longest-prefix" in printed
    assert "ceiling" in printed


def test_bad_sizes_are_one_clear_line(capsys):
    assert main(["bench", "fleet", "--sizes", "8,x"]) == 2
    assert "--sizes" in capsys.readouterr().err
