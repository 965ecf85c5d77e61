"""``python -m e2e.operator_scale`` at a small size on the session's cluster: five models of
fakes, a short churn and idle spell, and a JSON with every figure, each of a sane size. The
figures themselves are for docs/operator.md (issue #27): nothing here holds them to a goal."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from e2e import operator_scale, scale_figures
from e2e.conftest import Cluster
from e2e.kube import Kube


def test_a_small_run_writes_every_figure(
    cluster: Cluster, kube: Kube, operator: dict[str, Any], tmp_path: Path, say: Callable[[str], None]
) -> None:
    settings = operator_scale.Settings(
        models=5,
        replicas=2,
        churn_rate=2.0,
        churn_seconds=6.0,
        settle_seconds=2.0,
        idle_seconds=10.0,
        interval_seconds=5,
    )
    result = operator_scale.run(kube, cluster.kubectl, cluster.state, cluster.prometheus, settings, say=say)
    path = tmp_path / "scale.json"
    scale_figures.write_json(path, result)
    r = json.loads(path.read_text())

    assert scale_figures.missing(r) == []
    assert (r["models"], r["replicas"]) == (5, 2)
    assert 0 < r["ready_seconds"] < 600
    assert 0 < r["reconcile_p50_s"] <= r["reconcile_p99_s"] <= r["ready_seconds"]
    assert r["reconcile_duration_count"] >= 5
    churn = r["churn"]
    assert churn["ready"] == churn["unready"]  # every pod made not Ready is Ready again at the end
    # 2 changes a second for 6 s, then the pods still down made Ready (however many timing left)
    assert churn["delete"] + churn["unready"] <= 12 <= r["churn_changes"]
    assert r["ring_updates"] == r["churn_changes"]
    assert r["ring_updates_unsettled"] == 0
    assert 0 <= r["ring_update_p50_s"] <= r["ring_update_p99_s"] <= r["ring_update_max_s"] < 120
    assert r["ring_joins"] >= 1  # every deleted engine's replacement joined
    assert 20 < r["operator_rss_mib"] < 4096
    assert r["operator_rss_end_mib"] <= r["operator_rss_mib"]
    assert 0 < r["operator_cpu_seconds"] < 600
    assert r["idle_cpu_seconds_per_min"] >= 0
    assert 0 <= r["idle_api_requests_per_min"] < 10_000
    assert r["autoscale_tick_count"] > 0
    assert 0 < r["autoscale_tick_p50_s"] <= r["autoscale_tick_p99_s"]
    assert r["autoscale_read_count"] > 0
    assert r["autoscale_read_p50_s"] <= r["autoscale_read_p99_s"]
    # where a ring update's time goes: the operator's own histograms and everyone's CPU under churn
    assert r["op_ring_update_count"] >= 1
    assert r["op_status_write_count"] >= 1
    assert r["op_loop_lag_count"] >= 1
    assert {"operator", "this run", "other"} <= set(r["churn_cpu_seconds"])
    assert 0 < r["churn_machine_busy"] <= 1
    assert r["metrics_available"] == {"True/SignalsFresh": 5}  # the stand-in's metrics reached every autoscaler
    assert len(r["load_average_start"]) == len(r["load_average_end"]) == 3
    assert not kube.get("/api/v1/nodes", labelSelector="prefixroute.io/scale-node")["items"]  # cleaned up
