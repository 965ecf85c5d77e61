"""Reading Prometheus text with prometheus_client's parser: sums over label sets, label
filters and groupings, types, and the label values a hand-written line parser gets wrong."""

import math

from prefixroute.bench import prom

TEXT = """\
# HELP vllm:prefix_cache_hits Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 32.0
vllm:prefix_cache_hits_total{engine="1",model_name="m"} 16.0
vllm:prefix_cache_queries_total 100
vllm:request_success_total{finished_reason="length"} 3
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="a } b",engine="0"} 2 1700000000000
vllm:num_requests_running{model_name="say \\"hi\\"",engine="1"} 5
vllm:num_requests_running{model_name="m",engine="2"} NaN
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{le="0.1"} 1
vllm:time_to_first_token_seconds_bucket{le="+Inf"} 4
vllm:time_to_first_token_seconds_count 4
vllm:time_to_first_token_seconds_sum 2.5
"""


def test_parse_sums_adds_label_sets_and_zero_fills():
    assert prom.parse_sums(TEXT) == {prom.HITS: 48.0, prom.QUERIES: 100.0, prom.SUCCESS: 3.0}
    assert prom.parse_sums("", (prom.HITS,)) == {prom.HITS: 0.0}


def test_total_filters_on_labels_and_skips_nan():
    found = prom.samples(TEXT)
    assert prom.total(found, "vllm:num_requests_running") == 7.0  # the NaN sample is skipped
    assert prom.total(found, "vllm:num_requests_running", model_name="a } b") == 2.0
    assert prom.total(found, "vllm:num_requests_running", model_name='say "hi"') == 5.0
    assert prom.total(found, "vllm:prefix_cache_hits_total", engine="1") == 16.0
    assert prom.total(found, "vllm:prefix_cache_hits_total", engine="9") == 0.0
    assert prom.total(found, "vllm:time_to_first_token_seconds_count") == 4.0
    assert not math.isnan(prom.total(found, "absent"))


def test_by_label_groups_and_names_a_missing_label_empty():
    found = prom.samples(TEXT)
    assert prom.by_label(found, "vllm:prefix_cache_hits_total", "engine") == {"0": 32.0, "1": 16.0}
    assert prom.by_label(found, "vllm:prefix_cache_queries_total", "engine") == {"": 100.0}


def test_types_by_family():
    kinds = prom.types(TEXT)
    assert kinds["vllm:prefix_cache_hits"] == "counter"
    assert kinds["vllm:num_requests_running"] == "gauge"
    assert kinds["vllm:time_to_first_token_seconds"] == "histogram"
