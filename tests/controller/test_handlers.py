"""The kopf handlers, called as kopf calls them, with kopf's indexes as plain mappings."""

import asyncio
import copy
import inspect
import logging
from types import SimpleNamespace

import kopf
import pytest

from prefixroute.controller import handlers
from prefixroute.controller.errors import ApplyFailed
from prefixroute.controller.reconcile import Controller
from tests.controller.helpers import Clock, EventLog, FakeEdge, model_body, pod

KEY = ("serving", "llama")


@pytest.fixture
def edge() -> FakeEdge:
    return FakeEdge()


@pytest.fixture
def memo(edge):
    return SimpleNamespace(controller=Controller(edge=edge, events=EventLog(), clock=Clock()))


def test_indexes_key_pods_and_models_by_namespace_and_name() -> None:
    body = model_body(status={"ring": {"members": []}})
    assert handlers.index_model(namespace="serving", name="llama", body=body) == {
        KEY: {
            "metadata": {"name": "llama", "namespace": "serving", "uid": "uid-1", "generation": 1},
            "spec": body["spec"],
            "status": body["status"],
        }
    }
    indexed = handlers.index_pod(namespace="serving", labels={"prefixroute.io/model": "llama"}, body=pod("a"))
    assert list(indexed) == [KEY]
    assert indexed[KEY]["metadata"]["name"] == "a"


async def test_reconcile_handler_applies_and_returns_nothing_for_kopf_to_store(memo, edge) -> None:
    result = await handlers.reconcile_model(
        body=model_body(), namespace="serving", name="llama", memo=memo, model_pods={}
    )
    assert result is None
    assert len(edge.objects) == 8


async def test_an_invalid_spec_is_handled_not_raised(memo, edge) -> None:
    await handlers.reconcile_model(
        body=model_body({"engine": {"kind": "custom"}}), namespace="serving", name="llama", memo=memo, model_pods={}
    )
    assert edge.objects == {}
    assert edge.status[KEY]["conditions"][-1]["reason"] == "InvalidSpec"


async def test_transient_failures_become_kopf_temporary_errors(memo, edge) -> None:
    edge.fail["Service"] = ApplyFailed("Service llama-engine: etcdserver: request timed out", status=500)
    with pytest.raises(kopf.TemporaryError) as caught:
        await handlers.reconcile_model(body=model_body(), namespace="serving", name="llama", memo=memo, model_pods={})
    assert caught.value.delay == handlers.RETRY_SECONDS


async def test_pod_events_update_the_ring_from_the_indexes(memo, edge) -> None:
    model = handlers.index_model(namespace="serving", name="llama", body=model_body())[KEY]
    pods = [
        handlers.index_pod(namespace="serving", labels={"prefixroute.io/model": "llama"}, body=p)[KEY]
        for p in (pod("a"), pod("b", ip="10.0.0.2", ready=False))
    ]
    await handlers.pod_event(
        namespace="serving",
        labels={"prefixroute.io/model": "llama"},
        memo=memo,
        models={KEY: [model]},
        model_pods={KEY: pods},
    )
    assert [m["pod"] for m in edge.status[KEY]["ring"]["members"]] == ["a"]


async def test_pods_of_an_unknown_model_are_ignored(memo, edge) -> None:
    await handlers.pod_event(
        namespace="serving", labels={"prefixroute.io/model": "gone"}, memo=memo, models={}, model_pods={}
    )
    assert edge.status_patches == []


async def test_model_events_sync_and_deletion_forgets(memo, edge) -> None:
    await handlers.model_event(
        type="MODIFIED", body=model_body(), namespace="serving", name="llama", memo=memo, model_pods={KEY: [pod("a")]}
    )
    assert edge.status[KEY]["readyReplicas"] == 1
    await handlers.model_event(
        type="DELETED", body=model_body(), namespace="serving", name="llama", memo=memo, model_pods={}
    )
    assert memo.controller.locks == {}


def test_kopf_keeps_its_bookkeeping_in_status_only() -> None:
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    assert isinstance(settings.persistence.progress_storage, kopf.StatusProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, kopf.StatusDiffBaseStorage)


def test_no_handler_needs_a_finalizer_and_the_old_one_is_removed() -> None:
    """No deletion handler, no timer or daemon (kopf would give their resources a finalizer):
    deleting a model, its operator and the CRD at once leaves nothing Terminating. The
    periodic work runs in the models loop, started and stopped by the activity handlers.
    kopf's finalizer name stays the earlier release's, so kopf removes it where it exists."""
    registry = handlers.build_registry(lambda: None)  # type: ignore[arg-type,return-value]
    changing = registry._changing.get_all_handlers()
    assert {h.reason for h in changing} == {kopf.Reason.CREATE, kopf.Reason.UPDATE, None}  # None: on.resume
    assert any(h.initial for h in changing)
    assert not any(h.requires_finalizer for h in changing)
    assert registry._spawning.get_all_handlers() == []
    activities = {h.activity for h in registry._activities.get_all_handlers()}
    assert {"startup", "cleanup"} <= {a.value for a in activities}
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    assert settings.persistence.finalizer == handlers.FINALIZER == "prefixroute.io/autoscaler"
    assert {h.id for h in registry._indexing.get_all_handlers()} == {"models", "model_pods"}
    assert {h.id for h in registry._watching.get_all_handlers()} == {
        "sync_model",
        "sync_pods",
        "repair_deployments",
        "repair_services",
        "watch_downloads",
    }


def test_probe_reports_tracked_models() -> None:
    assert handlers.probe_models(models={KEY: [1], ("a", "b"): [2]}) == 2


def _engine_deployment(body):
    from prefixroute.controller.plan import plan_for

    return next(
        o for o in plan_for(body).objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-engine"
    )


def test_drift_is_a_deletion_or_a_foreign_pod_template() -> None:
    body = model_body()
    deployment = _engine_deployment(body)
    assert not handlers.drifted("MODIFIED", deployment, body)
    assert handlers.drifted("DELETED", deployment, body)
    edited = {**deployment, "spec": {**deployment["spec"], "template": {"metadata": {"annotations": {}}, "spec": {}}}}
    assert handlers.drifted("MODIFIED", edited, body)
    scaled = {**deployment, "spec": {**deployment["spec"], "replicas": 7}}
    assert not handlers.drifted("MODIFIED", scaled, body)  # the autoscaler's business
    assert not handlers.drifted("MODIFIED", edited, model_body({"engine": {"kind": "custom"}}))
    assert not handlers.drifted("MODIFIED", {"kind": "Service", "metadata": {"name": "llama-engine"}}, body)


async def test_a_deleted_child_is_put_back(memo, edge) -> None:
    body = model_body()
    await handlers.reconcile_model(body=body, namespace="serving", name="llama", memo=memo, model_pods={})
    deployment = edge.objects.pop(("Deployment", "serving", "llama-engine"))
    model = handlers.index_model(namespace="serving", name="llama", body=body)[KEY]
    await handlers.child_event(
        type="DELETED",
        body=deployment,
        namespace="serving",
        labels={"prefixroute.io/model": "llama"},
        memo=memo,
        models={KEY: [model]},
        model_pods={},
    )
    assert ("Deployment", "serving", "llama-engine") in edge.objects
    before = edge.applies
    await handlers.child_event(
        type="MODIFIED",
        body=deployment,
        namespace="serving",
        labels={"prefixroute.io/model": "llama"},
        memo=memo,
        models={KEY: [model]},
        model_pods={},
    )
    assert edge.applies == before


async def test_a_deployment_whose_pods_are_refused_makes_the_model_degraded(memo, edge) -> None:
    body = model_body()
    await handlers.reconcile_model(body=body, namespace="serving", name="llama", memo=memo, model_pods={})
    deployment = copy.deepcopy(edge.objects[("Deployment", "serving", "llama-engine")])
    refused = {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": "exceeded quota"}
    deployment["status"] = {"conditions": [refused]}
    model = handlers.index_model(namespace="serving", name="llama", body=body)[KEY]
    for type_ in ("MODIFIED", "DELETED"):  # a Deployment that goes refuses nothing any more
        await handlers.child_event(
            type=type_,
            body=deployment,
            namespace="serving",
            labels={"prefixroute.io/model": "llama"},
            memo=memo,
            models={KEY: [{**model, "status": edge.status[KEY]}]},
            model_pods={},
        )
        degraded = next(c for c in edge.status[KEY]["conditions"] if c["type"] == "Degraded")
        assert degraded["reason"] == ("PodsRefused" if type_ == "MODIFIED" else "Reconciled")


async def test_the_first_model_event_starts_the_models_loop_and_cleanup_stops_it(edge) -> None:
    registry = handlers.build_registry(lambda: Controller(edge=edge, events=EventLog(), clock=Clock()))
    by_activity = {h.activity.value: h.fn for h in registry._activities.get_all_handlers()}
    memo = kopf.Memo()
    await by_activity["startup"](settings=kopf.OperatorSettings(), memo=memo, models={}, model_pods={})
    assert memo.models_loop.task is None
    assert memo.models_loop.models == {}
    for name in ("llama", "mistral", "llama"):  # kopf gives each resource's handlers a shallow copy of the memo
        body = model_body(name=name)
        await handlers.model_event(
            type=None, body=body, namespace="serving", name=name, memo=copy.copy(memo), model_pods={}
        )
    task = memo.models_loop.task
    assert task is not None
    assert not task.done()
    assert [t for t in asyncio.all_tasks() if t.get_name() == "models loop"] == [task]  # one loop, not one a model
    await by_activity["cleanup"](memo=memo)
    assert task.cancelled()


async def test_the_indexes_run_on_the_loop_not_in_kopfs_threads() -> None:
    """kopf sends a plain function to a worker thread for every pod event; ours are coroutines."""
    registry = handlers.build_registry(lambda: Controller(edge=FakeEdge(), events=EventLog(), clock=Clock()))
    by_id = {h.id: h.fn for h in registry._indexing.get_all_handlers()}
    assert all(inspect.iscoroutinefunction(fn) for fn in by_id.values())
    body = model_body()
    assert await by_id["models"](namespace="serving", name="llama", body=body, extra="ignored") == handlers.index_model(
        namespace="serving", name="llama", body=body
    )


@pytest.mark.parametrize("extra", [[("spec",)], [], ["status.ring"], [("metadata", "labels")]])
def test_the_lean_diff_base_is_kopfs_own_essence(extra) -> None:
    raw = model_body({"engine": {"kind": "sim", "model": "m"}, "replicas": 2})
    raw["metadata"] |= {
        "labels": {"team": "a"},
        "annotations": {
            "note": "kept",
            "kubectl.kubernetes.io/last-applied-configuration": "{}",
            "other.example/last-handled-configuration": "{}",
        },
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {"f:replicas": {}}}}],
        "resourceVersion": "42",
    }
    raw["status"] = {"ring": {"members": [{"pod": "a"}]}, "kopf": {"diffbase": "{}", "progress": {}}}
    body = kopf.Body(raw)
    field = "status.kopf.diffbase"
    lean = handlers.LeanDiffBase(field=field).build(body=body, extra_fields=extra)
    assert lean == kopf.StatusDiffBaseStorage(field=field).build(body=body, extra_fields=extra)
    assert "status" not in lean or extra == ["status.ring"]


def test_kopfs_success_lines_of_the_event_handlers_are_dropped_and_nothing_else() -> None:
    quiet = handlers.QuietEventHandlers()

    def record(level: int, message: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", level, __file__, 1, message, None, None)

    assert not quiet.filter(record(logging.INFO, "Handler 'sync_pods' succeeded."))
    assert not quiet.filter(record(logging.INFO, "Handler 'repair_deployments' succeeded."))
    assert quiet.filter(record(logging.INFO, "Handler 'reconcile' succeeded."))
    assert quiet.filter(record(logging.ERROR, "Handler 'sync_pods' failed with an exception."))
