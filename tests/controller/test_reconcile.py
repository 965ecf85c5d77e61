"""Plan then apply through a fake edge: idempotence, spec changes, specs that cannot be
honoured, API failures, and the pod-driven status sync."""

import asyncio
import copy
import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest

from prefixroute.controller.conditions import find
from prefixroute.controller.errors import ApplyFailed, ApplyRejected
from prefixroute.controller.reconcile import Controller
from prefixroute.controller.spec.adapters import AdapterSpec
from prefixroute.controller.spec.model_source import FolderSource, HubSource
from tests.controller.helpers import Clock, EventLog, FakeEdge, model_body, pod


@pytest.fixture
def edge() -> FakeEdge:
    return FakeEdge()


@pytest.fixture
def events() -> EventLog:
    return EventLog()


@pytest.fixture
def controller(edge, events) -> Controller:
    return Controller(edge=edge, events=events, clock=Clock())


def stored(body, edge):
    """The body as the API server would hold it after our status patches."""
    out = copy.deepcopy(body)
    out["status"] = copy.deepcopy(edge.status.get((body["metadata"]["namespace"], body["metadata"]["name"]), {}))
    return out


async def test_first_reconcile_creates_every_child_and_reports(controller, edge, events) -> None:
    outcome = await controller.reconcile(model_body(generation=2), [])
    assert outcome.reason == "Reconciled"
    assert len(outcome.changed) == 8
    assert edge.kinds() == [
        "Deployment",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "Service",
        "ServiceAccount",
    ]
    status = edge.status[("serving", "llama")]
    assert status["observedGeneration"] == 2
    degraded = find(status["conditions"], "Degraded")
    assert (degraded["status"], degraded["reason"], degraded["observedGeneration"]) == ("False", "Reconciled", 2)
    assert status["readyText"] == "0/1"
    assert status["ring"]["members"] == []
    assert events.reasons() == ["Applied"]


async def test_a_new_model_binds_its_role_after_creating_it(controller, edge) -> None:
    """The fake edge, like a real API server, refuses even a dry run of a RoleBinding whose
    Role does not exist yet; the reconcile dry-runs that one only after applying the Role."""
    assert (await controller.reconcile(model_body(), [])).reason == "Reconciled"
    assert ("RoleBinding", "serving", "llama-router") in edge.objects


async def test_a_second_reconcile_of_an_unchanged_spec_changes_nothing(controller, edge, events) -> None:
    body = model_body()
    await controller.reconcile(body, [])
    versions, patches = dict(edge.versions), len(edge.status_patches)
    outcome = await controller.reconcile(stored(body, edge), [])
    assert outcome.changed == ()
    assert edge.versions == versions
    assert len(edge.status_patches) == patches  # not even a status write
    assert events.reasons() == ["Applied"]


async def test_a_spec_change_rolls_only_what_it_touches(controller, edge, events) -> None:
    body = model_body({"engine": {"kind": "sim", "model": "m"}})
    await controller.reconcile(body, [])
    changed = model_body({"engine": {"kind": "sim", "model": "m", "args": ["--kv-blocks", "64"]}}, generation=2)
    changed["status"] = stored(body, edge)["status"]
    outcome = await controller.reconcile(changed, [])
    assert outcome.changed == ("Deployment llama-engine",)
    assert events.events[-1] == ("Normal", "Applied", "generation 2: applied Deployment llama-engine")
    assert edge.status[("serving", "llama")]["observedGeneration"] == 2


async def test_a_spec_it_cannot_honour_is_degraded_with_no_children(controller, edge, events) -> None:
    body = model_body({"engine": {"kind": "custom"}})
    outcome = await controller.reconcile(body, [])
    assert outcome.reason == "InvalidSpec"
    assert edge.objects == {}
    assert edge.applies == 0
    degraded = find(edge.status[("serving", "llama")]["conditions"], "Degraded")
    assert degraded["status"] == "True"
    assert degraded["reason"] == "InvalidSpec"
    assert "spec.engine.image is required for engine kind custom" in degraded["message"]
    assert events.events == [("Warning", "InvalidSpec", degraded["message"])]
    # a retry or an operator restart: no new event, no new write, still no exception
    patches = len(edge.status_patches)
    assert (await controller.reconcile(stored(body, edge), [])).reason == "InvalidSpec"
    assert len(events.events) == 1
    assert len(edge.status_patches) == patches


async def test_a_bad_update_keeps_the_previous_children_then_recovers(controller, edge, events) -> None:
    good = model_body()
    await controller.reconcile(good, [])
    objects = copy.deepcopy(edge.objects)
    bad = model_body({"engine": {"kind": "sim", "model": "m", "args": ["--port", "1"]}}, generation=2)
    bad["status"] = stored(good, edge)["status"]
    assert (await controller.reconcile(bad, [])).reason == "InvalidSpec"
    assert edge.objects == objects
    fixed = model_body({"engine": {"kind": "sim", "model": "m"}}, generation=3)
    fixed["status"] = stored(bad, edge)["status"]
    assert (await controller.reconcile(fixed, [])).reason == "Reconciled"
    assert events.reasons() == ["Applied", "InvalidSpec", "Applied", "Recovered"]
    assert find(edge.status[("serving", "llama")]["conditions"], "Degraded")["status"] == "False"


async def test_a_rejected_object_fails_the_dry_run_and_nothing_is_applied(controller, edge, events) -> None:
    edge.fail["Deployment"] = ApplyRejected(
        "Deployment llama-engine: spec.template.spec.volumes[1].name: Duplicate value", status=422
    )
    outcome = await controller.reconcile(model_body(), [])
    assert outcome.reason == "ApplyRejected"
    assert edge.applies == 0
    assert edge.objects == {}
    assert "Duplicate value" in find(edge.status[("serving", "llama")]["conditions"], "Degraded")["message"]
    assert events.reasons() == ["ApplyRejected"]


async def test_a_transient_failure_is_reported_and_raised_for_retry(controller, edge, events) -> None:
    edge.fail["Role"] = ApplyFailed("Role llama-router: forbidden", status=403, retry_after=60)
    with pytest.raises(ApplyFailed):
        await controller.reconcile(model_body(), [])
    assert find(edge.status[("serving", "llama")]["conditions"], "Degraded")["reason"] == "ApplyFailed"
    assert events.reasons() == ["ApplyFailed"]


async def test_sync_publishes_the_ring_and_announces_membership(controller, edge, events) -> None:
    body = model_body()
    await controller.reconcile(body, [])
    patch = await controller.sync(stored(body, edge), [pod("e1", ip="10.0.0.1"), pod("r", component="router")])
    assert [m["pod"] for m in patch["ring"]["members"]] == ["e1"]
    assert patch["readyText"] == "1/1"
    assert events.events[-1][1] == "RingChanged"
    assert "+e1" in events.events[-1][2]
    # a stale body (the watch has not delivered our patch yet) and the same pods: no write
    before = len(edge.status_patches)
    assert await controller.sync(body, [pod("e1", ip="10.0.0.1"), pod("r", component="router")]) == {}
    assert len(edge.status_patches) == before


async def test_deleting_pod_leaves_the_ring_on_the_next_sync(controller, edge) -> None:
    body = model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": 2})
    await controller.sync(body, [pod("a"), pod("b", ip="10.0.0.2")])
    patch = await controller.sync(stored(body, edge), [pod("a"), pod("b", ip="10.0.0.2", deleting=True)])
    assert [m["pod"] for m in patch["ring"]["members"]] == ["a"]


async def test_sync_of_an_invalid_spec_still_follows_pods(controller, edge) -> None:
    patch = await controller.sync(model_body({"engine": {"kind": "custom"}}), [pod("a")])
    assert [m["pod"] for m in patch["ring"]["members"]] == ["a"]


async def test_a_deleted_resource_is_not_an_error(controller, edge) -> None:
    edge.gone.add(("serving", "llama"))
    assert (await controller.reconcile(model_body(), [])).reason == "Reconciled"
    controller.forget("serving", "llama")
    assert controller.locks == {}
    assert controller.written == {}


async def test_concurrent_syncs_end_with_the_newest_pods(controller, edge) -> None:
    body = model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": 3})
    pods = [pod("a"), pod("b", ip="10.0.0.2"), pod("c", ip="10.0.0.3")]
    await asyncio.gather(*(controller.sync(body, pods[: i + 1]) for i in range(3)))
    assert [m["pod"] for m in edge.status[("serving", "llama")]["ring"]["members"]] == ["a", "b", "c"]


async def test_a_recreated_resource_does_not_inherit_what_was_written_for_the_old_one(controller, edge) -> None:
    await controller.sync(model_body(uid="old"), [pod("a")])
    patch = await controller.sync(model_body(uid="new"), [pod("a")])
    assert "ring" in patch


async def test_a_gateway_adds_the_pool_and_picker_and_turning_fronts_off_stops_their_pods(controller, edge) -> None:
    spec = {"engine": {"kind": "sim", "model": "tiny"}, "gateway": {"enabled": True}}
    body = model_body(spec)
    assert (await controller.reconcile(body, [])).reason == "Reconciled"
    names = {(k, n) for k, _, n in edge.objects}
    assert {("InferencePool", "llama"), ("Deployment", "llama-epp"), ("Service", "llama-epp"),
            ("PodDisruptionBudget", "llama-epp"), ("Deployment", "llama-router")} <= names  # fmt: skip
    status = edge.status[("serving", "llama")]
    assert status["front"] == "router+gateway"
    assert status["gateway"] == {"inferencePool": "llama", "endpointPicker": "llama-epp.serving.svc:9002",
                                 "failureMode": "FailClose", "readyPickers": 0}  # fmt: skip
    # The router off: its pods go (the Deployment parked at zero: the operator may not delete
    # Deployments), the gateway's children stay, status follows.
    body = model_body({**spec, "gateway": {"enabled": True, "router": False}}, generation=2)
    outcome = await controller.reconcile(stored(body, edge), [])
    assert "Deployment llama-router" in outcome.changed
    assert edge.replicas("llama-router") == 0
    assert (await controller.reconcile(stored(body, edge), [])).changed == ()  # parked once, then left alone
    status = edge.status[("serving", "llama")]
    assert status["front"] == "gateway"
    assert "routerEndpoint" not in status
    # The pickers' readiness is what Ready waits for now.
    pods = [pod("e1"), pod("p1", component="epp", ready=False)]
    await controller.sync(stored(body, edge), pods)
    ready = find(edge.status[("serving", "llama")]["conditions"], "Ready")
    assert ready["status"] == "False"
    assert ready["reason"] == "EndpointPickerNotReady"
    await controller.sync(stored(body, edge), [pod("e1"), pod("p1", component="epp")])
    ready = find(edge.status[("serving", "llama")]["conditions"], "Ready")
    assert ready["status"] == "True"
    assert "endpoint picker" in ready["message"]
    # The gateway off (router back): the pool goes, the pickers are parked at zero.
    body = model_body({"engine": {"kind": "sim", "model": "tiny"}}, generation=3)
    outcome = await controller.reconcile(stored(body, edge), [])
    assert "deleted InferencePool llama" in outcome.changed
    assert not any(k == "InferencePool" for k, _, _ in edge.objects)
    assert edge.replicas("llama-epp") == 0
    assert edge.replicas("llama-router") == 2  # the router back
    status = edge.status[("serving", "llama")]
    assert status["front"] == "router"
    assert "gateway" not in status
    assert status["routerEndpoint"]


async def test_network_policies_follow_the_spec_on_and_off(controller, edge, events) -> None:
    on = model_body({"engine": {"kind": "sim", "model": "tiny"}, "networkPolicy": {"enabled": True}})
    outcome = await controller.reconcile(on, [])
    assert {"NetworkPolicy llama-engine", "NetworkPolicy llama-router"} <= set(outcome.changed)
    assert ("NetworkPolicy", "serving", "llama-engine") in edge.objects
    again = await controller.reconcile(stored(on, edge), [])
    assert again.changed == ()  # idempotent: nothing applied anew, nothing deleted
    off = model_body({"engine": {"kind": "sim", "model": "tiny"}}, generation=2)
    outcome = await controller.reconcile(stored(off, edge), [])
    assert set(outcome.changed) == {"deleted NetworkPolicy llama-engine", "deleted NetworkPolicy llama-router"}
    assert "NetworkPolicy" not in edge.kinds()
    assert "deleted NetworkPolicy llama-engine" in events.events[-1][2]


def told(events: EventLog) -> list[str]:
    return [r for r in events.reasons() if r != "RingChanged"]


KEYED = {"engine": {"kind": "sim", "model": "tiny"}, "auth": {"apiKeysSecret": {"name": "acme-keys"}}}
NOT_FOUND = 'MountVolume.SetUp failed for volume "api-keys" : secret "acme-keys" not found'


async def test_a_missing_key_secret_is_degraded_with_the_kubelets_words_then_recovers(controller, edge, events) -> None:
    from datetime import timedelta

    from prefixroute.controller.auth_status import slim_event
    from tests.controller.helpers import T0

    body = model_body(KEYED)
    waiting = [pod("llama-engine-0"), pod("llama-router-0", component="router", ready=False)]
    edge.failed_mounts["serving"] = [slim_event({"name": "llama-router-0"}, NOT_FOUND, [T0 - timedelta(seconds=3)])]
    outcome = await controller.reconcile(body, waiting)
    assert outcome.reason == "Reconciled"  # the children are applied: the Secret is the kubelet's to mount
    degraded = find(edge.status[("serving", "llama")]["conditions"], "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("True", "AuthSecretMissing")
    assert 'secret "acme-keys" not found' in degraded["message"]
    assert told(events) == ["Applied", "AuthSecretMissing"]

    await controller.sync(stored(body, edge), waiting)  # the pod watch: same problem, no second Warning
    assert told(events) == ["Applied", "AuthSecretMissing"]

    edge.failed_mounts["serving"] = []
    started = [pod("llama-engine-0"), pod("llama-router-0", component="router", ready=True)]
    reads = edge.mount_failure_reads
    await controller.sync(stored(body, edge), started)
    assert edge.mount_failure_reads == reads  # every router is ready: nothing to ask
    degraded = find(edge.status[("serving", "llama")]["conditions"], "Degraded")
    assert (degraded["status"], degraded["reason"]) == ("False", "Reconciled")
    assert told(events) == ["Applied", "AuthSecretMissing", "Recovered"]


async def test_without_keys_no_event_is_ever_read(controller, edge) -> None:
    await controller.reconcile(model_body(), [pod("llama-router-0", component="router", ready=False)])
    assert edge.mount_failure_reads == 0


async def test_events_that_cannot_be_read_leave_status_as_it_was(controller, edge, events) -> None:
    edge.fail["Event"] = ApplyFailed("events: forbidden", status=403)
    outcome = await controller.reconcile(model_body(KEYED), [pod("llama-router-0", component="router", ready=False)])
    assert outcome.reason == "Reconciled"
    assert find(edge.status[("serving", "llama")]["conditions"], "Degraded")["reason"] == "Reconciled"


async def test_every_reconcile_is_timed_in_the_operators_histogram(controller) -> None:
    await controller.reconcile(model_body(), [])
    await controller.reconcile(model_body(spec={"engine": {"kind": "custom"}}), [])  # InvalidSpec counts too
    assert controller.metrics.value("prefixroute_operator_reconcile_seconds_count") == 2


def _ready_at(p: dict, seconds_ago: float, clock: Clock) -> dict:
    stamp = (clock() - timedelta(seconds=seconds_ago)).strftime("%Y-%m-%dT%H:%M:%SZ")
    for cond in p["status"]["conditions"]:
        cond["lastTransitionTime"] = stamp
    return p


async def test_ramp_steps_are_left_to_the_lane_that_may_wait_and_members_never_are(edge) -> None:
    clock = Clock()
    controller = Controller(edge=edge, events=EventLog(), clock=clock)
    body = model_body({"engine": {"kind": "sim", "model": "m", "slowStartSeconds": 60}, "replicas": 3})
    old, new = _ready_at(pod("a"), 600, clock), _ready_at(pod("b", ip="10.0.0.2"), 15, clock)
    await controller.sync(body, [old, new])
    weights = lambda: [m["weight"] for m in edge.status[("serving", "llama")]["ring"]["members"]]  # noqa: E731
    assert weights() == [1.0, 0.3]
    clock.advance(12)  # b's weight is a step further
    assert "ring" not in await controller.sync(stored(body, edge), [old, new])  # a model event's echo: not here
    assert weights() == [1.0, 0.3]
    assert (await controller.sync(stored(body, edge), [old, new], background=True))["ring"]  # the loop's
    assert weights() == [1.0, 0.5]
    clock.advance(6)
    joined = _ready_at(pod("c", ip="10.0.0.3"), 0, clock)  # a member joining is written at once, steps and all
    patch = await controller.sync(stored(body, edge), [old, new, joined])
    assert [m["pod"] for m in patch["ring"]["members"]] == ["a", "b", "c"]
    assert weights()[1] == 0.6
    clock.advance(120)  # every slow start over: a weight alone is written from the pod watch again
    await controller.sync(stored(body, edge), [old, new, joined], background=True)
    drained = _ready_at(pod("a"), 720, clock)
    drained["metadata"]["annotations"]["prefixroute.io/weight"] = "0"
    assert (await controller.sync(stored(body, edge), [drained, new, joined]))["ring"]["members"][0]["weight"] == 0


async def test_counts_alone_are_left_to_the_models_loop_and_ready_is_not(controller, edge) -> None:
    body = model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": 2})
    ready = [pod("a"), pod("b", ip="10.0.0.2")]
    await controller.sync(body, ready)
    written = len(edge.status_patches)
    starting = [*ready, pod("c", ip="10.0.0.3", ready=False)]  # a replacement, not Ready yet: one more engine
    assert await controller.sync(stored(body, edge), starting) == {}
    assert len(edge.status_patches) == written
    assert controller.deferred == {("serving", "llama")}
    patch = await controller.sync(stored(body, edge), starting, background=True)  # the models loop's
    assert patch["replicas"] == 3
    assert "ring" not in patch
    assert controller.deferred == set()
    # a member leaving (and Ready with it) is written at once, whatever was put off
    await controller.sync(stored(body, edge), [*starting, pod("d", ip="10.0.0.4", ready=False)])
    assert await controller.sync(stored(body, edge), [ready[0]])
    assert edge.status[("serving", "llama")]["readyReplicas"] == 1
    assert controller.deferred == set()


async def test_status_writes_and_ring_updates_are_timed_by_lane(controller, edge) -> None:
    body = model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": 2})
    await controller.sync(body, [pod("a")])  # the pod watch's: a ring
    await controller.sync(stored(body, edge), [pod("a")])  # nothing to write: nothing timed
    await controller.sync(stored(body, edge), [pod("a"), pod("b", ip="10.0.0.2")], background=True)
    value = controller.metrics.value
    assert value("prefixroute_operator_status_write_seconds_count", lane="watch") == 1
    assert value("prefixroute_operator_status_lane_wait_seconds_count", lane="watch") == 1
    assert value("prefixroute_operator_status_write_seconds_count", lane="background") == 1
    assert value("prefixroute_operator_ring_update_seconds_count") == 1  # a ramp step is not a ring update


class GatedEdge(FakeEdge):
    """Applies wait until the gate opens (an API server busy with a thousand new models)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.applying = threading.Event()

    def apply(self, obj, *, dry_run):
        self.applying.set()
        if not self.gate.wait(10):
            raise AssertionError("the gate never opened")
        return super().apply(obj, dry_run=dry_run)


async def test_a_ring_update_does_not_wait_for_applies_nor_for_reconciles_taking_turns() -> None:
    edge = GatedEdge()
    controller = Controller(
        edge=edge, events=EventLog(), clock=Clock(), reconcile_limit=1, apply_lane=ThreadPoolExecutor(1)
    )
    first = asyncio.create_task(controller.reconcile(model_body(name="a", uid="a"), []))
    second = asyncio.create_task(controller.reconcile(model_body(name="b", uid="b"), []))
    await asyncio.to_thread(edge.applying.wait, 10)  # model a's reconcile is in the apply lane; b waits its turn
    patch = await asyncio.wait_for(
        controller.sync(model_body(name="b", uid="b"), [pod("b-engine-0", model="b")]), 5
    )  # b's lock is free, and the status lane is not the (blocked) apply lane
    assert patch["ring"]["members"][0]["pod"] == "b-engine-0"
    assert not first.done()
    assert not second.done()
    edge.gate.set()
    assert [o.reason for o in await asyncio.gather(first, second)] == ["Reconciled", "Reconciled"]


class SlowStatusEdge(FakeEdge):
    """Status patches wait until the gate opens (an API server under load)."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.patching = threading.Event()

    def patch_status(self, ref, patch):
        self.patching.set()
        if not self.gate.wait(10):
            raise AssertionError("the gate never opened")
        return super().patch_status(ref, patch)


async def test_pod_events_queued_behind_a_slow_write_become_one_write_of_the_pods_as_they_are() -> None:
    edge = SlowStatusEdge()
    controller = Controller(edge=edge, events=EventLog(), clock=Clock())
    pods = [pod("llama-engine-0", ip="10.0.0.1")]
    body = model_body()
    first = asyncio.create_task(controller.sync(body, lambda: list(pods)))
    await asyncio.to_thread(edge.patching.wait, 10)  # the first write is on its way, the lock held
    queued = []
    for i in range(1, 6):  # five more engines turn ready, an event each
        pods.append(pod(f"llama-engine-{i}", ip=f"10.0.0.{i + 1}"))
        queued.append(asyncio.create_task(controller.sync(body, lambda: list(pods))))
    await asyncio.sleep(0.05)
    edge.gate.set()
    await asyncio.gather(first, *queued)
    assert len(edge.status_patches) == 2  # the first, then one with all five: the others found nothing to do
    assert [m["pod"] for m in edge.status[("serving", "llama")]["ring"]["members"]] == [
        f"llama-engine-{i}" for i in range(6)
    ]


class BusyEdge(FakeEdge):
    """Status patches of the models named in ``slow`` wait for the gate."""

    def __init__(self, slow: set[str]) -> None:
        super().__init__()
        self.slow, self.gate = slow, threading.Event()

    def patch_status(self, ref, patch):
        if ref.name in self.slow and not self.gate.wait(10):
            raise AssertionError("the gate never opened")
        return super().patch_status(ref, patch)


async def test_writes_that_may_wait_never_hold_up_the_pod_watchs() -> None:
    from prefixroute.controller.reconcile import BACKGROUND_THREADS

    busy = {f"m{i}" for i in range(BACKGROUND_THREADS)}
    edge = BusyEdge(busy)
    controller = Controller(edge=edge, events=EventLog(), clock=Clock())
    steps = [  # slow-start steps of other models take every background place, and hang there
        asyncio.create_task(
            controller.sync(model_body(name=n, uid=n), [pod(f"{n}-engine-0", model=n)], background=True)
        )
        for n in sorted(busy)
    ]
    await asyncio.sleep(0.1)
    llama = model_body()
    waiting = asyncio.create_task(controller.sync(llama, [pod("llama-engine-0")], background=True))
    await asyncio.sleep(0.05)
    patch = await asyncio.wait_for(controller.sync(llama, [pod("llama-engine-0"), pod("llama-engine-1")]), 5)
    assert len(patch["ring"]["members"]) == 2  # its lock was free: the waiting step had taken no lock
    assert not waiting.done()
    edge.gate.set()
    await asyncio.gather(*steps, waiting)


HUB = {"engine": {"kind": "vllm", "model": "acme/llama", "image": "vllm"}}


async def test_routers_without_the_hub_tokenizer_make_the_model_degraded_until_they_have_it(
    controller, edge, events
) -> None:
    body = model_body(HUB)
    pods = [pod("llama-engine-0"), pod("llama-router-0", component="router")]
    await controller.reconcile(body, pods)

    def degraded() -> tuple[str, str]:
        found = find(edge.status[("serving", "llama")]["conditions"], "Degraded")
        return found["status"], found["reason"]

    await controller.tokenizer_reported(stored(body, edge), "1 of 1 router(s) cannot fetch (unauthorized)")
    assert degraded() == ("True", "TokenizerUnavailable")
    await controller.tokenizer_reported(stored(body, edge), "1 of 1 router(s) cannot fetch (unauthorized)")
    assert told(events) == ["Applied", "TokenizerUnavailable"]  # one Warning per problem, not per look
    await controller.reconcile(stored(body, edge), pods)  # knows nothing new of the routers: their word stands
    assert degraded() == ("True", "TokenizerUnavailable")
    assert told(events) == ["Applied", "TokenizerUnavailable"]
    await controller.tokenizer_reported(stored(body, edge), None)
    assert degraded() == ("False", "Reconciled")
    assert told(events) == ["Applied", "TokenizerUnavailable", "Recovered"]
    await controller.tokenizer_reported(stored(body, edge), None)  # nothing to clear
    assert told(events) == ["Applied", "TokenizerUnavailable", "Recovered"]


async def test_a_spec_problem_is_not_hidden_by_the_routers_tokenizer(controller, edge, events) -> None:
    body = model_body({"engine": {"kind": "nope"}})
    await controller.reconcile(body, [])
    await controller.tokenizer_reported(stored(body, edge), "cannot fetch")
    found = find(edge.status[("serving", "llama")]["conditions"], "Degraded")
    assert found["reason"] == "InvalidSpec"


def _refused_engine(message: str | None) -> dict:
    conditions = [{"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": message}]
    return {"kind": "Deployment", "metadata": {"name": "llama-engine"}, "status": {"conditions": conditions}}


async def test_pods_the_api_server_refuses_make_the_model_degraded_until_it_creates_them(
    controller, edge, events
) -> None:
    body = model_body()
    await controller.reconcile(body, [])

    def degraded() -> tuple[str, str, str]:
        found = find(edge.status[("serving", "llama")]["conditions"], "Degraded")
        return found["status"], found["reason"], found["message"]

    forbidden = (
        'pods "llama-engine-x" is forbidden: exceeded quota: none, requested: pods=1, used: pods=0, limited: pods=0'
    )
    await controller.deployment_seen(stored(body, edge), "llama-engine", forbidden)
    status, reason, message = degraded()
    assert (status, reason) == ("True", "PodsRefused")
    assert f"Deployment llama-engine: {forbidden}" in message
    await controller.deployment_seen(stored(body, edge), "llama-engine", forbidden)  # the same word again
    await controller.deployment_seen(stored(body, edge), "llama-router", None)  # another Deployment, fine
    await controller.deployment_seen(model_body(name="other", uid="other"), "other-engine", None)
    assert set(controller.refused) == {("serving", "llama")}  # a model none refuses takes no memory
    assert told(events) == ["Applied", "PodsRefused"]  # one Warning per problem
    await controller.reconcile(stored(body, edge), [])  # knows nothing new of the Deployments: their word stands
    assert degraded()[:2] == ("True", "PodsRefused")
    await controller.deployment_seen(stored(body, edge), "llama-engine", None)
    assert degraded()[:2] == ("False", "Reconciled")
    assert told(events) == ["Applied", "PodsRefused", "Recovered"]
    await controller.reconcile(stored(body, edge), [])
    assert degraded()[1] == "Reconciled"
    assert controller.refused == {}  # nothing kept for a model whose pods are all allowed


async def test_a_spec_problem_is_not_hidden_by_refused_pods(controller, edge, events) -> None:
    body = model_body({"engine": {"kind": "nope"}})
    await controller.reconcile(body, [])
    await controller.deployment_seen(stored(body, edge), "llama-engine", "forbidden")
    assert find(edge.status[("serving", "llama")]["conditions"], "Degraded")["reason"] == "InvalidSpec"


CACHED = {"engine": {"kind": "sim"}, "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}}}
SQL = AdapterSpec("sql", FolderSource("/adapters/sql"))


def _download_job(edge) -> dict:
    return next(obj for (kind, _, _), obj in edge.objects.items() if kind == "Job")


async def test_engines_start_once_the_download_job_completes(controller, edge, events) -> None:
    body = model_body(CACHED)
    await controller.reconcile(body, [])
    assert edge.replicas() == 0
    job = copy.deepcopy(_download_job(edge))
    job["status"] = {"active": 1}
    await controller.download_seen(stored(body, edge), job, [])
    assert edge.status[("serving", "llama")]["modelCache"]["phase"] == "Downloading"
    assert "ModelDownloading" in events.reasons()
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    edge.pods_of_jobs[job["metadata"]["name"]] = [
        {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 0, "message": '{"bytesDone":9}'}}}]}}
    ]
    await controller.download_seen(stored(body, edge), job, [])
    cache = edge.status[("serving", "llama")]["modelCache"]
    assert (cache["phase"], cache["bytes"]) == ("Ready", 9)
    assert find(edge.status[("serving", "llama")]["conditions"], "ModelCached")["status"] == "True"
    assert edge.replicas() == 1  # the reconcile after Ready gave the engines their replicas
    assert "ModelCached" in events.reasons()


async def _running_download(controller, edge) -> tuple[dict, str]:
    """A cached model whose download Job runs: (its body, the Job's name)."""
    body = model_body(CACHED)
    await controller.reconcile(body, [])
    job = copy.deepcopy(_download_job(edge))
    job["status"] = {"active": 1}
    await controller.download_seen(stored(body, edge), job, [])
    return body, job["metadata"]["name"]


async def test_a_running_download_shows_its_progress_from_the_pods_log(controller, edge, events) -> None:
    body, name = await _running_download(controller, edge)
    await controller.download_progress(stored(body, edge))  # no pod yet: nothing read, nothing written
    assert "bytes" not in edge.status[("serving", "llama")]["modelCache"]
    edge.pods_of_jobs[name] = [
        {"metadata": {"name": "old", "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Failed"}},
        {"metadata": {"name": "now", "creationTimestamp": "2026-01-01T00:01:00Z"}, "status": {"phase": "Running"}},
    ]
    edge.logs["now"] = '{"progress":{"bytesDone":0,"bytesTotal":100}}\n{"progress":{"bytesDone":40,"bytesTotal":100}}'
    await controller.download_progress(stored(body, edge))
    cache = edge.status[("serving", "llama")]["modelCache"]
    assert (cache["phase"], cache["bytes"], cache["bytesTotal"]) == ("Downloading", 40, 100)
    assert cache["message"].endswith("(40%)")
    assert edge.log_reads == [("serving", "now", "download")]
    writes = len(edge.status_patches)
    await controller.download_progress(stored(body, edge))  # the same figures: no write
    assert len(edge.status_patches) == writes
    assert events.reasons().count("ModelDownloading") == 1  # progress is no new phase


async def test_a_download_pod_that_cannot_start_says_why(controller, edge, events) -> None:
    body, name = await _running_download(controller, edge)
    starting = {"metadata": {"name": "p", "creationTimestamp": "2026-01-01T00:00:00Z"}, "status": {"phase": "Pending"}}
    edge.pods_of_jobs[name] = [starting]
    await controller.download_progress(stored(body, edge))  # merely starting: nothing to say
    assert edge.status[("serving", "llama")]["modelCache"]["message"] == f"the Job {name} downloads it"
    unbound = "0/6 nodes are available: pod has unbound immediate PersistentVolumeClaims."
    starting["status"]["conditions"] = [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": unbound}
    ]
    await controller.download_progress(stored(body, edge))
    cache = edge.status[("serving", "llama")]["modelCache"]
    assert cache["phase"] == "Downloading"
    assert cache["message"] == f"the Job {name} cannot download it yet: its pod p is not scheduled: {unbound}"
    assert edge.log_reads == []  # a pod that does not run has no log to read
    starting["status"] = {"phase": "Running"}
    edge.logs["p"] = '{"progress":{"bytesDone":5,"bytesTotal":10}}'
    await controller.download_progress(stored(body, edge))
    assert edge.status[("serving", "llama")]["modelCache"]["message"].endswith("(50%)")  # running now


async def test_a_gated_download_fails_with_its_reason_and_no_engines(controller, edge, events) -> None:
    body = model_body(CACHED)
    await controller.reconcile(body, [])
    job = copy.deepcopy(_download_job(edge))
    job["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "failed with exit code 3"}]}
    await controller.download_seen(stored(body, edge), job, [])
    cache = edge.status[("serving", "llama")]["modelCache"]
    assert (cache["phase"], cache["reason"]) == ("Failed", "Gated")
    condition = find(edge.status[("serving", "llama")]["conditions"], "ModelCached")
    assert (condition["status"], condition["reason"]) == ("False", "Gated")
    assert ("Warning", "ModelDownloadFailed") == events.events[-1][:2]
    assert edge.replicas() == 0


async def test_a_job_of_another_source_is_not_this_caches_story(controller, edge) -> None:
    body = model_body(CACHED)
    await controller.reconcile(body, [])
    job = {
        "metadata": {"name": "llama-fetch-000000"},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]},
    }
    await controller.download_seen(stored(body, edge), job, [])
    assert "modelCache" not in edge.status[("serving", "llama")]


async def test_a_cache_the_spec_drops_leaves_status_with_the_next_reconcile(controller, edge) -> None:
    body = model_body(CACHED)
    await controller.reconcile(body, [])
    job = copy.deepcopy(_download_job(edge))
    job["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    await controller.download_seen(stored(body, edge), job, [])
    assert edge.status[("serving", "llama")]["modelCache"]["phase"] == "Ready"
    plain = model_body(
        {"engine": {"kind": "sim", "model": "m"}}, generation=2, status=edge.status[("serving", "llama")]
    )
    await controller.reconcile(plain, [])
    status = edge.status[("serving", "llama")]
    assert status.get("modelCache") is None
    assert find(status["conditions"], "ModelCached") is None


async def test_status_adapters_are_written_only_when_they_change(controller, edge) -> None:
    body = model_body()
    entries = [{"name": "sql", "replicas": 1, "pods": ["llama-engine-a"], "desiredReplicas": 1}]
    assert await controller.adapters_reported(body, (SQL,), entries)
    assert edge.status[("serving", "llama")]["adapters"] == entries
    assert find(edge.status[("serving", "llama")]["conditions"], "AdaptersLoaded")["status"] == "True"
    assert not await controller.adapters_reported(body, (SQL,), entries)
    assert len(edge.status_patches) == 1


async def test_status_adapters_go_when_the_spec_turns_lora_off(controller, edge) -> None:
    lora = {"engine": {"kind": "sim", "model": "tiny", "lora": {}}, "adapters": []}
    entries = [{"name": "sql", "replicas": 1, "pods": ["llama-engine-a"]}]
    await controller.adapters_reported(model_body(lora), (SQL,), entries)
    await controller.reconcile(model_body(lora, status=edge.status[("serving", "llama")]), [])
    assert edge.status[("serving", "llama")]["adapters"] == entries  # the sync's to keep while LoRA is on
    assert find(edge.status[("serving", "llama")]["conditions"], "AdaptersLoaded") is None  # no adapters: none
    await controller.reconcile(model_body(generation=2, status=edge.status[("serving", "llama")]), [])
    assert "adapters" not in edge.status[("serving", "llama")]


WITH_ADAPTERS = {
    "engine": {"kind": "sim", "lora": {"maxLoras": 2}},
    "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "1Gi"}},
    "adapters": [
        {"name": "sql", "source": {"hub": {"id": "acme/sql-lora"}}},
        {"name": "bad", "source": {"hub": {"id": "acme/missing-lora", "revision": "v2"}}},
    ],
}


def _adapter_jobs(edge) -> dict[str, dict]:
    """The adapters' download Jobs, by the marker link their downloader is given."""
    jobs = [obj for (kind, _, _), obj in edge.objects.items() if kind == "Job"]
    out = {}
    for job in jobs:
        args = job["spec"]["template"]["spec"]["containers"][0]["args"]
        link = args[args.index("--link") + 1]
        if "/adapters/" in link:
            out[link.rsplit("/", 1)[1].split("@")[0]] = copy.deepcopy(job)
    return out


def _entry(edge, name: str) -> dict:
    return next(e for e in edge.status[("serving", "llama")]["adapters"] if e["name"] == name)


async def test_each_hub_adapters_download_shows_in_its_entry_with_an_event_per_transition(
    controller, edge, events
) -> None:
    body = model_body(WITH_ADAPTERS)
    await controller.reconcile(body, [])
    jobs = _adapter_jobs(edge)
    assert sorted(jobs) == ["bad", "sql"]
    jobs["sql"]["status"] = {"active": 1}
    await controller.download_seen(stored(body, edge), jobs["sql"], [])
    sql = _entry(edge, "sql")
    assert (sql["download"]["phase"], sql["download"]["source"]) == ("Downloading", "hub:acme/sql-lora@main")
    assert (sql["replicas"], sql["pods"]) == (0, [])  # the sync has not reported: on no pod
    loaded = find(edge.status[("serving", "llama")]["conditions"], "AdaptersLoaded")
    assert (loaded["status"], loaded["reason"], loaded["message"]) == ("False", "Downloading", "downloading: sql, bad")
    assert events.events[-1][:2] == ("Normal", "AdapterDownloading")
    assert events.events[-1][2].startswith("adapter sql: acme/sql-lora@main: the Job")

    jobs["sql"]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    await controller.download_seen(stored(body, edge), jobs["sql"], [])
    assert _entry(edge, "sql")["download"]["phase"] == "Ready"
    assert events.events[-1][:3] == ("Normal", "AdapterCached", "adapter sql: acme/sql-lora@main is in the cache")

    name = jobs["bad"]["metadata"]["name"]
    jobs["bad"]["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "PodFailurePolicy"}]}
    said = '{"message": "404 Client Error: Repository Not Found for url: .../acme/missing-lora"}'
    edge.pods_of_jobs[name] = [
        {"status": {"containerStatuses": [{"state": {"terminated": {"exitCode": 4, "message": said}}}]}}
    ]
    await controller.download_seen(stored(body, edge), jobs["bad"], [])
    bad = _entry(edge, "bad")["download"]
    assert (bad["phase"], bad["reason"]) == ("Failed", "NotFound")
    assert "check the adapter's source.hub" in bad["message"]
    assert "Repository Not Found" in bad["message"]
    loaded = find(edge.status[("serving", "llama")]["conditions"], "AdaptersLoaded")
    assert (loaded["status"], loaded["reason"]) == ("False", "DownloadFailed")
    assert loaded["message"].startswith("download failed: bad (NotFound); not yet loaded")
    kind, reason, message = events.events[-1][:3]
    assert (kind, reason) == ("Warning", "AdapterDownloadFailed")
    assert message.startswith("adapter bad: NotFound: no such repository")
    assert "Repository Not Found" in message

    told, writes = len(events.events), len(edge.status_patches)
    await controller.download_seen(stored(body, edge), jobs["bad"], [])  # the same Job again: nothing new
    again = copy.deepcopy(jobs["sql"])
    again["status"] = {"active": 1}  # sql's Job deleted by hand and made again: it finds the marker
    await controller.download_seen(stored(body, edge), again, [])
    assert (len(events.events), len(edge.status_patches)) == (told, writes)
    assert _entry(edge, "sql")["download"]["phase"] == "Ready"


async def test_the_syncs_report_keeps_the_downloads_and_removing_the_failed_adapter_clears_it(
    controller, edge, events
) -> None:
    body = model_body(WITH_ADAPTERS)
    await controller.reconcile(body, [])
    jobs = _adapter_jobs(edge)
    jobs["sql"]["status"] = {"conditions": [{"type": "Complete", "status": "True"}]}
    jobs["bad"]["status"] = {"conditions": [{"type": "Failed", "status": "True", "message": "exit code 4"}]}
    for job in jobs.values():
        await controller.download_seen(stored(body, edge), job, [])
    spec = (
        AdapterSpec("sql", HubSource("acme/sql-lora")),
        AdapterSpec("bad", HubSource("acme/missing-lora", "v2")),
    )
    pods = ["llama-engine-a", "llama-engine-b"]
    entries = [
        {"name": "sql", "replicas": 2, "pods": pods, "desiredReplicas": 2},
        {"name": "bad", "replicas": 0, "pods": [], "desiredReplicas": 2},
    ]
    assert await controller.adapters_reported(stored(body, edge), spec, entries)
    assert _entry(edge, "sql")["download"]["phase"] == "Ready"  # the sync's write keeps the Job watch's part
    assert _entry(edge, "bad")["download"]["reason"] == "NotFound"
    loaded = find(edge.status[("serving", "llama")]["conditions"], "AdaptersLoaded")
    assert (loaded["status"], loaded["reason"], loaded["message"]) == (
        "False",
        "DownloadFailed",
        "download failed: bad (NotFound)",
    )
    assert not await controller.adapters_reported(stored(body, edge), spec, entries)  # no change: no write

    assert await controller.adapters_reported(stored(body, edge), spec[:1], entries[:1])  # bad left the spec
    assert [e["name"] for e in edge.status[("serving", "llama")]["adapters"]] == ["sql"]
    loaded = find(edge.status[("serving", "llama")]["conditions"], "AdaptersLoaded")
    assert (loaded["status"], loaded["reason"]) == ("True", "Loaded")


async def test_a_per_node_cache_follows_the_engine_pods_downloads_with_events(controller, edge, events) -> None:
    spec = {"model": {"hub": {"id": "acme/tiny"}, "cache": {"perNode": {}}}, "engine": {"kind": "sim"}, "replicas": 2}
    body = model_body(spec)
    await controller.reconcile(body, [])
    template_hash = controller.status_plan(stored(body, edge), {}).engine_hash

    def engine(name: str, node: str, download: dict) -> dict:
        found = pod(name, spec_hash=template_hash, ready=False)
        found["spec"]["nodeName"] = node
        found["status"]["initContainerStatuses"] = [{"name": "model-download", **download}]
        return found

    running = {"state": {"running": {}}}
    gated = {"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 3}}}
    await controller.sync(stored(body, edge), [engine("a", "n1", running), engine("b", "n2", running)], background=True)
    cache = stored(body, edge)["status"]["modelCache"]
    assert (cache["phase"], cache["nodesDownloading"]) == ("Downloading", 2)
    await controller.sync(stored(body, edge), [engine("a", "n1", gated), engine("b", "n2", running)], background=True)
    status = stored(body, edge)["status"]
    assert (status["modelCache"]["phase"], status["modelCache"]["reason"]) == ("Failed", "Gated")
    condition = find(status["conditions"], "ModelCached")
    assert (condition["status"], condition["reason"]) == ("False", "Gated")
    assert "HF_TOKEN" in condition["message"]
    assert [r for r in events.reasons() if r.startswith("Model")] == ["ModelDownloading", "ModelDownloadFailed"]
    done = {"state": {"terminated": {"exitCode": 0}}}
    await controller.sync(stored(body, edge), [engine("a", "n1", done), engine("b", "n2", done)], background=True)
    status = stored(body, edge)["status"]
    assert (status["modelCache"]["phase"], status["modelCache"]["nodesReady"]) == ("Ready", 2)
    assert find(status["conditions"], "ModelCached")["status"] == "True"
    assert events.reasons()[-1] == "ModelCached"
