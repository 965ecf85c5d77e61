"""--inference-objectives: the priorities of a pool's GIE InferenceObjectives, read from the API
(a fake API edge here; e2e/test_gateway.py reads real objects through the picker's Role)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from prefixroute.epp.objectives import InferenceObjectives, pool_priorities
from prefixroute.epp.settings import EppSettings
from prefixroute.front.gate import GateSettings, TenantGate


def objective(name: str, pool: str = "llama-pool", priority: Any = None, **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"poolRef": {"group": "inference.networking.k8s.io", "name": pool}}
    if priority is not None:
        spec["priority"] = priority
    meta: dict[str, Any] = {"name": name, **extra}
    return {"metadata": meta, "spec": spec}


def test_only_the_pools_live_objectives_count_and_no_priority_is_the_default_band() -> None:
    objects = [
        objective("chat", priority=10),
        objective("batch", priority=-1),
        objective("plain"),  # GIE's default band
        objective("theirs", pool="other-pool", priority=5),
        objective("leaving", priority=3, deletionTimestamp="2026-01-01T00:00:00Z"),
        objective("odd", priority="high"),  # not an integer: the API's schema forbids it; never trusted
        objective("flag", priority=True),
        {
            "metadata": {"name": "elsewhere"},
            "spec": {"priority": 1, "poolRef": {"group": "x.io", "name": "llama-pool"}},
        },
    ]
    assert pool_priorities(objects, "llama-pool") == {"chat": 10, "batch": -1, "plain": 0}
    # A poolRef without a group is GIE's default group.
    assert pool_priorities([{"metadata": {"name": "a"}, "spec": {"priority": 2, "poolRef": {"name": "p"}}}], "p") == {
        "a": 2
    }


class FakeEdge:
    def __init__(self) -> None:
        self.items: list[dict[str, Any]] | None = []
        self.fail: Exception | None = None
        self.reads = 0

    def objectives(self) -> Sequence[Mapping[str, Any]] | None:
        self.reads += 1
        if self.fail is not None:
            raise self.fail
        return self.items


async def test_the_follower_applies_changes_only_and_keeps_them_through_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    edge = FakeEdge()
    edge.items = [objective("chat", priority=10)]
    applied: list[dict[str, int]] = []
    follower = InferenceObjectives("serving", "llama-pool", interval=3600, edge_factory=lambda: edge)
    caplog.set_level(logging.INFO, "prefixroute.epp.objectives")
    await follower.start(applied.append)
    try:
        assert applied == [{"chat": 10}]
        await follower.poll(applied.append)
        assert len(applied) == 1  # nothing changed, nothing applied
        edge.items.append(objective("batch", priority=-1))
        await follower.poll(applied.append)
        assert applied[-1] == {"chat": 10, "batch": -1}
        edge.fail = ConnectionError("API server down")
        await follower.poll(applied.append)
        await follower.poll(applied.append)
        assert len(applied) == 2  # the last mapping stays
        assert sum("keeping the last" in r.getMessage() for r in caplog.records) == 1  # said once
        edge.fail, edge.items = None, None  # the CRD was removed
        await follower.poll(applied.append)
        assert applied[-1] == {}
        assert any("not installed" in r.getMessage() for r in caplog.records)
    finally:
        await follower.stop()


def test_the_gate_takes_the_api_mapping_under_the_flags_entries() -> None:
    gate = TenantGate(GateSettings(objective_priorities="batch=-5"), state=None)  # type: ignore[arg-type]
    gate.use_api_objectives({"chat": 10, "batch": -1})
    assert gate.objectives == {"chat": 10, "batch": -5}
    assert gate.identify_unkeyed({"x-gateway-inference-objective": "chat"}).priority == 10
    assert gate.identify_unkeyed({"x-gateway-inference-objective": "batch"}).priority == -5
    gate.use_api_objectives({})  # every object deleted: the flag's entries remain
    assert gate.objectives == {"batch": -5}


def test_the_pool_followed_defaults_to_inference_pool_and_is_checked() -> None:
    fixed = ("http://10.0.0.1:8000",)
    assert EppSettings(backends=fixed, inference_objectives="serving/llama-pool").objectives_of == "serving/llama-pool"
    assert EppSettings(inference_pool="serving/llama-pool").objectives_of == "serving/llama-pool"
    assert EppSettings(backends=fixed).objectives_of is None
    for bad in ("llama-pool", "/p", "ns/", "ns/a/b"):
        with pytest.raises(ValueError, match="NAMESPACE/POOL"):
            EppSettings(backends=fixed, inference_objectives=bad)
    with pytest.raises(ValueError, match="objectives-poll-interval"):
        EppSettings(backends=fixed, objectives_poll_interval=0)
