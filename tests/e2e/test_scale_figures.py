"""The pure figures of e2e/operator_scale.py: percentiles, Prometheus' histogram quantile,
samples from /metrics text, /proc readings and the JSON it writes."""

from __future__ import annotations

import json
import math

import pytest

from e2e import scale_figures as f

INF = math.inf

APISERVER = """\
# HELP apiserver_flowcontrol_dispatched_requests_total [BETA] Number of requests executed by API Priority and Fairness subsystem.
# TYPE apiserver_flowcontrol_dispatched_requests_total counter
apiserver_flowcontrol_dispatched_requests_total{flow_schema="e2e-operator-scale",priority_level="workload-low"} 120
apiserver_flowcontrol_dispatched_requests_total{flow_schema="service-accounts",priority_level="workload-low"} 9000
apiserver_flowcontrol_dispatched_requests_total{flow_schema="system-nodes",priority_level="system"} 77
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",verb="GET"} 5
"""

OPERATOR = """\
# TYPE prefixroute_operator_autoscale_tick_seconds histogram
prefixroute_operator_autoscale_tick_seconds_bucket{le="0.1"} 2.0
prefixroute_operator_autoscale_tick_seconds_bucket{le="1.0"} 8.0
prefixroute_operator_autoscale_tick_seconds_bucket{le="+Inf"} 10.0
prefixroute_operator_autoscale_tick_seconds_count 10.0
prefixroute_operator_autoscale_tick_seconds_sum 4.2
"""


def test_percentiles_interpolate_between_ranks_as_numpy_does() -> None:
    values = [5.0, 1.0, 3.0, 2.0, 4.0]
    assert f.percentile(values, 50) == 3.0
    assert f.percentile(values, 0) == 1.0
    assert f.percentile(values, 100) == 5.0
    assert f.percentile(values, 99) == pytest.approx(4.96)
    assert f.percentile([7.0], 99) == 7.0
    assert f.percentile([], 50) is None


def test_histogram_quantile_as_prometheus_estimates_it() -> None:
    buckets = {0.1: 2.0, 1.0: 8.0, INF: 10.0}
    assert f.histogram_quantile(0.5, buckets) == pytest.approx(0.1 + 0.9 * (5 - 2) / 6)
    assert f.histogram_quantile(0.1, buckets) == pytest.approx(0.05)  # the first bucket starts at 0
    assert f.histogram_quantile(0.99, buckets) == 1.0  # in the +Inf bucket: the highest finite bound
    assert f.histogram_quantile(0.5, {0.1: 0.0, INF: 0.0}) is None  # nothing counted
    assert f.histogram_quantile(0.5, {0.1: 1.0}) is None  # no +Inf bucket: not a histogram


def test_the_operators_requests_are_read_from_its_flow_schema_alone() -> None:
    assert f.total(APISERVER, f.APF_DISPATCHED, flow_schema="e2e-operator-scale") == 120
    assert f.total(APISERVER, f.APF_DISPATCHED) == 120 + 9000 + 77
    assert f.total(APISERVER, f.APF_DISPATCHED, flow_schema="nobody") == 0
    assert f.per_minute(120, 150, 30) == 60.0
    assert f.per_minute(1, 2, 0) == 0.0


def test_a_histogram_counted_between_two_readings() -> None:
    before = f.buckets(OPERATOR, "prefixroute_operator_autoscale_tick_seconds")
    assert before == {0.1: 2.0, 1.0: 8.0, INF: 10.0}
    after = {0.1: 2.0, 1.0: 18.0, INF: 20.0}
    assert f.bucket_increase(after, before) == {0.1: 0.0, 1.0: 10.0, INF: 10.0}


def test_a_histograms_series_of_one_label_value() -> None:
    text = """\
# TYPE prefixroute_operator_status_write_seconds histogram
prefixroute_operator_status_write_seconds_bucket{lane="watch",le="0.1"} 3.0
prefixroute_operator_status_write_seconds_bucket{lane="watch",le="+Inf"} 4.0
prefixroute_operator_status_write_seconds_bucket{lane="background",le="0.1"} 1.0
prefixroute_operator_status_write_seconds_bucket{lane="background",le="+Inf"} 9.0
"""
    name = "prefixroute_operator_status_write_seconds"
    assert f.buckets(text, name, lane="watch") == {0.1: 3.0, INF: 4.0}
    assert f.buckets(text, name) == {0.1: 4.0, INF: 13.0}


def test_proc_readings() -> None:
    status = "Name:\tprefixroute\nVmHWM:\t  204800 kB\nVmRSS:\t  102400 kB\nThreads:\t7\n"
    assert f.proc_memory_kib(status) == {"VmHWM": 204800, "VmRSS": 102400}
    # the command may hold spaces and parentheses; utime and stime are fields 14 and 15
    stat = "4242 (python3 (op) x) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 7 0 100 2000 300"
    assert f.proc_cpu_seconds(stat, 100) == 3.0
    assert f.load_average("6.52 7.01 5.40 3/412 99\n") == [6.52, 7.01, 5.4]


def test_the_machines_cpu_and_each_processs_share_of_it() -> None:
    stat = "cpu  600 100 300 5000 200 50 50 0 40 0\ncpu0 300 50 150 2500 100 25 25 0 20 0\n"
    assert f.machine_cpu_seconds(stat, 100) == (11.0, 63.0)  # guest (40) is inside user already
    before, after = {"etcd": 1.0, "operator": 2.0, "gone": 1.0}, {"etcd": 3.0, "operator": 5.0, "new": 9.0}
    assert f.cpu_shares(before, after, (8.0, 20.0)) == {"etcd": 2.0, "operator": 3.0, "other": 3.0}
    assert f.cpu_shares(before, after, (4.0, 20.0))["other"] == 0.0  # readings a tick apart never go below zero


def test_the_json_has_every_figure_rounded(tmp_path) -> None:
    result = {key: 1.23456789 for key in f.REQUIRED} | {"models": 10, "load": [1.23456, math.nan]}
    path = tmp_path / "r.json"
    f.write_json(path, result)
    written = json.loads(path.read_text())
    assert written["reconcile_p99_s"] == 1.235
    assert written["models"] == 10
    assert written["load"] == [1.235, None]
    del result["ring_update_p99_s"]
    with pytest.raises(ValueError, match="ring_update_p99_s"):
        f.write_json(path, result)
