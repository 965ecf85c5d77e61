"""The adapter sync against engines in memory (their adapter API faked at the client) and
an API server in memory: each ready engine gets its placement, loads and unloads happen
without touching the engines' pods, what the engines confirmed lands in pod annotations,
status.adapters, the metric and Events, and it runs again only when due."""

from __future__ import annotations

import copy
from typing import Any

from prefixroute.controller.adapter_sync import AdapterSync
from prefixroute.controller.conditions import find
from prefixroute.controller.engine_adapters import EngineAdapterClient, EngineCallFailed
from prefixroute.controller.model_files import resolved
from prefixroute.controller.names import ANNOTATION_ADAPTERS
from prefixroute.controller.reconcile import Controller
from prefixroute.controller.spec.model import parse_spec
from tests.controller.helpers import Clock, EventLog, FakeEdge, model_body, pod

KEY = ("serving", "llama")
A, B = "http://10.0.0.1:8000", "http://10.0.0.2:8000"


class Engines(EngineAdapterClient):
    """Engines by URL: what each has registered, and loads that fail by adapter name."""

    def __init__(self) -> None:
        super().__init__(send=self._unused)
        self.held: dict[str, set[str]] = {A: set(), B: set()}
        self.broken: dict[str, str] = {}  # adapter -> the engine's message
        self.down: set[str] = set()
        self.calls: list[tuple[str, str, str]] = []
        self.edge: FakeEdge | None = None
        self.recorded_at_unload: list[str] = []  # the pods' annotations when each unload came

    @staticmethod
    def _unused(method: str, url: str, body: bytes | None) -> tuple[int, str]:
        raise AssertionError("no HTTP in this test")

    def registered(self, base_url: str) -> frozenset[str]:
        if base_url in self.down:
            raise EngineCallFailed(f"no answer from {base_url}/v1/models: refused")
        return frozenset(self.held[base_url])

    def load(self, base_url: str, name: str, path: str) -> None:
        self.calls.append(("load", base_url, name))
        if name in self.broken:
            raise EngineCallFailed(self.broken[name], 404)
        self.held[base_url].add(name)

    def unload(self, base_url: str, name: str) -> None:
        self.calls.append(("unload", base_url, name))
        assert self.edge is not None
        pod = "llama-engine-a" if base_url == A else "llama-engine-b"
        self.recorded_at_unload.append(self.edge.annotations[pod][ANNOTATION_ADAPTERS])
        self.held[base_url].discard(name)


class Monotonic:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def spec_of(adapters: list[str], max_loras: int = 4) -> dict[str, Any]:
    return {
        "engine": {"kind": "sim", "model": "tiny", "lora": {"maxLoras": max_loras}},
        "adapters": [{"name": n, "source": {"folder": {"path": f"/adapters/{n}"}}} for n in adapters],
    }


def setup(
    adapters: list[str], max_loras: int = 4
) -> tuple[AdapterSync, Engines, Controller, FakeEdge, EventLog, Monotonic]:
    engines, edge, log, clock = Engines(), FakeEdge(), EventLog(), Monotonic()
    controller = Controller(edge=edge, events=log, clock=Clock())
    engines.edge = edge
    return AdapterSync(client=engines, monotonic=clock, unload_grace_seconds=0), engines, controller, edge, log, clock


def engine_pods(edge: FakeEdge) -> list[dict[str, Any]]:
    """The two engines, with the annotations the sync wrote so far (as the pod watch would)."""
    out = []
    for name, ip in (("llama-engine-a", "10.0.0.1"), ("llama-engine-b", "10.0.0.2")):
        out.append(pod(name, ip=ip, adapters=edge.annotations.get(name, {}).get(ANNOTATION_ADAPTERS)))
    return out


async def run(sync: AdapterSync, controller: Controller, edge: FakeEdge, spec: dict[str, Any]) -> dict[str, Any]:
    body = model_body(spec, status=edge.status.get(KEY))
    parsed = resolved("llama", parse_spec(body["spec"]))
    await sync.sync(KEY, body, parsed, engine_pods(edge), controller)
    return edge.status.get(KEY, {})


async def test_adapters_that_fit_are_loaded_everywhere_and_recorded() -> None:
    sync, engines, controller, edge, log, _ = setup(["sql", "chat"])
    status = await run(sync, controller, edge, spec_of(["sql", "chat"]))
    assert engines.held == {A: {"sql", "chat"}, B: {"sql", "chat"}}
    assert edge.annotations["llama-engine-a"][ANNOTATION_ADAPTERS] == "chat,sql"
    assert status["adapters"] == [
        {"name": "sql", "replicas": 2, "pods": ["llama-engine-a", "llama-engine-b"], "desiredReplicas": 2},
        {"name": "chat", "replicas": 2, "pods": ["llama-engine-a", "llama-engine-b"], "desiredReplicas": 2},
    ]
    assert find(status["conditions"], "AdaptersLoaded")["status"] == "True"
    assert log.reasons() == ["AdapterLoaded", "AdapterLoaded"]
    value = controller.metrics.value(
        "prefixroute_operator_adapter_replicas", model_namespace="serving", model="llama", adapter="sql"
    )
    assert value == 2
    writes = (len(edge.pod_annotations), len(edge.status_patches), len(log.events), len(engines.calls))
    await run(sync, controller, edge, spec_of(["sql", "chat"]))
    assert (len(edge.pod_annotations), len(edge.status_patches), len(log.events), len(engines.calls)) == writes


async def test_with_one_slot_each_adapter_is_on_one_engine_and_a_removed_one_is_unloaded_there() -> None:
    sync, engines, controller, edge, log, _ = setup(["sql", "chat"], max_loras=1)
    status = await run(sync, controller, edge, spec_of(["sql", "chat"], max_loras=1))
    assert [entry["replicas"] for entry in status["adapters"]] == [1, 1]
    holder = status["adapters"][0]["pods"][0]
    loads = len(engines.calls)
    status = await run(sync, controller, edge, spec_of(["chat"], max_loras=1))
    # one adapter fits in one slot: it goes everywhere now; sql leaves the engine that had it
    assert status["adapters"] == [
        {"name": "chat", "replicas": 2, "pods": ["llama-engine-a", "llama-engine-b"], "desiredReplicas": 2}
    ]
    assert [c for c in engines.calls[loads:] if c[0] == "unload"] == [
        ("unload", A if holder.endswith("a") else B, "sql")
    ]
    assert engines.held == {A: {"chat"}, B: {"chat"}}
    assert "sql" not in engines.recorded_at_unload[-1]  # the ring stopped naming it before it went
    assert "AdapterUnloaded" in log.reasons()
    assert (
        controller.metrics.value(
            "prefixroute_operator_adapter_replicas", model_namespace="serving", model="llama", adapter="sql"
        )
        is None
    )


async def test_a_failed_load_is_told_once_and_retried_sooner() -> None:
    sync, engines, controller, edge, log, clock = setup(["sql", "broken"])
    engines.broken["broken"] = "Loading lora broken failed: No adapter found for /adapters/broken"
    spec = spec_of(["sql", "broken"])
    status = await run(sync, controller, edge, spec)
    assert status["adapters"][1] == {
        "name": "broken",
        "replicas": 0,
        "pods": [],
        "desiredReplicas": 2,
        "loadError": "llama-engine-a: Loading lora broken failed: No adapter found for /adapters/broken",
    }
    loaded = find(status["conditions"], "AdaptersLoaded")
    assert (loaded["status"], loaded["reason"], loaded["message"]) == (
        "False",
        "LoadFailed",
        "refused by an engine: broken",
    )
    warnings = [m for t, _, m in log.events if t == "Warning"]
    assert warnings == [
        "llama-engine-a: adapter broken: Loading lora broken failed: No adapter found for /adapters/broken",
        "llama-engine-b: adapter broken: Loading lora broken failed: No adapter found for /adapters/broken",
    ]
    body = model_body(spec)
    parsed = resolved("llama", parse_spec(body["spec"]))
    assert not sync.due(KEY, parsed, engine_pods(edge), {})
    clock.now += sync.retry_seconds
    assert sync.due(KEY, parsed, engine_pods(edge), {})
    await run(sync, controller, edge, spec)
    assert len([t for t, _, _ in log.events if t == "Warning"]) == 2  # the same failure is not told again


async def test_it_is_due_on_a_new_engine_a_spec_change_or_the_slow_resync_only() -> None:
    sync, _, controller, edge, _, clock = setup(["sql"])
    spec = spec_of(["sql"])
    parsed = resolved("llama", parse_spec(spec))
    assert sync.due(KEY, parsed, engine_pods(edge), {})  # never synced
    await run(sync, controller, edge, spec)
    pods = engine_pods(edge)
    assert not sync.due(KEY, parsed, pods, {})  # the annotations it wrote do not make it due
    assert sync.due(KEY, parsed, [*pods, pod("llama-engine-c", ip="10.0.0.3")], {})
    assert sync.due(KEY, resolved("llama", parse_spec(spec_of(["sql", "chat"]))), pods, {})
    clock.now += sync.resync_seconds - 1
    assert not sync.due(KEY, parsed, pods, {})
    clock.now += 1
    assert sync.due(KEY, parsed, pods, {})
    assert not sync.due(KEY, resolved("llama", parse_spec({"engine": {"kind": "sim", "model": "tiny"}})), pods, {})


async def test_an_engine_that_does_not_answer_keeps_its_record_and_the_others_go_on() -> None:
    sync, engines, controller, edge, log, _ = setup(["sql"])
    engines.down.add(B)
    status = await run(sync, controller, edge, spec_of(["sql"]))
    (sql,) = status["adapters"]
    assert (sql["replicas"], sql["pods"], sql["desiredReplicas"]) == (1, ["llama-engine-a"], 2)
    assert sql["loadError"].startswith("llama-engine-b: cannot list its adapters")
    assert "llama-engine-b" not in edge.annotations
    assert ("Warning", "AdapterLoadFailed") in [(t, r) for t, r, _ in log.events]


def hub_spec() -> dict[str, Any]:
    return {
        "engine": {"kind": "sim", "lora": {"maxLoras": 4}},
        "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}},
        "adapters": [
            {"name": "sql", "source": {"hub": {"id": "acme/sql-lora"}}},
            {"name": "bad", "source": {"hub": {"id": "acme/missing-lora"}}},
            {"name": "poet", "source": {"folder": {"path": "/adapters/poet"}}},
        ],
    }


def job_of(edge: FakeEdge, repo: str, phase: str) -> dict[str, Any]:
    """The download Job of this repository as the Job watch would see it in this phase."""
    for (kind, _, _), obj in edge.objects.items():
        if kind == "Job" and obj["metadata"]["annotations"]["prefixroute.io/model-source"] == f"hub:{repo}@main":
            job = copy.deepcopy(obj)
            done = {"Ready": "Complete", "Failed": "Failed"}.get(phase)
            job["status"] = {"conditions": [{"type": done, "status": "True"}]} if done else {"active": 1}
            return job
    raise AssertionError(f"no Job for {repo}")


async def test_a_hub_adapter_is_loaded_only_once_its_download_is_ready_and_a_failed_one_never() -> None:
    sync, engines, controller, edge, log, clock = setup([])
    body = model_body(hub_spec())
    await controller.reconcile(body, [])  # makes the adapters' Jobs
    for repo, phase in (("acme/sql-lora", "Downloading"), ("acme/missing-lora", "Failed")):
        await controller.download_seen(model_body(hub_spec(), status=edge.status[KEY]), job_of(edge, repo, phase), [])
    status = await run(sync, controller, edge, hub_spec())
    assert {name for _, _, name in engines.calls} == {"poet"}  # neither the downloading nor the failed one
    assert "AdapterLoadFailed" not in log.reasons()
    assert [e.get("download", {}).get("phase") for e in status["adapters"]] == ["Downloading", "Failed", None]
    body = model_body(hub_spec(), status=edge.status[KEY])
    parsed = resolved("llama", parse_spec(body["spec"]))
    clock.now += sync.retry_seconds
    assert not sync.due(KEY, parsed, engine_pods(edge), controller.status_view(body))  # nothing failed: no retry
    await controller.download_seen(body, job_of(edge, "acme/sql-lora", "Ready"), [])
    body = model_body(hub_spec(), status=edge.status[KEY])
    assert sync.due(KEY, parsed, engine_pods(edge), controller.status_view(body))  # at once, not in a minute
    status = await run(sync, controller, edge, hub_spec())
    assert engines.held == {A: {"sql", "poet"}, B: {"sql", "poet"}}
    assert [c for c in engines.calls if c[2] == "bad"] == []
    loaded = find(status["conditions"], "AdaptersLoaded")
    assert (loaded["status"], loaded["reason"]) == ("False", "DownloadFailed")
    assert loaded["message"] == "download failed: bad (Failed)"
