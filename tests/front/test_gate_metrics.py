"""What the front door exports: refusals by reason, the waiting room read at scrape time, the
API keys' figures only when keys are in force, and no label that names a tenant or a key."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from prefixroute.front.gate_metrics import REASONS, GateMetrics

PREFIX = "prefixroute_test_"


def samples(registry: CollectorRegistry) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name.removeprefix(PREFIX), tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for sample in family.samples
        if not sample.name.endswith("_created")
    }


def test_each_refusal_counts_under_its_reason() -> None:
    registry = CollectorRegistry()
    metrics = GateMetrics(registry, PREFIX)
    metrics.rejected("overloaded")
    metrics.rejected("overloaded")
    metrics.rejected("unauthorized")
    found = samples(registry)
    assert {reason: found[("rejected_total", (("reason", reason),))] for reason in REASONS} == {
        "unauthorized": 1.0,
        "rate_limited_requests": 0.0,  # every reason is there from the start, at 0
        "rate_limited_tokens": 0.0,
        "overloaded": 2.0,
        "shed": 0.0,
    }


def test_an_unknown_reason_is_a_bug() -> None:
    with pytest.raises(KeyError):
        GateMetrics(CollectorRegistry(), PREFIX).rejected("tenant-a")


def test_the_wait_histogram_counts_what_waited() -> None:
    registry = CollectorRegistry()
    metrics = GateMetrics(registry, PREFIX)
    metrics.wait.observe(0.2)
    found = samples(registry)
    assert found[("admission_wait_seconds_count", ())] == 1.0
    assert found[("admission_wait_seconds_bucket", (("le", "0.1"),))] == 0.0
    assert found[("admission_wait_seconds_bucket", (("le", "0.25"),))] == 1.0


def test_the_waiting_room_and_the_keys_are_read_at_scrape_time() -> None:
    registry = CollectorRegistry()
    waiting, keys = [3], [(5, 1, 2)]
    GateMetrics(registry, PREFIX).attach(lambda: waiting[0], lambda: keys[0])
    found = samples(registry)
    assert found[("waiting_requests", ())] == 3.0
    assert (found[("api_keys", ())], found[("api_keys_reloads_total", ())]) == (5.0, 1.0)
    assert found[("api_keys_reload_errors_total", ())] == 2.0
    waiting[0], keys[0] = 0, (6, 2, 2)
    found = samples(registry)
    assert (found[("waiting_requests", ())], found[("api_keys", ())]) == (0.0, 6.0)


def test_without_api_keys_no_key_figures_are_exported() -> None:
    registry = CollectorRegistry()
    GateMetrics(registry, PREFIX).attach(lambda: 0, lambda: None)
    names = {name for name, _ in samples(registry)}
    assert "waiting_requests" in names
    assert not {n for n in names if n.startswith("api_keys")}


def test_no_label_names_a_tenant_or_a_key() -> None:
    registry = CollectorRegistry()
    metrics = GateMetrics(registry, PREFIX)
    metrics.attach(lambda: 1, lambda: (1, 0, 0))
    metrics.rejected("rate_limited_tokens")
    metrics.wait.observe(1.0)
    metrics.admitted(5, 0.1)
    metrics.shed(-1, "sheddable")
    labels = {name for _, pairs in samples(registry) for name, _ in pairs}
    assert labels <= {"reason", "le", "priority"}


def test_each_band_counts_what_it_admitted_shed_and_waited() -> None:
    registry = CollectorRegistry()
    metrics = GateMetrics(registry, PREFIX)
    bands = {10: 2, -1: 0}
    metrics.attach(lambda: 2, lambda: None, lambda: bands)
    metrics.admitted(10, 0.0)
    metrics.admitted(10, 0.3)
    metrics.shed(-1, "sheddable")
    metrics.shed(0, "queue-ttl")
    found = samples(registry)
    assert found[("priority_waiting_requests", (("priority", "10"),))] == 2.0
    assert found[("priority_waiting_requests", (("priority", "-1"),))] == 0.0
    assert found[("priority_admitted_total", (("priority", "10"),))] == 2.0
    assert found[("priority_wait_seconds_bucket", (("le", "0.25"), ("priority", "10")))] == 1.0
    assert found[("priority_shed_total", (("priority", "-1"), ("reason", "sheddable")))] == 1.0
    assert found[("priority_shed_total", (("priority", "0"), ("reason", "queue-ttl")))] == 1.0
    with pytest.raises(KeyError):
        metrics.shed(0, "tenant-a")


def test_each_known_objective_shows_its_band() -> None:
    registry = CollectorRegistry()
    objectives = {"chat": 10, "batch": -1}
    GateMetrics(registry, PREFIX).attach(lambda: 0, lambda: None, dict, lambda: objectives)
    found = samples(registry)
    assert found[("objective_priority", (("objective", "chat"),))] == 10.0
    assert found[("objective_priority", (("objective", "batch"),))] == -1.0
    objectives.pop("batch")  # read at each scrape: an objective deleted is gone from the next
    assert ("objective_priority", (("objective", "batch"),)) not in samples(registry)
