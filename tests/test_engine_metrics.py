"""The engine metric names every reader takes: each family's names are what its engines export."""

from dataclasses import astuple
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from prefixroute.engine_metrics import FAMILIES, PRIORITY_LABEL, SGLANG, TOTAL_ONLY, VLLM, EngineMetricNames
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_sim.driver import EngineDriver
from prefixroute.engine_sim.metrics import EngineMetrics

SGLANG_PAGE = (Path(__file__).resolve().parent / "fixtures" / "sglang_metrics.txt").read_text()


def names(family: EngineMetricNames) -> list[str]:
    """Every metric name of the family (the fields after `family`, kv_usage's several included)."""
    out: list[str] = []
    for value in astuple(family)[1:]:
        out.extend(value if isinstance(value, tuple) else (value,))
    return out


def samples(page: str) -> list:
    return [s for family in text_string_to_metric_families(page) for s in family.samples]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.family)
def test_every_name_is_in_its_familys_namespace(family: EngineMetricNames) -> None:
    assert all(name.startswith(family.family + ":") for name in names(family))
    assert family.gauges[:2] == (family.waiting, family.running)
    assert set(family.kv_usage) <= set(family.gauges)


def test_an_sglang_engine_exports_every_sglang_name() -> None:
    exported = {s.name for s in samples(SGLANG_PAGE)}
    assert set(names(SGLANG)) <= exported


def test_engine_sim_exports_every_vllm_name() -> None:
    """engine-sim stands in for vLLM: whatever reads a vLLM engine reads it unchanged."""
    page = EngineMetrics(EngineDriver(EngineConfig(model="m")), "m").render().decode()
    exported = {s.name for s in samples(page)}
    assert set(names(VLLM)) <= exported


@pytest.mark.parametrize("gauge", sorted(TOTAL_ONLY))
def test_the_total_only_matcher_keeps_the_one_series_that_is_the_sum_of_the_breakdown(gauge: str) -> None:
    label, value = TOTAL_ONLY[gauge].split("=")
    assert label == PRIORITY_LABEL
    series = [s for s in samples(SGLANG_PAGE) if s.name == gauge]
    total = [s for s in series if s.labels.get(label) == value.strip('"')]
    breakdown = [s for s in series if s.labels.get(label)]
    assert len(total) == 1
    assert breakdown
    assert total[0].value == sum(s.value for s in breakdown)  # summing all would count each request twice
