"""`bench peers --seeds N`, live: engine-sims and our router started for real, every target
replayed on each seed's workload, the means printed over the seeds."""

from __future__ import annotations

import json

import pytest

from prefixroute.cli import main
from prefixroute.processes import free_port

LIVE = ["--replicas", "2", "--ours", "prefix-cache", "--sglang", "", "--vllm-router", "", "--epp", ""]


def test_each_seed_is_replayed_through_every_target_and_read_beside_one_router(tmp_path, capsys):
    out = tmp_path / "seeds.json"
    flags = ["--synthetic", "tenants", "--requests", "8", "--seed", "4", "--seeds", "2", "--routers", "1,2"]
    runs = ["--peers", "all", "--base-port", str(free_port()), "--run-dir", str(tmp_path / "logs"), "--json", str(out)]
    assert main(["bench", "peers", *flags, *LIVE, *runs]) == 0
    document = json.loads(out.read_text())
    assert document["seeds"] == [4, 5]
    one, two = "prefixroute/prefix-cache approximate x1", "prefixroute/prefix-cache approximate x2 peers:all"
    assert [[r["strategy"] for r in run] for run in document["per_seed"]] == [[one, two], [one, two]]
    assert all(r["requests"] == 8 and r["errors"] == 0 for run in document["per_seed"] for r in run)
    means = {row["label"]: row for row in document["means"]}
    assert means[two]["baseline"] == one
    assert means[two]["ttft_p99"] == pytest.approx(sum(run[1]["ttft_p99"] for run in document["per_seed"]) / 2)
    assert sorted(p.name for p in (tmp_path / "logs").iterdir() if p.is_dir()) == ["seed-4", "seed-5"]
    for seed, run in zip((4, 5), document["per_seed"], strict=True):
        assert json.loads((tmp_path / "logs" / f"seed-{seed}" / "summaries.json").read_text()) == run
    assert "over 2 seeds (4..5)" in capsys.readouterr().out


def test_seeds_refuse_a_simulation_beside_them_in_one_line(capsys):
    assert main(["bench", "peers", "--synthetic", "tenants", "--seeds", "2", "--simulate", *LIVE]) == 2
    err = capsys.readouterr().err
    assert "--simulate runs beside one workload" in err
    assert err.count("\n") == 1
