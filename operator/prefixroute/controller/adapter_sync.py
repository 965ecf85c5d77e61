"""The adapter sync: each ready engine of a model with spec.engine.lora registers the
adapters its placement gives it, through the engine's own API, without a restart.

Run by the models loop (models_loop.py) as one of a model's chores, only when it is due:
the model's engines or adapters changed (a pod joined or left the ring, a new generation of
the spec) or ``resync_seconds`` passed since the last sync (an engine restarted in place
lost what it had) or a hub adapter's download became Ready (status.adapters[*].download,
which the Job watch writes: adapter_downloads). Whether it is due is decided from the
loop's memory and kopf's indexes without a call, so at a thousand models the operator does
no work for models without LoRA and one round of calls per engine a minute for the rest.

One sync, per ready engine, in parallel: ``GET /v1/models``, then a load for each adapter
its placement adds — of those whose files are there: a hub adapter still downloading, or
whose download failed, is not asked for — and an unload for each it holds beyond it
(adapter_status). Before an
unload the pod's annotation stops naming the adapter and the sync waits
``unload_grace_seconds``, so that the routers follow a ring without it before it goes. What
the engine confirmed goes into the pod's ``prefixroute.io/adapters`` annotation (written only
when it changes; the pod event it makes publishes the ring with the member's adapters),
into status.adapters (with the AdaptersLoaded condition: adapter_condition) and
``prefixroute_operator_adapter_replicas``, with Events for loads, unloads and new failures. A
sync with a failure comes back sooner (``retry_seconds``); a failed download is no failure of
the sync's, so it does not.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prefixroute.controller.adapter_downloads import loadable
from prefixroute.controller.adapter_status import (
    EVERY,
    EnginePod,
    PodOutcome,
    adapters_status,
    annotation,
    engine_pods,
    events,
    failures,
    outcome,
    placement,
    pod_work,
)
from prefixroute.controller.engine_adapters import EngineAdapterClient, EngineCallFailed
from prefixroute.controller.errors import ApplyError
from prefixroute.controller.names import ANNOTATION_ADAPTERS, COMPONENT_ENGINE
from prefixroute.controller.reconcile import Controller
from prefixroute.controller.ring_status import Pod, component, is_member, pod_port
from prefixroute.controller.spec.adapters import AdapterSpec
from prefixroute.controller.spec.model import ModelSpec, model_ref

LOG = logging.getLogger(__name__)
Record = Callable[[EnginePod, frozenset[str]], Awaitable[None]]
Key = tuple[str, str]
RESYNC_SECONDS = 60.0
RETRY_SECONDS = 15.0
UNLOAD_GRACE_SECONDS = 2.0  # for routers to follow the ring that no longer names an adapter before it goes


def signature(spec: ModelSpec, pods: list[Pod], status: Mapping[str, Any]) -> Hashable:
    """What a sync depends on besides the engines' own state: the slots, the adapters (with
    their sources), which of them have their files (a download became Ready), the ring's
    engines and their addresses. Asked every second for every model with LoRA, so it reads
    only what it compares (the spec's own tuple of adapters, kept by the models loop while
    the generation holds, compares by identity first)."""
    members = tuple(
        (p["metadata"]["name"], p["status"]["podIP"], pod_port(p, spec.engine.port))
        for p in pods
        if component(p) == COMPONENT_ENGINE and is_member(p)
    )
    return spec.engine.lora, spec.adapters, loadable(spec.adapters, status.get("adapters")), members


@dataclass
class AdapterSync:
    client: EngineAdapterClient = field(default_factory=EngineAdapterClient)
    resync_seconds: float = RESYNC_SECONDS
    retry_seconds: float = RETRY_SECONDS
    unload_grace_seconds: float = UNLOAD_GRACE_SECONDS
    monotonic: Callable[[], float] = time.monotonic
    _next: dict[Key, tuple[Hashable, float]] = field(default_factory=dict)  # signature synced, next due
    _told: dict[Key, dict[tuple[str, str], str]] = field(default_factory=dict)  # failures already in an Event

    def due(self, key: Key, spec: ModelSpec | None, pods: list[Pod], status: Mapping[str, Any]) -> bool:
        """`status`: the model's freshest status (Controller.status_view)."""
        if spec is None or spec.engine.lora is None:
            self.forget(key)
            return False
        last = self._next.get(key)
        return last is None or self.monotonic() >= last[1] or last[0] != signature(spec, pods, status)

    def forget(self, key: Key) -> None:
        self._next.pop(key, None)
        self._told.pop(key, None)

    def keep_only(self, present: set[Key]) -> None:
        for key in [k for k in self._next if k not in present]:
            self.forget(key)

    async def _pod(
        self,
        pod: EnginePod,
        wanted: frozenset[str],
        adapters: tuple[AdapterSpec, ...],
        ready: frozenset[str],
        record: Record,
    ) -> PodOutcome:
        try:
            registered = await asyncio.to_thread(self.client.registered, pod.url)
        except EngineCallFailed as exc:
            return PodOutcome(pod, pod.recorded or frozenset(), failed={EVERY: f"cannot list its adapters: {exc}"})
        work = pod_work(pod, registered, wanted, adapters, ready)
        failed_loads: dict[str, str] = {}
        failed_unloads: dict[str, str] = {}
        for name, path in work.load:
            try:
                await asyncio.to_thread(self.client.load, pod.url, name, path)
            except EngineCallFailed as exc:
                failed_loads[name] = str(exc)
        if work.unload:
            # The ring stops naming what is about to go before it goes, so that no router sends
            # a request for it to an engine that no longer has it.
            await record(pod, outcome(work, failed_loads, {}).confirmed - set(work.unload))
            await asyncio.sleep(self.unload_grace_seconds)
        for name in work.unload:
            try:
                await asyncio.to_thread(self.client.unload, pod.url, name)
            except EngineCallFailed as exc:
                failed_unloads[name] = str(exc)
        return outcome(work, failed_loads, failed_unloads)

    async def sync(
        self, key: Key, body: Mapping[str, Any], spec: ModelSpec, pods: list[Pod], controller: Controller
    ) -> None:
        """One sync of the model's engines (see the module docstring)."""
        assert spec.engine.lora is not None
        started = self.monotonic()
        status = controller.status_view(body)
        ready = loadable(spec.adapters, status.get("adapters"))
        members = engine_pods(pods, spec.engine.port)
        wanted = placement(spec.adapters, spec.engine.lora, members)
        written = {p.name: p.recorded for p in members}  # each pod's annotation as last written

        async def record(pod: EnginePod, adapters: frozenset[str]) -> None:
            if written[pod.name] == adapters:
                return
            try:
                value = {ANNOTATION_ADAPTERS: annotation(adapters)}
                await controller.in_status_lane(controller.edge.annotate_pod, key[0], pod.name, value)
                written[pod.name] = adapters
            except ApplyError as exc:
                LOG.warning("%s/%s: cannot record %s's adapters: %s", key[0], key[1], pod.name, exc)

        done = list(
            await asyncio.gather(*(self._pod(p, wanted[p.name], spec.adapters, ready, record) for p in members))
        )
        for pod in done:
            if EVERY not in pod.failed:  # an engine that did not answer keeps its record
                await record(pod.pod, pod.confirmed)
        await self._report(key, body, spec, done, wanted, controller)
        due = started + (self.retry_seconds if failures(done) else self.resync_seconds)
        self._next[key] = (signature(spec, pods, status), due)

    async def _report(
        self,
        key: Key,
        body: Mapping[str, Any],
        spec: ModelSpec,
        done: list[PodOutcome],
        wanted: Mapping[str, frozenset[str]],
        controller: Controller,
    ) -> None:
        ref = model_ref(body)
        for type_, reason, message in events(done, self._told.get(key, {})):
            controller.events(ref, type_, reason, message)
        self._told[key] = failures(done)
        entries = adapters_status(spec.adapters, done, wanted)
        controller.metrics.adapters_loaded(ref.namespace, ref.name, {e["name"]: e["replicas"] for e in entries})
        try:
            await controller.adapters_reported(body, spec.adapters, entries)
        except ApplyError as exc:
            LOG.warning("%s/%s: status.adapters: %s (again next sync)", key[0], key[1], exc)
