"""The models loop over kopf's indexes (plain mappings here): the autoscaler ticks models
with autoscaling on, each with its own memory, in tasks of their own; a model gone from the
index is forgotten; nothing runs while peering says another replica leads."""

from __future__ import annotations

import asyncio
from typing import Any

from prefixroute.controller.adapter_sync import AdapterSync, signature
from prefixroute.controller.autoscale_tick import AutoscalerMemory
from prefixroute.controller.errors import ApplyFailed
from prefixroute.controller.metrics import OperatorMetrics
from prefixroute.controller.models_loop import ModelsLoop
from prefixroute.controller.peering import Peering
from tests.controller.helpers import Clock, FakeEdge, model_body, pod
from tests.polling import until

AUTO = {"enabled": True, "prometheus": "http://p:9090"}


class FakeController:
    """What the loop asks of the controller: its clock, and a sync of the ring."""

    def __init__(self) -> None:
        self.clock = Clock()
        self.metrics = OperatorMetrics()
        self.deferred: set[tuple[str, str]] = set()
        self.syncs: list[str] = []
        self.background: list[bool] = []
        self.written: list[tuple[str, dict[str, Any], bool]] = []
        self.tokenizer: list[tuple[str, str | None]] = []
        self.progress_reads: list[str] = []

    def status_view(self, body: Any) -> dict[str, Any]:
        return dict(body.get("status") or {})

    async def sync(self, body: Any, pods: Any, *, background: bool = False) -> dict[str, Any]:
        self.syncs.append(body["metadata"]["name"])
        self.background.append(background)
        return {}

    async def autoscaled(
        self, body: Any, pods: Any, fields: Any, *, apply_replicas: bool, background: bool = True
    ) -> None:
        self.written.append((body["metadata"]["name"], dict(fields({})), apply_replicas))

    async def tokenizer_reported(self, body: Any, problem: str | None) -> None:
        self.tokenizer.append((body["metadata"]["name"], problem))

    async def download_progress(self, body: Any) -> None:
        self.progress_reads.append(body["metadata"]["name"])


class FakeAutoscaler:
    """Records each tick and each round; a round can be held open (``gate``) or its ticks made
    to fail."""

    def __init__(self) -> None:
        self.ticks: list[tuple[str, int, int]] = []  # (model, pods, id of the memory)
        self.rounds: list[list[str]] = []
        self.gate: asyncio.Event | None = None
        self.fail: Exception | None = None
        self.controller = FakeController()

    async def tick_many(self, items: list[tuple[Any, list[Any], AutoscalerMemory]]) -> list[Any]:
        self.rounds.append([body["metadata"]["name"] for body, _, _ in items])
        for body, pods, memory in items:
            self.ticks.append((body["metadata"]["name"], len(pods()), id(memory)))  # the loop hands over a reader
            memory.next_due += 1
        if self.gate is not None:
            await self.gate.wait()
        return [self.fail for _ in items]


def indexes(*names: str, autoscaling: bool = True) -> tuple[dict, dict]:
    spec = {"engine": {"kind": "sim", "model": "m"}, **({"autoscaling": AUTO} if autoscaling else {})}
    models = {("ns", n): [model_body(spec, name=n, namespace="ns")] for n in names}
    pods = {("ns", n): [pod(f"{n}-engine-0", model=n)] for n in names}
    return models, pods


def loop(models: dict, pods: dict, **kwargs: Any) -> tuple[ModelsLoop, FakeAutoscaler, FakeEdge]:
    autoscaler, edge = FakeAutoscaler(), FakeEdge()
    made = ModelsLoop(
        autoscaler=autoscaler,  # type: ignore[arg-type]
        models=models,
        model_pods=pods,
        peering=kwargs.pop("peering", Peering(identity="me")),
        read_peering=edge.read_peering,
        clock=Clock(),
        **kwargs,
    )
    return made, autoscaler, edge


async def test_models_with_autoscaling_tick_each_with_its_own_memory() -> None:
    models, pods = indexes("a", "b")
    off, off_pods = indexes("c", autoscaling=False)
    models.update(off)
    pods.update(off_pods)
    ml, autoscaler, _ = loop(models, pods)
    await ml.once()
    await ml.settle()
    await ml.once()
    await ml.settle()
    assert sorted(name for name, _, _ in autoscaler.ticks) == ["a", "a", "b", "b"]
    assert {name: memory for name, _, memory in autoscaler.ticks} == {
        "a": id(ml.memories[("ns", "a")]),
        "b": id(ml.memories[("ns", "b")]),
    }
    assert ml.memories[("ns", "a")].next_due == 2  # the same memory, tick after tick
    assert ("ns", "c") not in ml.memories


async def test_a_model_gone_from_the_index_is_forgotten() -> None:
    models, pods = indexes("a")
    ml, _autoscaler, _ = loop(models, pods)
    await ml.once()
    await ml.settle()
    del models[("ns", "a")]
    assert await ml.once() == []
    assert ml.memories == {}


async def test_models_due_together_tick_in_one_round_per_prometheus() -> None:
    models, pods = indexes("a", "b")
    other, other_pods = indexes("c")
    other[("ns", "c")][0]["spec"]["autoscaling"] = {**AUTO, "prometheus": "http://q:9090"}
    models.update(other)
    pods.update(other_pods)
    ml, autoscaler, _ = loop(models, pods)
    assert sorted(await ml.once()) == [("ns", "a"), ("ns", "b"), ("ns", "c")]
    await ml.settle()
    assert sorted(autoscaler.rounds) == [["a", "b"], ["c"]]


async def test_a_slow_prometheus_holds_back_its_own_models_only() -> None:
    models, pods = indexes("slow")
    ml, autoscaler, _ = loop(models, pods)
    autoscaler.gate = asyncio.Event()
    assert await ml.once() == [("ns", "slow")]
    await asyncio.sleep(0)
    more, more_pods = indexes("quick", "elsewhere")
    more[("ns", "elsewhere")][0]["spec"]["autoscaling"] = {**AUTO, "prometheus": "http://q:9090"}
    models.update(more)
    pods.update(more_pods)
    assert await ml.once() == [("ns", "elsewhere")]  # "slow" and "quick" wait for their Prometheus
    autoscaler.gate.set()
    await ml.settle()
    assert sorted(await ml.once()) == [("ns", "elsewhere"), ("ns", "quick"), ("ns", "slow")]
    await ml.settle()


async def test_a_round_with_nothing_due_starts_nothing_and_asks_no_peering() -> None:
    models, pods = indexes("a", "b")
    me = Peering(identity="me", name="prefixroute", priority=10)
    ml, autoscaler, edge = loop(models, pods, peering=me)
    edge.peers[("prefixroute", None)] = {}
    for memory in (ml.memories.setdefault(k, AutoscalerMemory()) for k in models):
        memory.next_due = float("inf")  # ticked just now
    assert await ml.once() == []
    assert edge.peering_reads == []
    assert autoscaler.rounds == []


async def test_a_failed_tick_is_logged_and_the_next_round_ticks_again(caplog) -> None:
    models, pods = indexes("a")
    ml, autoscaler, _ = loop(models, pods)
    autoscaler.fail = ApplyFailed("pods is forbidden", status=403)
    await ml.once()
    await ml.settle()
    assert "retried at the next tick" in caplog.text
    autoscaler.fail = None
    await ml.once()
    await ml.settle()
    assert len(autoscaler.ticks) == 2


async def test_peering_pauses_the_loop_as_it_pauses_kopf() -> None:
    models, pods = indexes("a")
    me = Peering(identity="me", name="prefixroute", priority=10)
    now = [0.0]
    ml, _autoscaler, edge = loop(models, pods, peering=me, monotonic=lambda: now[0])
    edge.peers[("prefixroute", None)] = {"other": {"priority": 20, "lifetime": 60, "lastseen": "2026-01-01T11:59:59Z"}}
    assert await ml.once() == []  # a live peer of higher priority leads
    edge.peers[("prefixroute", None)] = {"other": {"priority": 5, "lifetime": 60, "lastseen": "2026-01-01T11:59:59Z"}}
    assert await ml.once() == []  # the verdict is kept a few seconds
    now[0] += ml.peering_check_seconds
    assert await ml.once() == [("ns", "a")]
    await ml.settle()
    assert edge.peering_reads == [("prefixroute", None), ("prefixroute", None)]


async def test_namespaced_peering_reads_each_namespaces_object_and_an_unreadable_one_pauses() -> None:
    models, pods = indexes("a")
    me = Peering(identity="me", name="prefixroute", priority=10, clusterwide=False)
    ml, _autoscaler, edge = loop(models, pods, peering=me)
    edge.peers[("prefixroute", "ns")] = {}
    assert await ml.once() == [("ns", "a")]
    await ml.settle()
    assert edge.peering_reads == [("prefixroute", "ns")]
    ml2, _, edge2 = loop(models, pods, peering=me)
    edge2.fail["Peering"] = ApplyFailed("kopfpeerings is forbidden", status=403)
    assert await ml2.once() == []


async def test_run_keeps_going_until_cancelled() -> None:
    models, pods = indexes("a")
    ml, autoscaler, _ = loop(models, pods, interval=0.01)
    task = asyncio.create_task(ml.run())
    await until(lambda: len(autoscaler.ticks) >= 3, "three ticks of the loop", interval=0.01)
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    assert task.cancelled()
    # each sleep between rounds tells how late it woke: the event loop's lag
    assert autoscaler.controller.metrics.value("prefixroute_operator_loop_lag_seconds_count") >= 2


async def test_a_model_with_a_slow_starting_engine_has_its_ring_published_each_round() -> None:
    """Its weights change with time, not with pod events: the loop syncs its status."""
    models, pods = indexes("ramp", "steady", autoscaling=False)
    for p in pods[("ns", "steady")]:
        p["status"]["conditions"][1]["lastTransitionTime"] = "2026-01-01T11:00:00Z"  # ready an hour ago
    new = pod("ramp-engine-1", model="ramp", ip="10.0.0.2")
    new["status"]["conditions"][1]["lastTransitionTime"] = "2026-01-01T11:59:50Z"  # 10 s before the clock
    pods[("ns", "ramp")].append(new)
    ml, autoscaler, _ = loop(models, pods)
    await ml.once()
    await ml.settle()
    assert autoscaler.controller.syncs == ["ramp"]
    assert autoscaler.ticks == []  # no autoscaling: no tick
    assert autoscaler.controller.background == [True]  # a ramp step may wait behind the pod watch's writes
    autoscaler.controller.clock.advance(120)  # the ramp is over
    await ml.once()
    await ml.settle()
    assert autoscaler.controller.syncs == ["ramp"]


async def test_a_model_whose_counts_the_pod_watch_put_off_is_synced_in_the_next_round() -> None:
    models, pods = indexes("put-off", "quiet", autoscaling=False)
    for key in pods:
        for p in pods[key]:
            p["status"]["conditions"][1]["lastTransitionTime"] = "2026-01-01T11:00:00Z"  # no ramp
    ml, autoscaler, _ = loop(models, pods)
    autoscaler.controller.deferred.add(("ns", "put-off"))
    await ml.once()
    await ml.settle()
    assert autoscaler.controller.syncs == ["put-off"]
    assert autoscaler.controller.background == [True]


async def test_a_waiting_router_of_a_model_with_keys_is_looked_at_again_every_few_seconds() -> None:
    """A kubelet's FailedMount event changes no pod, so no pod event brings it: the loop syncs
    such a model's status now and then, until its router pods are ready."""
    from prefixroute.controller.auth_status import RECHECK_SECONDS

    spec = {"engine": {"kind": "sim", "model": "m"}, "auth": {"apiKeysSecret": {"name": "keys"}}}
    models = {("ns", "k"): [model_body(spec, name="k", namespace="ns")]}
    waiting = [pod("k-router-0", model="k", component="router", ready=False)]
    pods = {("ns", "k"): waiting}
    now = [100.0]
    ml, autoscaler, _ = loop(models, pods, monotonic=lambda: now[0])
    for step in (0.0, 1.0, RECHECK_SECONDS):
        now[0] += step
        await ml.once()
        await ml.settle()
    assert autoscaler.controller.syncs == ["k", "k"]
    waiting[0] = pod("k-router-0", model="k", component="router", ready=True)
    now[0] += RECHECK_SECONDS
    await ml.once()
    await ml.settle()
    assert autoscaler.controller.syncs == ["k", "k"]
    assert autoscaler.ticks == []  # autoscaling is off for it


async def test_a_downloading_cache_has_its_progress_read_every_few_seconds_and_no_longer() -> None:
    spec = {"engine": {"kind": "sim"}, "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}}}
    body = model_body(spec, name="d", namespace="ns", status={"modelCache": {"phase": "Downloading", "job": "j"}})
    models = {("ns", "d"): [body]}
    now = [100.0]
    ml, autoscaler, _ = loop(models, {}, monotonic=lambda: now[0], progress_seconds=5.0)
    for step in (0.0, 1.0, 1.0, 3.0):  # reads at 100 and at 105
        now[0] += step
        await ml.once()
        await ml.settle()
    assert autoscaler.controller.progress_reads == ["d", "d"]
    models[("ns", "d")] = [model_body(spec, name="d", namespace="ns", status={"modelCache": {"phase": "Ready"}})]
    now[0] += 10.0
    assert await ml.once() == []  # Ready: nothing due any more
    assert autoscaler.controller.progress_reads == ["d", "d"]


async def test_without_autoscaling_the_columns_come_from_the_routers_every_few_seconds() -> None:
    models, pods = indexes("plain", autoscaling=False)
    pods[("ns", "plain")].append(pod("plain-router-0", model="plain", component="router", ip="10.0.1.7"))
    text = (
        "prefixroute_router_recent_requests 4\n"
        "prefixroute_router_recent_ttfb_p50_seconds 0.25\n"
        'prefixroute_router_recent_hit_rate{source="engines"} 0.75\n'
    )
    asked: list[str] = []

    def fetch(url: str) -> str:
        asked.append(url)
        return text

    now = [0.0]
    ml, autoscaler, _ = loop(models, pods, fetch=fetch, monotonic=lambda: now[0])
    await ml.once()
    await ml.settle()
    assert asked == ["http://10.0.1.7:8080/metrics"]
    assert autoscaler.controller.written == [("plain", {"hitRate": 0.75, "ttftP50": 0.25, "routerPeers": None}, False)]
    await ml.once()
    await ml.settle()
    assert len(asked) == 1  # not again before figures_seconds
    now[0] += ml.figures_seconds
    await ml.once()
    await ml.settle()
    assert len(asked) == 2


async def test_models_whose_autoscaler_writes_the_columns_are_left_to_it() -> None:
    models, pods = indexes("auto")
    pods[("ns", "auto")].append(pod("auto-router-0", model="auto", component="router", ip="10.0.1.8"))
    ml, autoscaler, _ = loop(models, pods, fetch=lambda url: "")
    await ml.once()
    await ml.settle()
    assert autoscaler.controller.written == []
    assert len(autoscaler.ticks) == 1


async def test_the_routers_of_a_hub_model_are_asked_for_its_tokenizer_autoscaled_or_not() -> None:
    engine = {"kind": "vllm", "model": "acme/llama", "image": "vllm"}
    spec = {"engine": engine, "autoscaling": AUTO}
    models = {("ns", "hub"): [model_body(spec, name="hub", namespace="ns")]}
    pods = {("ns", "hub"): [pod("hub-router-0", model="hub", component="router", ip="10.0.1.9")]}
    answers = [
        'prefixroute_router_tokenizer_ready{source="hub"} 0\nprefixroute_router_tokenizer_failing{reason="unauthorized"} 1\n',
        'prefixroute_router_tokenizer_ready{source="hub"} 1\n',
    ]
    now = [0.0]
    ml, autoscaler, _ = loop(models, pods, fetch=lambda url: answers[0], monotonic=lambda: now[0])
    await ml.once()
    await ml.settle()
    ((name, problem),) = autoscaler.controller.tokenizer
    assert name == "hub"
    assert problem is not None
    assert "acme/llama" in problem
    assert "unauthorized" in problem
    assert "HF_TOKEN" in problem
    assert autoscaler.controller.written == []  # the autoscaler writes its columns
    answers.pop(0)
    now[0] += ml.figures_seconds
    await ml.once()
    await ml.settle()
    assert autoscaler.controller.tokenizer[-1] == ("hub", None)


def test_the_loop_reads_the_engine_as_spec_model_makes_it() -> None:
    """A vLLM model named by spec.model's hub id has the hub tokenizer the routers report on."""
    spec = {"engine": {"kind": "vllm"}, "model": {"hub": {"id": "acme/tiny"}}}
    body = model_body(spec, name="a", namespace="ns")
    ml, _, _ = loop({("ns", "a"): [body]}, {("ns", "a"): []})
    parsed = ml._spec(("ns", "a"), body)
    assert parsed is not None
    assert parsed.engine.model == "acme/tiny"


class RecordedAdapterSync(AdapterSync):
    """The real due-ness; syncs recorded instead of made."""

    def __init__(self) -> None:
        super().__init__(monotonic=lambda: 0.0)
        self.synced: list[str] = []

    async def sync(self, key: Any, body: Any, spec: Any, pods: Any, controller: Any) -> None:
        self.synced.append(key[1])
        self._next[key] = (signature(spec, pods, body.get("status") or {}), self.resync_seconds)


async def test_only_models_with_lora_get_an_adapter_sync_and_only_when_due() -> None:
    models, pods = indexes("plain", autoscaling=False)
    lora = {"engine": {"kind": "sim", "model": "m", "lora": {}}, "adapters": []}
    models[("ns", "lora")] = [model_body(lora, name="lora", namespace="ns")]
    pods[("ns", "lora")] = [pod("lora-engine-0", model="lora")]
    adapters = RecordedAdapterSync()
    ml, _, _ = loop(models, pods, adapters=adapters)
    await ml.once()
    await ml.settle()
    assert adapters.synced == ["lora"]
    await ml.once()
    await ml.settle()
    assert adapters.synced == ["lora"]  # nothing changed, the resync is a minute away
    pods[("ns", "lora")].append(pod("lora-engine-1", model="lora", ip="10.0.0.2"))
    await ml.once()
    await ml.settle()
    assert adapters.synced == ["lora", "lora"]
    del models[("ns", "lora")]
    await ml.once()
    assert adapters._next == {}


async def test_a_hub_adapters_download_turning_ready_makes_the_adapter_sync_due_at_once() -> None:
    models: dict[tuple[str, str], list[dict[str, Any]]] = {}
    spec = {
        "engine": {"kind": "sim", "lora": {}},
        "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}},
        "adapters": [{"name": "sql", "source": {"hub": {"id": "acme/sql-lora"}}}],
    }
    entry = {
        "name": "sql",
        "replicas": 0,
        "pods": [],
        "download": {"phase": "Downloading", "source": "hub:acme/sql-lora@main"},
    }
    body = model_body(spec, name="lora", namespace="ns", status={"adapters": [entry]})
    models[("ns", "lora")] = [body]
    adapters = RecordedAdapterSync()
    ml, _, _ = loop(models, {("ns", "lora"): [pod("lora-engine-0", model="lora")]}, adapters=adapters)
    await ml.once()
    await ml.settle()
    await ml.once()
    await ml.settle()
    assert adapters.synced == ["lora"]
    body["status"]["adapters"][0]["download"]["phase"] = "Ready"  # the Job watch wrote it
    await ml.once()
    await ml.settle()
    assert adapters.synced == ["lora", "lora"]
