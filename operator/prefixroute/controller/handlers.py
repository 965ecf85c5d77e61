"""kopf wiring: what the operator watches and which function each event reaches.

- PrefixRoutedModel create / spec update / resume → ``Controller.reconcile``.
- Every PrefixRoutedModel event (status included, e.g. the autoscaler's ring weights)
  and every pod event of a model's pods → ``Controller.sync`` (ring, counts, Ready, Progressing).
- A model cache's download Job changed → ``Controller.download_seen`` (status.modelCache);
  deleted → ``Controller.reconcile`` makes it again.
- A child Deployment or Service deleted, or a Deployment whose pod template no longer
  carries the planned spec hash (a hand edit) → ``Controller.reconcile`` puts it back.
  Every child Deployment event → ``Controller.deployment_seen``: Degraded PodsRefused while
  the API server refuses its pods (refusal_status).
- Two in-memory indexes (kopf keeps them current from its watches) give each handler the
  model and its pods without an API call: ``models`` and ``model_pods``, by (namespace, name).
- What must run every second (the autoscaler's ticks) runs in ``models_loop.ModelsLoop``,
  started by the startup handler and stopped by the cleanup handler, over the same indexes,
  respecting kopf's peering.

kopf keeps its own bookkeeping in status.kopf (not annotations). Nothing here needs a
finalizer: no deletion handler (owner references garbage-collect the children), no timer or
daemon (kopf would give their resources one). So deleting everything at once — models,
operator, CRD — leaves nothing Terminating. ``FINALIZER`` stays kopf's finalizer name only so
that kopf removes it from resources an earlier release gave it to (kopf drops its finalizer
from a resource that no handler needs it for, at that resource's next event).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

import kopf

from prefixroute.controller import refusal_status
from prefixroute.controller.adapter_sync import AdapterSync
from prefixroute.controller.autoscale_tick import Autoscaler
from prefixroute.controller.errors import ApplyFailed, SpecError
from prefixroute.controller.http_edge import get_text
from prefixroute.controller.models_loop import ModelsLoop
from prefixroute.controller.names import ANNOTATION_SPEC_HASH, LABEL_MANAGED_BY, LABEL_MODEL, MANAGED_BY
from prefixroute.controller.peering import Peering
from prefixroute.controller.plan import Plan, plan_for
from prefixroute.controller.reconcile import Controller
from prefixroute.controller.ring_status import slim_pod
from prefixroute.controller.spec.model import ModelRef
from prefixroute.crd import GROUP, PLURAL, VERSION

POD_LABELS: dict[str, Any] = {LABEL_MODEL: kopf.PRESENT, LABEL_MANAGED_BY: MANAGED_BY}
LOG = logging.getLogger(__name__)
T = TypeVar("T")
RETRY_SECONDS = 15.0
FINALIZER = "prefixroute.io/autoscaler"  # an earlier release's; kopf removes it (see above)


def post_event(ref: ModelRef, type_: str, reason: str, message: str) -> None:
    """Events on the PrefixRoutedModel, through kopf's posting queue (batched, retried)."""
    body = cast(kopf.Body, ref.object_reference())  # kopf only reads apiVersion, kind and metadata
    kopf.event(body, type=type_, reason=reason, message=message[:1024])


def _controller(memo: Any) -> Controller:
    controller: Controller = memo.controller
    return controller


def _pods_of(model_pods: Any, key: tuple[str, str]) -> Callable[[], list[Any]]:
    """The model's pods as the index holds them when the controller reads them (under the
    model's lock), not as they were when this event arrived."""
    return lambda: list(model_pods.get(key, ()))


def _first(store: Any) -> Any:
    return next(iter(store), None) if store is not None else None


# --- indexes -----------------------------------------------------------------------------


def index_model(namespace: str, name: str, body: Mapping[str, Any], **_: Any) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (namespace, name): {
            "metadata": {k: body["metadata"].get(k) for k in ("name", "namespace", "uid", "generation")},
            "spec": dict(body.get("spec") or {}),
            "status": dict(body.get("status") or {}),
        }
    }


def index_pod(
    namespace: str, labels: Mapping[str, str], body: Mapping[str, Any], **_: Any
) -> dict[tuple[str, str], dict[str, Any]]:
    return {(namespace, labels[LABEL_MODEL]): slim_pod(body)}


# --- handlers ----------------------------------------------------------------------------


async def reconcile_model(
    body: Mapping[str, Any],
    namespace: str,
    name: str,
    memo: Any,
    model_pods: Any,
    logger: logging.Logger | logging.LoggerAdapter[Any] = LOG,
    **_: Any,
) -> None:
    """Spec problems end here, in status and events, not as exceptions (which kopf would
    retry forever); only failures that may pass are raised, as kopf's TemporaryError.
    Returns nothing: kopf would store a result in status.<handler id>, which the CRD prunes."""
    try:
        outcome = await _controller(memo).reconcile(body, _pods_of(model_pods, (namespace, name)))
    except ApplyFailed as exc:
        raise kopf.TemporaryError(str(exc), delay=exc.retry_after or RETRY_SECONDS) from exc
    logger.info("%s: %s", outcome.reason, outcome.message)


def start_models_loop(memo: Any) -> None:
    """Start the models loop from inside kopf's handling of a resource, once
    (``ModelsLoop.start``): its tasks then inherit this context, where kopf's event posting
    is set up (``kopf.event`` reads its queue from context variables that kopf sets for
    resource handlers, not for startup handlers). Before any model was seen there is
    nothing for the loop to do."""
    models_loop: ModelsLoop | None = getattr(memo, "models_loop", None)
    if models_loop is not None:
        models_loop.start()


async def model_event(
    type: str | None, body: Mapping[str, Any], namespace: str, name: str, memo: Any, model_pods: Any, **_: Any
) -> None:
    start_models_loop(memo)
    if type == "DELETED":
        _controller(memo).forget(namespace, name)
        return
    await _controller(memo).sync(body, _pods_of(model_pods, (namespace, name)))


async def pod_event(
    namespace: str, labels: Mapping[str, str], memo: Any, models: Any, model_pods: Any, **_: Any
) -> None:
    key = (namespace, labels.get(LABEL_MODEL, ""))
    model = _first(models.get(key))
    if model is None:  # pods of a model that is gone, or not seen yet (its own event will sync)
        return
    await _controller(memo).sync(model, _pods_of(model_pods, key))


def drifted(
    type_: str | None,
    child: Mapping[str, Any],
    model: Mapping[str, Any],
    plans: Callable[[Mapping[str, Any]], Plan] = plan_for,
) -> bool:
    """Whether a child event means the child no longer is what the plan says: it was
    deleted, or (for a Deployment) its pod template is not the planned one. Replica counts
    are left alone here: the autoscaler may be moving them."""
    if type_ == "DELETED":
        return True
    if child.get("kind") != "Deployment":
        return False
    try:
        plan = plans(model)
    except SpecError:
        return False  # nothing to restore until the spec is fixed
    planned = plan.template_hashes.get(str((child.get("metadata") or {}).get("name")))
    if planned is None:
        return False
    annotations = (((child.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("annotations") or {}
    return annotations.get(ANNOTATION_SPEC_HASH) != planned


async def child_event(
    type: str | None,
    body: Mapping[str, Any],
    namespace: str,
    labels: Mapping[str, str],
    memo: Any,
    models: Any,
    model_pods: Any,
    **_: Any,
) -> None:
    key = (namespace, labels.get(LABEL_MODEL, ""))
    model = _first(models.get(key))
    if model is not None and body.get("kind") == "Deployment":  # pods the API server refuses?
        refusal = None if type == "DELETED" else refusal_status.refusal(body)
        await _controller(memo).deployment_seen(model, str(body["metadata"]["name"]), refusal)
    if model is not None and drifted(type, body, model, _controller(memo).plans):
        try:
            await _controller(memo).reconcile(model, _pods_of(model_pods, key))
        except ApplyFailed as exc:
            raise kopf.TemporaryError(str(exc), delay=exc.retry_after or RETRY_SECONDS) from exc


async def download_event(
    type: str | None,
    body: Mapping[str, Any],
    namespace: str,
    labels: Mapping[str, str],
    memo: Any,
    models: Any,
    model_pods: Any,
    **_: Any,
) -> None:
    """A model cache's download Job changed: status.modelCache follows it; a deleted one is
    made again by a reconcile (how a person asks for a failed download to be tried again)."""
    key = (namespace, labels.get(LABEL_MODEL, ""))
    model = _first(models.get(key))
    if model is None:
        return
    try:
        if type == "DELETED":
            await _controller(memo).reconcile(model, _pods_of(model_pods, key))
        else:
            await _controller(memo).download_seen(model, body, _pods_of(model_pods, key))
    except ApplyFailed as exc:
        raise kopf.TemporaryError(str(exc), delay=exc.retry_after or RETRY_SECONDS) from exc


def probe_models(models: Any, **_: Any) -> int:
    """Reported on the liveness endpoint: how many models this replica tracks."""
    return len(models)


class LeanDiffBase(kopf.StatusDiffBaseStorage):
    """kopf's diff base in status.kopf.diffbase, its essence built from what it keeps.

    On every event of a model kopf builds the resource's essence (spec, labels, annotations,
    the fields its handlers watch) to see what changed, by deep-copying the whole body and
    dropping the rest: the status with its ring, metadata.managedFields. Under churn at 1,000
    models that copy was a seventh of the operator's time, for the status writes' own echoes.
    The same essence from a copy of just what it keeps."""

    def build(self, *, body: kopf.Body, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        extra = list(extra_fields or ())
        kept = {(f.split(".") if isinstance(f, str) else list(f))[0] for f in extra if f}
        slim: dict[str, Any] = {k: v for k, v in body.items() if k not in ("metadata", "status") or k in kept}
        if "metadata" not in kept:
            meta = body.get("metadata") or {}
            slim["metadata"] = {k: meta[k] for k in ("labels", "annotations") if k in meta}
        return super().build(body=cast(kopf.Body, slim), extra_fields=extra)


def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    # bookkeeping in status.kopf only (the CRD keeps that field): no annotations on the resource
    settings.persistence.progress_storage = kopf.StatusProgressStorage(field="status.kopf.progress")
    settings.persistence.diffbase_storage = LeanDiffBase(field="status.kopf.diffbase")
    settings.posting.level = logging.WARNING  # our own events say what happened; kopf's INFO logs would only repeat it
    settings.watching.server_timeout = 300  # re-list now and then, whatever the network does
    settings.watching.client_timeout = 330
    settings.persistence.finalizer = FINALIZER  # never added now; removed where an earlier release added it


EVENT_HANDLERS = ("sync_model", "sync_pods", "repair_deployments", "repair_services", "watch_downloads")


class QuietEventHandlers(logging.Filter):
    """kopf logs "Handler '<id>' succeeded." at INFO for every event a watching handler takes:
    for the pod and model watches, every pod change and every echo of a status write (47,000
    lines in a 14-minute run at 1,000 models, two thirds of the log). Those lines go; failures,
    warnings and the reconcile's own lines stay (``--verbose`` keeps them all)."""

    def __init__(self, ids: Iterable[str] = EVENT_HANDLERS) -> None:
        super().__init__()
        self._lines = frozenset(f"Handler {i!r} succeeded." for i in ids)

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.INFO or record.getMessage() not in self._lines


def _on_loop(fn: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """``fn`` as a coroutine function. kopf runs a plain function in a worker thread, a hop
    there and back for every event: for the index functions, called on every pod and model
    event, that hop cost more than the work (a tenth of the operator's time under churn at
    100 models). They only copy a few fields, so they run on the loop."""

    async def run(**kwargs: Any) -> T:
        return fn(**kwargs)

    return run


def _fn(handler: Callable[..., Any]) -> Any:
    """Our handlers take the keyword arguments they use; kopf's callback protocols list
    every argument kopf may pass. kopf calls with keywords, so the narrower ones are safe."""
    return handler


def build_registry(
    make_controller: Callable[[], Controller],
    make_autoscaler: Callable[[Controller], Autoscaler] | None = None,
    peering: Peering | None = None,
) -> kopf.OperatorRegistry:
    """A registry of its own (not kopf's global one): importing this module registers
    nothing, and tests build as many operators as they like. ``make_autoscaler`` defaults
    to one that reads Prometheus; ``peering`` is what was given to ``kopf.run`` (None:
    standalone)."""
    registry = kopf.OperatorRegistry()

    def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
        return kopf.login_via_client(**kwargs)

    async def startup(settings: kopf.OperatorSettings, memo: Any, models: Any, model_pods: Any, **_: Any) -> None:
        configure(settings)
        memo.controller = make_controller()
        memo.autoscaler = (make_autoscaler or prometheus_autoscaler)(memo.controller)
        memo.models_loop = ModelsLoop(
            autoscaler=memo.autoscaler,
            models=models,
            model_pods=model_pods,
            peering=peering or Peering(identity=""),
            read_peering=memo.controller.edge.read_peering,
            fetch=get_text,
            adapters=AdapterSync(),
        )
        # started by the first model event (start_models_loop)

    async def cleanup(memo: Any, **_: Any) -> None:
        models_loop: ModelsLoop | None = getattr(memo, "models_loop", None)
        if models_loop is not None:
            await models_loop.stop()

    kopf.on.login(registry=registry)(_fn(login))
    kopf.on.startup(registry=registry)(_fn(startup))
    kopf.on.cleanup(registry=registry)(_fn(cleanup))
    kopf.index(GROUP, VERSION, PLURAL, id="models", registry=registry)(_fn(_on_loop(index_model)))
    kopf.index("v1", "pods", labels=POD_LABELS, id="model_pods", registry=registry)(_fn(_on_loop(index_pod)))
    for decorate in (kopf.on.create, kopf.on.resume):
        decorate(GROUP, VERSION, PLURAL, id="reconcile", registry=registry)(_fn(reconcile_model))
    kopf.on.update(GROUP, VERSION, PLURAL, id="reconcile", field="spec", registry=registry)(_fn(reconcile_model))
    kopf.on.event(GROUP, VERSION, PLURAL, id="sync_model", registry=registry)(_fn(model_event))
    kopf.on.event("v1", "pods", labels=POD_LABELS, id="sync_pods", registry=registry)(_fn(pod_event))
    kopf.on.event("apps", "v1", "deployments", labels=POD_LABELS, id="repair_deployments", registry=registry)(
        _fn(child_event)
    )
    kopf.on.event("v1", "services", labels=POD_LABELS, id="repair_services", registry=registry)(_fn(child_event))
    kopf.on.event("batch", "v1", "jobs", labels=POD_LABELS, id="watch_downloads", registry=registry)(
        _fn(download_event)
    )
    kopf.on.probe(id="models", registry=registry)(_fn(probe_models))
    return registry


QUERIES_AT_ONCE = 4
"""A round's queries go to Prometheus this many at a time (at 1,000 models a round asks over a
hundred: a dozen per-pod ones, then the TTFT chunks)."""


def prometheus_autoscaler(controller: Controller, default_url: str | None = None) -> Autoscaler:
    from concurrent.futures import ThreadPoolExecutor

    from prefixroute.autoscaling.prometheus_signals import PrometheusReader
    from prefixroute.controller.prometheus_edge import prometheus_query
    from prefixroute.controller.prometheus_trust import PrometheusTrust

    queries = ThreadPoolExecutor(QUERIES_AT_ONCE, thread_name_prefix="prometheus")
    trust = PrometheusTrust(read=controller.edge.read_data)
    return Autoscaler(
        controller=controller,
        read=PrometheusReader(make_query=prometheus_query, default_url=default_url, trust=trust, run=queries.map),
    )
