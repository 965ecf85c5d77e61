"""Plan, then apply; and keep status true to the pods. The edge does the I/O.

``Controller`` holds what outlives one handler call: the edge, the event sink, the clock,
one lock per resource (the pod watch, the reconcile and the autoscaler all write status;
the lock makes the last writer the one that read the newest pods) and what it last wrote
(so an unchanged status is never written again).

The edge blocks, so its calls run in worker threads, in lanes of their own: status writes
the pod watch makes (the ring that routers wait for), status writes that may wait (slow-start
steps, the autoscaler's), and applies (children, dry runs). A thousand new models queue some
17,000 applies; in one shared pool a ring update waited behind all of them. Under churn at a
thousand models the ring steps of slow-starting engines alone ask more writes a second than
the API server of the measuring machine serves; a write that may wait takes a place in its
lane before its model's lock, so it never holds the lock while it waits, and skips the steps
its model took meanwhile. Reconciles take turns (``reconcile_limit`` at once, the rest wait
without holding their model's lock): in a pool that served every reconcile's calls in
turn, each model's seventeen calls interleaved with everyone's and no model finished before
nearly all did.

Every plan is made from the freshest status we know (``_view``), not the one in the
event's body: with autoscaling on, the engine replica count comes from
status.autoscaling.desiredReplicas, and a body older than the autoscaler's last write
would otherwise make a reconcile put the previous count back.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from prefixroute.controller import (
    adapter_condition,
    adapter_downloads,
    auth_status,
    cache_status,
    refusal_status,
    tokenizer_status,
)
from prefixroute.controller.builders.model_cache import DOWNLOAD_CONTAINER, download_job
from prefixroute.controller.conditions import DEGRADED, READY, find, merge_conditions
from prefixroute.controller.errors import ApplyError, ApplyFailed, ApplyRejected, SpecError
from prefixroute.controller.metrics import OperatorMetrics
from prefixroute.controller.plan import Plan, StatusPlans, plan_for
from prefixroute.controller.ports import Edge, Events
from prefixroute.controller.ring_status import Pod, ramping, same_members
from prefixroute.controller.spec.adapters import AdapterSpec
from prefixroute.controller.spec.model import ModelRef, model_ref
from prefixroute.controller.spec.model_source import HubSource, cache_ready
from prefixroute.controller.status import changed_fields, degraded_condition, live_status, merge_patch, with_outcome

Key = tuple[str, str]
LOG = logging.getLogger(__name__)
T = TypeVar("T")
STATUS_THREADS = 8
BACKGROUND_THREADS = 4
APPLY_THREADS = 6
RECONCILE_LIMIT = 24  # four a thread: a reconcile between two calls (on the loop) leaves its thread to another


Pods = Iterable[Pod] | Callable[[], Iterable[Pod]]
"""A model's pods, or how to read them. A callable is read once the model's lock is held, so
a status write shows the pods as they are then, not as they were when the event that asked
for it arrived: a burst of pod events queued for the lock becomes one write (the others find
nothing to change), and a reconcile that waited for its turn never writes an old ring."""


def _pods(pods: Pods) -> list[Pod]:
    return list(pods() if callable(pods) else pods)


@dataclass(frozen=True)
class Outcome:
    reason: str  # Reconciled | InvalidSpec | ApplyRejected | ApplyFailed
    message: str
    changed: tuple[str, ...] = ()


def utcnow() -> datetime:
    return datetime.now(UTC)


def _ring_change(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str | None:
    """'+a -b' for an event, or None when the members did not change."""
    before = {m.get("pod") for m in (old or {}).get("members") or ()}
    after = {m["pod"] for m in new["members"]}
    if before == after:
        return None
    diff = [f"+{p}" for p in sorted(after - before)] + [f"-{p}" for p in sorted(before - after, key=str)]
    return f"ring {new['version']}: {len(after)} member(s) ({' '.join(diff)})"


@dataclass
class Controller:
    edge: Edge
    events: Events
    clock: Callable[[], datetime] = utcnow
    locks: dict[Key, asyncio.Lock] = field(default_factory=dict)
    written: dict[Key, tuple[str, dict[str, Any]]] = field(default_factory=dict)  # key -> (uid, fields)
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    status_lane: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(STATUS_THREADS, thread_name_prefix="status")
    )
    apply_lane: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(APPLY_THREADS, thread_name_prefix="apply")
    )
    background_lane: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(BACKGROUND_THREADS, thread_name_prefix="background")
    )
    _places: asyncio.Semaphore | None = None  # one a thread of the background lane
    reconcile_limit: int = RECONCILE_LIMIT
    plans: StatusPlans = field(default_factory=StatusPlans)  # what status and drift checks ask of a plan
    _turns: asyncio.Semaphore | None = None
    deferred: set[Key] = field(default_factory=set)  # models whose counts the models loop writes next
    refused: dict[Key, dict[str, str]] = field(default_factory=dict)  # model -> {Deployment: why its pods are refused}

    def status_plan(self, body: Mapping[str, Any], status: Mapping[str, Any]) -> Plan | None:
        """The plan (without its objects) for this body with this status; None when the spec
        cannot be honoured."""
        try:
            return self.plans({**body, "status": status})
        except SpecError:
            return None

    async def in_status_lane(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking edge call of the status lane (status patches, pod annotations)."""
        return await asyncio.get_running_loop().run_in_executor(
            self.status_lane, functools.partial(fn, *args, **kwargs)
        )

    async def in_apply_lane(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """A blocking edge call of the apply lane (applies, dry runs, deletes, reads)."""
        return await asyncio.get_running_loop().run_in_executor(self.apply_lane, functools.partial(fn, *args, **kwargs))

    def _lock(self, ref: ModelRef) -> asyncio.Lock:
        return self.locks.setdefault((ref.namespace, ref.name), asyncio.Lock())

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop its lock and memory."""
        self.locks.pop((namespace, name), None)
        self.written.pop((namespace, name), None)
        self.refused.pop((namespace, name), None)
        self.metrics.forget(namespace, name)

    def _view(self, ref: ModelRef, status: Mapping[str, Any] | None) -> dict[str, Any]:
        """The freshest status we know: the body's, overlaid with what we wrote since (the
        body handed to a pod event may predate our own last patch)."""
        view = dict(status or {})
        uid, fields = self.written.get((ref.namespace, ref.name), ("", {}))
        if uid == ref.uid:
            view.update(fields)
        return view

    def status_view(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The freshest status of this resource we know (see ``_view``)."""
        return self._view(model_ref(body), body.get("status"))

    @contextlib.asynccontextmanager
    async def _place(self, background: bool) -> AsyncIterator[None]:
        """A place in the background lane, taken before the model's lock (nothing to take for
        the pod watch's writes)."""
        if not background:
            yield
            return
        if self._places is None:
            self._places = asyncio.Semaphore(BACKGROUND_THREADS)
        async with self._places:
            yield

    async def _write(
        self, ref: ModelRef, desired: Mapping[str, Any], view: Mapping[str, Any], background: bool = False
    ) -> dict[str, Any]:
        patch = changed_fields(desired, view)
        if not patch:
            return patch
        lane = self.background_lane if background else self.status_lane
        sent, submitted = merge_patch(patch, view), time.monotonic()

        def timed() -> bool:
            started = time.monotonic()
            try:
                return self.edge.patch_status(ref, sent)
            finally:
                self.metrics.status_written(
                    "background" if background else "watch", started - submitted, time.monotonic() - started
                )

        written: bool = await asyncio.get_running_loop().run_in_executor(lane, timed)
        if written:
            key = (ref.namespace, ref.name)
            uid, fields = self.written.get(key, (ref.uid, {}))
            self.written[key] = (ref.uid, {**(fields if uid == ref.uid else {}), **patch})
            self._announce_node_cache(ref, view, patch)
        return patch

    def _announce_node_cache(self, ref: ModelRef, view: Mapping[str, Any], patch: Mapping[str, Any]) -> None:
        """An Event per new phase of a per-node cache (whose status counts ``nodes``; a claim's
        is announced where its Job is read, in ``download_seen``)."""
        new = patch.get("modelCache")
        if isinstance(new, Mapping) and "nodes" in new:
            event = cache_status.transition_event(view.get("modelCache"), new)
            if event is not None:
                self.events(ref, *event)

    def _announce_ring(self, ref: ModelRef, view: Mapping[str, Any], patch: Mapping[str, Any]) -> None:
        if "ring" in patch:
            change = _ring_change(view.get("ring"), patch["ring"])
            if change:
                self.events(ref, "Normal", "RingChanged", change)

    async def _auth_problem(self, ref: ModelRef, plan: Plan | None, pods: list[Pod]) -> str | None:
        """What keeps router pods from the API-key Secret, from the kubelets' FailedMount
        events (auth_status); asked only while a router pod of a model with keys waits."""
        if plan is None or not plan.spec.auth.keys_on or not auth_status.waiting_routers(pods):
            return None
        try:
            events = await self.in_apply_lane(self.edge.mount_failures, ref.namespace)
        except ApplyError as exc:
            LOG.warning("%s/%s: cannot read FailedMount events: %s", ref.namespace, ref.name, exc)
            return None
        return auth_status.secret_problem(plan.spec.auth, pods, events, self.clock())

    def _with_auth(
        self, ref: ModelRef, desired: dict[str, Any], view: Mapping[str, Any], problem: str | None
    ) -> dict[str, Any]:
        degraded = auth_status.degraded_for(problem, view, ref.generation)
        if degraded is None:
            return desired
        return {**desired, "conditions": merge_conditions(desired.get("conditions"), [degraded], self.clock())}

    def _announce_auth(self, ref: ModelRef, view: Mapping[str, Any], problem: str | None, recovered: bool) -> None:
        """A Warning once per new problem with the Secret; `recovered`: also say when it ends."""
        old = find(view.get("conditions"), DEGRADED) or {}
        was = old.get("status") == "True" and old.get("reason") == auth_status.REASON
        if problem is not None and not (was and old.get("message") == problem):
            self.events(ref, "Warning", auth_status.REASON, problem)
        elif problem is None and was and recovered:
            self.events(ref, "Normal", "Recovered", "the router pods mounted the API-key Secret")

    async def sync(self, body: Mapping[str, Any], pods: Pods, *, background: bool = False) -> dict[str, Any]:
        """Bring the pod-driven status (ring, counts, Ready, Progressing, and Degraded while the
        API-key Secret cannot be mounted) up to date; returns the patch written (empty when
        nothing changed). ``background``: a write that may wait (a slow-start step)."""
        ref, started = model_ref(body), time.monotonic()
        async with self._place(background), self._lock(ref):
            pods = _pods(pods)
            view = self._view(ref, body.get("status"))
            plan = self.status_plan(body, view)
            problem = await self._auth_problem(ref, plan, pods)
            now = self.clock()
            desired = live_status(plan, pods, view, now)
            if not background and _ramp_step_only(plan, pods, view, desired, now):
                desired["ring"] = view["ring"]  # the models loop publishes the step, in the lane that may wait
            if plan is not None:
                desired = self._with_auth(ref, desired, view, problem)
            key = (ref.namespace, ref.name)
            if not background and _may_wait(desired, view):
                self.deferred.add(key)  # the models loop writes it, in the lane of writes that may wait
                return {}
            patch = await self._write(ref, desired, view, background)
            self.deferred.discard(key)  # whatever was put off is in this write, or was already there
            if "ring" in patch and not background:
                self.metrics.ring_updated(time.monotonic() - started)
            self._announce_ring(ref, view, patch)
            self._announce_auth(ref, view, problem, recovered=True)
            return patch

    async def tokenizer_reported(self, body: Mapping[str, Any], problem: str | None) -> None:
        """The routers said whether they have the hub tokenizer (tokenizer_status): Degraded
        TokenizerUnavailable while they cannot get it, with a Warning once per new problem;
        cleared, with a Normal Recovered, once they have it."""
        await self._degraded_reported(body, problem, tokenizer_status.degraded_for, tokenizer_status.REASON)

    async def _degraded_reported(
        self,
        body: Mapping[str, Any],
        problem: str | None,
        degraded_for: Callable[[str | None, Mapping[str, Any], int], dict[str, Any] | None],
        reason: str,
    ) -> None:
        """A watcher's word on a problem it owns (``degraded_for``, conditions.reported_degraded):
        written in the lane of writes that may wait, a Warning once per new problem, a Normal
        Recovered once it is gone."""
        ref = model_ref(body)
        async with self._place(True), self._lock(ref):
            view = self._view(ref, body.get("status"))
            degraded = degraded_for(problem, view, ref.generation)
            if degraded is None:
                return
            desired = {"conditions": merge_conditions(view.get("conditions"), [degraded], self.clock())}
            if not await self._write(ref, desired, view, background=True):
                return
            if problem is not None:
                self.events(ref, "Warning", reason, problem)
            else:
                self.events(ref, "Normal", "Recovered", degraded["message"])

    async def deployment_seen(self, body: Mapping[str, Any], deployment: str, refusal: str | None) -> None:
        """One of the model's Deployments changed (or went: ``refusal`` None): Degraded
        PodsRefused while any of them reports that the API server refuses its pods
        (refusal_status), with a Warning once per new problem; cleared, with a Normal
        Recovered, once none does."""
        ref = model_ref(body)
        key = (ref.namespace, ref.name)
        if self.refused.get(key, {}).get(deployment) == refusal:
            return  # most Deployment events (rollouts, counts) change nothing here
        refused = self.refused.setdefault(key, {})
        if refusal is None:
            refused.pop(deployment, None)
        else:
            refused[deployment] = refusal
        if not refused:
            del self.refused[key]  # nothing kept for a model whose pods are all allowed
        await self._degraded_reported(
            body, refusal_status.problem(refused), refusal_status.degraded_for, refusal_status.REASON
        )

    def refusal_problem(self, ref: ModelRef) -> str | None:
        """Why the API server refuses the model's pods, as its Deployments last said (or None)."""
        return refusal_status.problem(self.refused.get((ref.namespace, ref.name)) or {})

    def _with_adapters(
        self, ref: ModelRef, view: Mapping[str, Any], adapters: tuple[AdapterSpec, ...], entries: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """status.adapters as `entries` with the AdaptersLoaded condition that goes with them
        (none without adapters)."""
        found = adapter_condition.adapters_condition(adapters, entries, ref.generation)
        if found is not None:
            return {"adapters": entries, "conditions": merge_conditions(view.get("conditions"), [found], self.clock())}
        if find(view.get("conditions"), adapter_condition.CONDITION) is None:
            return {"adapters": entries}
        return {"adapters": entries, "conditions": adapter_condition.without(view.get("conditions"))}

    async def adapters_reported(
        self, body: Mapping[str, Any], adapters: tuple[AdapterSpec, ...], entries: list[dict[str, Any]]
    ) -> bool:
        """The adapter sync's status.adapters (where each adapter is loaded; each hub adapter's
        download as the Job watch wrote it) and AdaptersLoaded, in the lane of writes that may
        wait; nothing is written when it did not change. True when written."""
        ref = model_ref(body)
        view = self._view(ref, body.get("status"))
        merged = adapter_downloads.with_downloads(entries, adapters, view.get("adapters"))
        if not changed_fields(self._with_adapters(ref, view, adapters, merged), view):
            return False  # most syncs change nothing: no place in the lane, no lock
        async with self._place(True), self._lock(ref):
            view = self._view(ref, body.get("status"))
            merged = adapter_downloads.with_downloads(entries, adapters, view.get("adapters"))
            return bool(await self._write(ref, self._with_adapters(ref, view, adapters, merged), view, background=True))

    async def _finished(self, ref: ModelRef, job: Mapping[str, Any], name: str) -> tuple[int | None, str] | None:
        """The download pod's termination once its Job has ended (None before, or unreadable)."""
        if not cache_status.ended(job):
            return None
        try:
            return cache_status.termination(await self.in_apply_lane(self.edge.job_pods, ref.namespace, name))
        except ApplyError as exc:
            LOG.warning("%s/%s: cannot read the download's pods: %s", ref.namespace, ref.name, exc)
            return None

    async def _adapter_download_seen(
        self, ref: ModelRef, view: Mapping[str, Any], plan: Plan, adapter: AdapterSpec, job: Mapping[str, Any]
    ) -> None:
        """A hub adapter's Job changed: its entry's download, AdaptersLoaded, an Event per new
        phase (adapter_downloads). Its Job made again once Ready changes nothing."""
        name = str(job["metadata"]["name"])
        entries = view.get("adapters")
        entry = next((e for e in entries or () if e.get("name") == adapter.name), None)
        if adapter_downloads.settled(entry, name):
            return
        desired = adapter_downloads.download_of(adapter, name, job, await self._finished(ref, job, name))
        old = adapter_downloads.current_download(adapter, entry)
        if old == desired:
            return
        merged = adapter_downloads.with_download(entries, plan.spec.adapters, adapter.name, desired)
        await self._write(ref, self._with_adapters(ref, view, plan.spec.adapters, merged), view, background=True)
        event = adapter_downloads.download_event(adapter.name, old, desired)
        if event is not None:
            self.events(ref, *event)

    async def download_seen(self, body: Mapping[str, Any], job: Mapping[str, Any], pods: Pods) -> None:
        """A download Job of the model changed: status.modelCache and the ModelCached
        condition follow it, with an Event per new phase; once the cache is Ready, a reconcile
        gives the engines and fronts their replicas. A Job of another source (an older
        revision) is ignored, and so is any Job once this source is Ready: a new Job for the
        same source (a token reference changed) finds the marker and ends at once, and the
        engines must not stop meanwhile. A hub adapter's Job goes to its status.adapters entry
        (``_adapter_download_seen``)."""
        ref = model_ref(body)
        async with self._place(True), self._lock(ref):
            view = self._view(ref, body.get("status"))
            plan = self.status_plan(body, view)
            model = plan.spec.model if plan is not None else None
            if plan is None or model is None or model.cache is None:
                return
            name = str((job.get("metadata") or {}).get("name") or "")
            adapter = adapter_downloads.adapter_of_job(ref, plan.spec.engine, plan.spec.adapters, name)
            if adapter is not None:
                await self._adapter_download_seen(ref, view, plan, adapter, job)
                return
            if cache_ready(model, view) or not isinstance(model.source, HubSource):  # a cache is for hub models
                return
            if download_job(ref, model.source, plan.spec.engine)["metadata"]["name"] != name:
                return
            desired = cache_status.cache_status(model.source.identity, name, job, await self._finished(ref, job, name))
            old = view.get("modelCache")
            if old == desired:
                return
            conditions = merge_conditions(
                view.get("conditions"), [cache_status.cache_condition(desired, ref.generation)], self.clock()
            )
            await self._write(ref, {"modelCache": desired, "conditions": conditions}, view, background=True)
            event = cache_status.transition_event(old, desired)
            if event is not None:
                self.events(ref, *event)
        if desired.get("phase") == cache_status.READY:
            await self.reconcile(body, pods)

    async def download_progress(self, body: Mapping[str, Any]) -> None:
        """While the model cache is Downloading, status.modelCache gets the bytes so far and in
        all from the last progress line of the running download pod's log (the models loop asks
        every few seconds; a Job's own events say nothing while it runs); while its pod cannot
        start (not scheduled: an unbound claim, no room; its image or a Secret missing), the
        message says why. Reads the pods and the log outside the model's lock; writes only when
        something moved."""
        ref = model_ref(body)
        cache = self._view(ref, body.get("status")).get("modelCache") or {}
        job = cache.get("job")
        if cache.get("phase") != cache_status.DOWNLOADING or not isinstance(job, str):
            return
        pods = await self.in_apply_lane(self.edge.job_pods, ref.namespace, job)
        if not pods:
            return
        newest = max(pods, key=lambda p: str((p.get("metadata") or {}).get("creationTimestamp") or ""))
        if (newest.get("status") or {}).get("phase") == "Running":
            pod = str((newest.get("metadata") or {}).get("name") or "")
            log = await self.in_apply_lane(self.edge.pod_log_tail, ref.namespace, pod, DOWNLOAD_CONTAINER, 5)
            progress = cache_status.progress_of(log)
            if progress is None:
                return
            update: Callable[[Mapping[str, Any]], Mapping[str, Any]] = functools.partial(
                cache_status.with_progress, progress=progress
            )
        else:  # not running yet: say why when Kubernetes cannot start it (an unbound claim, no room, the image)
            why = cache_status.waiting(newest)
            if why is None:
                return
            update = functools.partial(cache_status.with_waiting, why=why)
        async with self._place(True), self._lock(ref):
            view = self._view(ref, body.get("status"))
            current = view.get("modelCache") or {}
            desired = update(current)
            if desired != current and current.get("job") == job:
                await self._write(ref, {"modelCache": desired}, view, background=True)

    async def autoscaled(
        self,
        body: Mapping[str, Any],
        pods: Pods,
        fields: Callable[[Mapping[str, Any]], Mapping[str, Any]],
        *,
        apply_replicas: bool,
        background: bool = True,
    ) -> Plan | None:
        """The autoscaler's write: ``fields(view)`` (status.autoscaling, hitRate, ttftP50,
        conditions) together with the ring and counts they imply (new weights, a new
        desired replica count), then — when ``apply_replicas`` — the engine Deployment with
        the replica count ``engine_replicas`` now gives. One lock for both, so a reconcile
        never interleaves and renders another count. Status goes first: if the apply fails,
        a reconcile still renders the new count and the autoscaler retries. Returns the plan
        (None when the spec cannot be honoured; nothing is applied then).

        When ``fields`` change nothing and there is nothing to apply, nothing is written: the
        ring and counts are the pod watch's to keep, and a round of a thousand ticks would
        otherwise rewrite every ring that moved since, in the lane the pod watch needs."""
        ref = model_ref(body)
        if not apply_replicas:  # most ticks change nothing: they need neither a place nor the lock
            view = self._view(ref, body.get("status"))
            if not changed_fields(dict(fields(view)), view):
                return self.status_plan(body, view)
        async with self._place(background), self._lock(ref):
            view = self._view(ref, body.get("status"))
            update = dict(fields(view))
            if not apply_replicas and not changed_fields(update, view):
                return self.status_plan(body, view)
            pods = _pods(pods)
            merged = {**view, **update}
            plan = self.status_plan(body, merged)
            desired = {**update, **live_status(plan, pods, merged, self.clock())}
            patch = await self._write(ref, desired, view, background)
            self._announce_ring(ref, view, patch)
            if apply_replicas and plan is not None:
                whole = plan_for({**body, "status": merged})
                await self.in_apply_lane(self.edge.apply, whole.engine_deployment, dry_run=False)
            return plan

    async def reconcile(self, body: Mapping[str, Any], pods: Pods) -> Outcome:
        """Plan, dry-run every child, then apply them all. Nothing is applied unless the whole
        plan exists and the API server accepted every object in the dry run, so a bad spec
        leaves the previous children as they were. Raises ApplyFailed (only) to be retried."""
        started = time.monotonic()
        if self._turns is None:
            self._turns = asyncio.Semaphore(self.reconcile_limit)
        try:
            async with self._turns:
                return await self._reconcile(body, pods)
        finally:
            self.metrics.reconciled(time.monotonic() - started)

    async def _reconcile(self, body: Mapping[str, Any], source: Pods) -> Outcome:
        ref = model_ref(body)
        async with self._lock(ref):
            view = self._view(ref, body.get("status"))
            try:
                plan = plan_for({**body, "status": view})
                before = {id(obj): await self.in_apply_lane(self.edge.apply, obj, dry_run=True) for obj in plan.checked}
                changed = []
                for obj in plan.objects:
                    if id(obj) not in before:  # dry-run it now that what it refers to exists
                        before[id(obj)] = await self.in_apply_lane(self.edge.apply, obj, dry_run=True)
                    if await self.in_apply_lane(self.edge.apply, obj, dry_run=False) != before[id(obj)]:
                        changed.append(plan.describe(obj))  # the apply moved its resourceVersion
                for obj in plan.absent:  # a front the spec turned off
                    if await self.in_apply_lane(self.edge.delete, obj):
                        changed.append(f"deleted {plan.describe(obj)}")
            except SpecError as exc:
                return await self._fail(ref, None, _pods(source), view, Outcome("InvalidSpec", str(exc)))
            except ApplyRejected as exc:
                return await self._fail(ref, plan, _pods(source), view, Outcome("ApplyRejected", str(exc)))
            except ApplyFailed as exc:
                await self._fail(ref, plan, _pods(source), view, Outcome("ApplyFailed", str(exc)))
                raise
            outcome = Outcome(
                "Reconciled", f"generation {ref.generation} applied ({len(plan.objects)} objects)", tuple(changed)
            )
            pods = _pods(source)  # as they are now, after the applies
            problem = await self._auth_problem(ref, plan, pods)
            degraded = (
                degraded_condition(auth_status.REASON, problem, ref.generation)
                if problem is not None
                else tokenizer_status.kept(view, plan.spec, ref.generation)  # the routers' last word stands
                or refusal_status.kept(self.refusal_problem(ref), ref.generation)  # and the Deployments'
                or degraded_condition(outcome.reason, outcome.message, ref.generation)
            )
            desired = with_outcome(live_status(plan, pods, view, self.clock()), degraded, ref.generation, self.clock())
            desired = cache_status.forgotten(desired, view, plan.spec.model)  # a cache the spec no longer has
            if plan.spec.engine.lora is None and view.get("adapters") is not None:
                desired["adapters"] = None  # LoRA is off: no sync will write it again (None removes it)
            if not plan.spec.adapters:  # nor AdaptersLoaded, which only the sync and the Job watch write
                desired["conditions"] = adapter_condition.without(desired["conditions"])
            patch = await self._write(ref, desired, view)
            if changed:
                self.events(ref, "Normal", "Applied", f"generation {ref.generation}: applied {', '.join(changed)}")
            self._announce_auth(ref, view, problem, recovered=False)
            if _was_degraded(view) and degraded["status"] == "False":
                self.events(ref, "Normal", "Recovered", outcome.message)
            self._announce_ring(ref, view, patch)
            return outcome

    async def _fail(
        self, ref: ModelRef, plan: Plan | None, pods: list[Pod], view: dict[str, Any], outcome: Outcome
    ) -> Outcome:
        """Degraded with the reason, the previous children untouched, one Warning event per
        new problem (not one per retry or operator restart)."""
        self.metrics.reconcile_error(ref.namespace, ref.name, outcome.reason)
        previous = find(view.get("conditions"), DEGRADED)
        degraded = degraded_condition(outcome.reason, outcome.message, ref.generation)
        desired = with_outcome(live_status(plan, pods, view, self.clock()), degraded, ref.generation, self.clock())
        await self._write(ref, desired, view)
        if not previous or previous.get("reason") != outcome.reason or previous.get("message") != outcome.message:
            self.events(ref, "Warning", outcome.reason, outcome.message)
        return outcome


def _ramp_step_only(
    plan: Plan | None, pods: list[Pod], view: Mapping[str, Any], desired: Mapping[str, Any], now: datetime
) -> bool:
    """Whether the ring differs from the published one by weights alone while a slow start is
    under way: a step of the ramp, which the models loop publishes each second in the lane of
    writes that may wait. In the pod watch's lane such steps fed themselves: every status write
    comes back as a model event, whose sync found the weights a step further (the longer the
    lane's queue, the surer) and wrote again — at 1,000 models under churn, 2,656 writes there
    for 906 ring changes, each waiting 13 s (p50) for a thread. A person's weight on such a
    model waits for the loop too (a second or so); a member joining or leaving never does."""
    slow_start = plan.spec.engine.slow_start_seconds if plan is not None else 0.0
    return same_members(view.get("ring"), desired["ring"]) and ramping(pods, now, slow_start)


def _may_wait(desired: Mapping[str, Any], view: Mapping[str, Any]) -> bool:
    """Whether what changed may wait for the models loop (a second or so): counts and the
    Progressing condition, not the ring's members, Ready or Degraded. Under churn at 1,000
    models a fifth of the pod watch's writes were such counts (a replacement pod created, a
    deleted one gone), each in front of the ring changes queued behind it."""
    changed = changed_fields(desired, view)
    if not changed or "ring" in changed:
        return False
    before, after = view.get("conditions"), desired.get("conditions")
    return all(find(after, kind) == find(before, kind) for kind in (READY, DEGRADED))


def _was_degraded(view: Mapping[str, Any]) -> bool:
    found = find(view.get("conditions"), DEGRADED)
    return bool(found and found.get("status") == "True")


__all__ = ["ApplyError", "Controller", "Edge", "Events", "Outcome", "utcnow"]
