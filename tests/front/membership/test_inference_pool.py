"""--inference-pool: a GIE InferencePool's ready pods as the fleet (a fake API edge here; the
e2e suite reads a real pool)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from prefixroute.front.membership.inference_pool import InferencePoolSource, fleet_from_pool
from prefixroute.routing.fleet import Fleet

POOL = {
    "metadata": {"name": "llama", "resourceVersion": "7"},
    "spec": {"selector": {"matchLabels": {"app": "vllm"}}, "targetPorts": [{"number": 8000}]},
}


def pod(name: str, ip: str | None = "10.0.0.1", ready: bool = True, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    status: dict[str, Any] = {"conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    if ip:
        status["podIP"] = ip
    return {"metadata": meta, "status": status}


class FakeEdge:
    def __init__(self) -> None:
        self.pool_obj: Mapping[str, Any] | None = POOL
        self.pod_list: list[dict[str, Any]] = []
        self.selectors: list[Mapping[str, str]] = []
        self.fail: Exception | None = None

    def pool(self) -> Mapping[str, Any] | None:
        if self.fail is not None:
            raise self.fail
        return self.pool_obj

    def pods(self, selector: Mapping[str, str]) -> Sequence[Mapping[str, Any]]:
        self.selectors.append(selector)
        return self.pod_list


def test_only_ready_pods_with_an_ip_that_are_not_leaving_are_members() -> None:
    pods = [pod("b", "10.0.0.2"), pod("a", "10.0.0.1"), pod("c", None), pod("d", ready=False),
            pod("e", "10.0.0.5", deleting=True), pod("f", "fd00::6")]  # fmt: skip
    fleet = fleet_from_pool(POOL, pods, 16)
    assert [(m.name, m.url) for m in fleet.members] == [
        ("a", "http://10.0.0.1:8000"), ("b", "http://10.0.0.2:8000"), ("f", "http://[fd00::6]:8000"),
    ]  # fmt: skip
    assert fleet.version == "7"
    assert fleet_from_pool(None, pods, 16).members == ()


async def test_the_source_follows_the_pool_and_keeps_its_fleet_through_failures() -> None:
    edge = FakeEdge()
    edge.pod_list = [pod("a", "10.0.0.1")]
    fleets: list[Fleet] = []
    source = InferencePoolSource("serving", "llama", 16, interval=3600, edge_factory=lambda: edge)
    await source.start(fleets.append)
    try:
        assert [m.name for m in fleets[-1].members] == ["a"]
        assert edge.selectors[-1] == {"app": "vllm"}
        await source.poll(fleets.append)
        assert len(fleets) == 1  # nothing changed, nothing applied
        edge.pod_list.append(pod("b", "10.0.0.2"))
        await source.poll(fleets.append)
        assert [m.name for m in fleets[-1].members] == ["a", "b"]
        edge.fail = ConnectionError("API server down")
        await source.poll(fleets.append)
        assert len(fleets) == 2  # the last fleet stays
        edge.fail, edge.pool_obj = None, None  # the pool was deleted
        await source.poll(fleets.append)
        assert fleets[-1].members == ()
    finally:
        await source.stop()


async def test_a_pool_without_selector_or_port_keeps_the_fleet() -> None:
    edge = FakeEdge()
    edge.pool_obj = {"spec": {"selector": {"matchLabels": {}}, "targetPorts": [{"number": 8000}]}}
    fleets: list[Fleet] = []
    source = InferencePoolSource("serving", "llama", 16, edge_factory=lambda: edge)
    await source.poll(fleets.append)
    assert fleets == []
