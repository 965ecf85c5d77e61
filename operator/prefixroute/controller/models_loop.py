"""The operator's own loop over its models: what must run every second, not only when an
event arrives — the ring of a model whose new engines are slow-starting (their weights
ramp with time, not with events), the autoscaler's tick for each model with
spec.autoscaling.enabled, and, while a router pod of a model with API keys waits, another
look at the kubelets' reports on its Secret (`auth_status`: a FailedMount event changes no
pod, so no pod event brings it).

Why not a kopf timer: kopf gives every resource with a timer a finalizer (so it can stop the
timer first), and a model that outlives its operator — ``kubectl delete -k`` of the whole
install, an operator uninstalled first — then stays Terminating until someone removes the
finalizer by hand, holding its namespace and its CRD with it. This loop lives beside kopf:
the startup handler starts it and the cleanup handler stops it; it reads kopf's indexes of
models and of their pods (kept current by kopf's watches), and no model carries anything of
it. A model gone from the index is simply not visited again.

Peering: kopf pauses its own handlers while a peer outranks this replica; this loop is not
one of them, so it reads kopf's peering object itself (``peering.active``, kopf's rule) and
acts only while kopf would. The verdict is kept ``peering_check_seconds``.

What is due is decided in the round itself, from memory and the indexes, without a call:
at a thousand models a round that started a task per model every second would spend the
operator's CPU on nothing. Only models with something due get work:

- the autoscaler's ticks: every model whose tick is due, for one Prometheus, in one task
  (``Autoscaler.tick_many``: one batch of queries for all of them); a Prometheus whose round
  is still running holds back its own models only;
- a model's own chores (a slow-start ramp, a look at the auth Secret, the routers' figures,
  a downloading model cache's progress every `progress_seconds`, the LoRA adapter sync when
  its engines or adapters changed or a minute passed) in a task of its own, skipped while its
  previous one runs. The routers' figures are the status
  columns of a model without the autoscaler, and for a model whose routers fetch a hub
  tokenizer, whether they have it (`tokenizer_status`: the Degraded condition).

Peering is asked only when something is due. Parsed specs are kept by (uid, generation).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prefixroute.controller import auth_status, cache_status, tokenizer_status
from prefixroute.controller.adapter_sync import AdapterSync
from prefixroute.controller.autoscale_tick import Autoscaler, AutoscalerMemory
from prefixroute.controller.errors import ApplyError, SpecError
from prefixroute.controller.model_files import resolved
from prefixroute.controller.names import COMPONENT_ROUTER, ROUTER_PORT
from prefixroute.controller.peering import Peering, active
from prefixroute.controller.ports import PeeringReader
from prefixroute.controller.reconcile import utcnow
from prefixroute.controller.ring_status import Pod, address, component, is_ready, ramping
from prefixroute.controller.router_figures import RouterFigures, columns, parse_figures
from prefixroute.controller.spec.model import ModelSpec, parse_spec

LOG = logging.getLogger(__name__)
Key = tuple[str, str]
INTERVAL_SECONDS = 1.0  # the autoscaler's own interval (spec.autoscaling.intervalSeconds >= 1) gates each tick
PEERING_CHECK_SECONDS = 5.0
FIGURES_SECONDS = 10.0
PROGRESS_SECONDS = 5.0  # how often a Downloading model cache's progress is read from its pod's log


def _downloading(body: Mapping[str, Any]) -> bool:
    """Whether the model's cache is being downloaded (status.modelCache says so)."""
    cache = (body.get("status") or {}).get("modelCache")
    return isinstance(cache, Mapping) and cache.get("phase") == cache_status.DOWNLOADING


def _first(store: Any) -> Any:
    return next(iter(store), None) if store is not None else None


@dataclass
class ModelsLoop:
    autoscaler: Autoscaler
    models: Mapping[Key, Any]  # kopf's "models" index: (namespace, name) -> a store of one body
    model_pods: Mapping[Key, Any]  # kopf's "model_pods" index: (namespace, name) -> slim pods
    peering: Peering
    read_peering: PeeringReader
    clock: Callable[[], datetime] = utcnow
    monotonic: Callable[[], float] = time.monotonic
    interval: float = INTERVAL_SECONDS
    peering_check_seconds: float = PEERING_CHECK_SECONDS
    fetch: Callable[[str], str] | None = None  # GET a URL's text (http_edge.get_text); None: no columns
    figures_seconds: float = FIGURES_SECONDS
    adapters: AdapterSync | None = None  # the LoRA adapter sync (adapter_sync.py); None: no adapters are loaded
    memories: dict[Key, AutoscalerMemory] = field(default_factory=dict)
    _figures_due: dict[Key, float] = field(default_factory=dict)
    running: dict[Key, asyncio.Task[None]] = field(default_factory=dict)  # a model's chores
    rounds: dict[str, asyncio.Task[None]] = field(default_factory=dict)  # autoscaler rounds, by Prometheus
    auth_due: dict[Key, float] = field(default_factory=dict)  # when to look at a waiting router's Secret again
    progress_due: dict[Key, float] = field(default_factory=dict)  # when to read a download's progress again
    progress_seconds: float = PROGRESS_SECONDS
    _verdicts: dict[str | None, tuple[float, bool]] = field(default_factory=dict)
    _specs: dict[Key, tuple[str, int, ModelSpec | None]] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Run the loop in a task of its own, once however often asked. Every model event
        asks, each with its own memo — kopf hands a resource handler a shallow copy of the
        operator's — so the task is kept here, on the one object all those copies share."""
        if self.task is None:
            self.task = asyncio.create_task(self.run(), name="models loop")

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    async def run(self) -> None:
        """Until cancelled (the operator's cleanup)."""
        try:
            while True:
                try:
                    await self.once()
                except Exception:  # one bad round never ends the loop
                    LOG.exception("models loop: a round failed")
                asleep = self.monotonic()
                await asyncio.sleep(self.interval)
                self.autoscaler.controller.metrics.loop_lagged(self.monotonic() - asleep - self.interval)
        finally:
            for task in [*self.running.values(), *self.rounds.values()]:
                task.cancel()

    def _spec(self, key: Key, body: Mapping[str, Any]) -> ModelSpec | None:
        """The model's parsed spec (None: it cannot be honoured; the reconcile says why)."""
        meta = body.get("metadata") or {}
        uid, generation = str(meta.get("uid") or ""), int(meta.get("generation") or 0)
        cached = self._specs.get(key)
        if cached is not None and cached[:2] == (uid, generation):
            return cached[2]
        try:
            spec: ModelSpec | None = resolved(key[1], parse_spec(body.get("spec")), key[0])  # spec.model in the engine
        except SpecError:
            spec = None
        self._specs[key] = (uid, generation, spec)
        return spec

    def _adapters_due(self, key: Key, body: Mapping[str, Any], spec: ModelSpec | None, pods: list[Pod]) -> bool:
        """Whether the adapter sync is due, asked with the status as the controller last wrote
        it (a download the Job watch saw Ready a moment ago makes it due before the index has
        the write); models without LoRA are answered without reading it."""
        if self.adapters is None:
            return False
        lora = spec is not None and spec.engine.lora is not None
        status = self.autoscaler.controller.status_view(body) if lora else {}
        return self.adapters.due(key, spec, pods, status)

    def _has_chores(self, key: Key, body: Mapping[str, Any], spec: ModelSpec | None, pods: list[Pod]) -> bool:
        slow_start = spec.engine.slow_start_seconds if spec is not None else 0.0
        if key in self.autoscaler.controller.deferred or ramping(pods, self.clock(), slow_start):
            return True
        if auth_status.should_look(body.get("spec") or {}, pods) and self.monotonic() >= self.auth_due.get(key, 0.0):
            return True
        if _downloading(body) and self.monotonic() >= self.progress_due.get(key, 0.0):
            return True
        if self._adapters_due(key, body, spec, pods):
            return True
        due = self.fetch is not None and self.monotonic() >= self._figures_due.get(key, 0.0)
        return due and _reads_figures(spec)  # the cheap test first: a thousand models a second

    async def once(self) -> list[Key]:
        """One round: start what is due; returns the keys of the models given work."""
        present: set[Key] = set()
        chores: list[tuple[Key, Mapping[str, Any]]] = []
        ticks: dict[str, list[tuple[Key, Mapping[str, Any]]]] = {}
        now = self.clock().timestamp()
        for key, store in list(self.models.items()):
            body = _first(store)
            if body is None:
                continue
            present.add(key)
            spec = self._spec(key, body)
            pods = list(self.model_pods.get(key, ()))
            if spec is not None and spec.autoscaling.enabled:
                memory = self.memories.setdefault(key, AutoscalerMemory())
                if now >= memory.next_due:
                    ticks.setdefault(spec.autoscaling.prometheus or "", []).append((key, body))
            else:
                self.memories.pop(key, None)  # off: a later turn-on starts from status
            task = self.running.get(key)
            if (task is None or task.done()) and self._has_chores(key, body, spec, pods):
                chores.append((key, body))
        for gone in [k for k in self._specs if k not in present]:
            del self._specs[gone]
        if self.adapters is not None:
            self.adapters.keep_only(present)
        for table in (self.memories, self.auth_due, self._figures_due, self.progress_due):
            for gone in [k for k in table if k not in present]:
                del table[gone]  # the model is gone; a new one of that name starts afresh
        for key in [k for k, t in self.running.items() if t.done()]:
            del self.running[key]
        started: list[Key] = []
        for key, body in chores:
            if await self._active(key[0]):
                self.running[key] = asyncio.create_task(self._chores(key, body), name=f"model {key[0]}/{key[1]}")
                started.append(key)
        for url, due in ticks.items():
            busy = self.rounds.get(url)
            if busy is not None and not busy.done():
                continue  # that Prometheus is still answering the last round
            due = [(key, body) for key, body in due if await self._active(key[0])]
            if due:
                self.rounds[url] = asyncio.create_task(self._round(due), name=f"autoscaler round {url or 'default'}")
                started.extend(key for key, _ in due if key not in started)
        return started

    async def settle(self) -> None:
        """Wait for the work started so far (tests)."""
        tasks = [*self.running.values(), *self.rounds.values()]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def _pods_of(self, key: Key) -> Callable[[], list[Pod]]:
        """The model's pods as the index holds them when the controller reads them."""
        return lambda: list(self.model_pods.get(key, ()))

    async def _round(self, due: list[tuple[Key, Mapping[str, Any]]]) -> None:
        """The autoscaler's ticks of these models, their signals read in one batch."""
        items = [(body, self._pods_of(key), self.memories[key]) for key, body in due]
        outcomes = await self.autoscaler.tick_many(items)
        for (key, _), outcome in zip(due, outcomes, strict=True):
            if isinstance(outcome, ApplyError):  # the next tick decides again from the same state
                LOG.warning("%s/%s autoscaler: %s (retried at the next tick)", key[0], key[1], outcome)
            elif isinstance(outcome, BaseException):
                LOG.error("%s/%s autoscaler: tick failed", key[0], key[1], exc_info=outcome)

    async def _chores(self, key: Key, body: Mapping[str, Any]) -> None:
        pods = list(self.model_pods.get(key, ()))
        controller = self.autoscaler.controller
        spec = self._spec(key, body)
        slow_start = spec.engine.slow_start_seconds if spec is not None else 0.0
        if key in controller.deferred or ramping(pods, controller.clock(), slow_start):
            try:
                # writes only when a count or a weight moved; may wait behind the pod watch's writes
                await controller.sync(body, self._pods_of(key), background=True)
            except ApplyError as exc:
                LOG.warning("%s/%s ring: %s (again next round)", key[0], key[1], exc)
        await self._look_at_auth(key, body)
        await self._download_progress(key, body)
        if self.adapters is not None and spec is not None and self._adapters_due(key, body, spec, pods):
            try:
                await self.adapters.sync(key, body, spec, pods, controller)
            except Exception:  # the next due round tries again; other chores go on
                LOG.exception("%s/%s: adapter sync failed", key[0], key[1])
        if _reads_figures(spec):
            await self._figures(key, body, pods, spec)

    async def _download_progress(self, key: Key, body: Mapping[str, Any]) -> None:
        if not _downloading(body):
            self.progress_due.pop(key, None)
            return
        now = self.monotonic()
        if now < self.progress_due.get(key, 0.0):
            return
        self.progress_due[key] = now + self.progress_seconds
        try:
            await self.autoscaler.controller.download_progress(body)
        except ApplyError as exc:
            LOG.warning("%s/%s: download progress: %s (again in %.0fs)", key[0], key[1], exc, self.progress_seconds)

    async def _look_at_auth(self, key: Key, body: Mapping[str, Any]) -> None:
        pods = list(self.model_pods.get(key, ()))
        if not auth_status.should_look(body.get("spec") or {}, pods):
            self.auth_due.pop(key, None)
            return
        now = self.monotonic()
        if now < self.auth_due.get(key, 0.0):
            return
        self.auth_due[key] = now + auth_status.RECHECK_SECONDS
        try:
            await self.autoscaler.controller.sync(body, self._pods_of(key))
        except Exception:
            LOG.exception("%s/%s: status sync failed", key[0], key[1])

    async def _figures(self, key: Key, body: Mapping[str, Any], pods: list[Pod], spec: ModelSpec | None) -> None:
        """Every figures_seconds, what the routers say: the columns from their last minute
        (router_figures) without the autoscaler, and whether they have a hub tokenizer."""
        now = self.monotonic()
        if self.fetch is None or now < self._figures_due.get(key, 0.0):
            return
        self._figures_due[key] = now + self.figures_seconds
        found = await self._read_routers(pods)
        if not found:
            return
        controller = self.autoscaler.controller
        hub = tokenizer_status.hub_tokenizer(spec)
        if hub is not None:
            await controller.tokenizer_reported(body, tokenizer_status.problem(hub, found))
        if spec is not None and spec.autoscaling.enabled:
            return  # the autoscaler fills the columns from Prometheus
        cols = columns(found)
        try:
            await controller.autoscaled(body, pods, lambda view: cols, apply_replicas=False)
        except ApplyError as exc:
            LOG.warning("%s/%s columns: %s (again later)", key[0], key[1], exc)

    async def _read_routers(self, pods: list[Pod]) -> list[RouterFigures]:
        """What every ready router's /metrics says (those that did not answer left out)."""
        assert self.fetch is not None
        fetch = self.fetch
        urls = [
            f"http://{address(str(p['status']['podIP']), ROUTER_PORT)}/metrics"
            for p in pods
            if component(p) == COMPONENT_ROUTER and is_ready(p) and (p.get("status") or {}).get("podIP")
        ]

        async def read(url: str) -> RouterFigures | None:
            try:
                return parse_figures(await asyncio.to_thread(fetch, url))
            except OSError:
                return None  # that router is going away, or not serving yet

        return [f for f in await asyncio.gather(*(read(u) for u in urls)) if f is not None]

    async def _active(self, namespace: str) -> bool:
        """kopf's peering verdict for the peering object that covers ``namespace``."""
        if self.peering.name is None:
            return True
        scope = None if self.peering.clusterwide else namespace
        checked = self._verdicts.get(scope)
        now = self.monotonic()
        if checked is not None and now - checked[0] < self.peering_check_seconds:
            return checked[1]
        try:
            peers = await asyncio.to_thread(self.read_peering, self.peering.name, scope)
            verdict = active(peers, self.peering, self.clock())
        except Exception as exc:  # unsure whether we lead: do nothing this round
            LOG.warning("models loop: peering %s unreadable (%s); not acting", self.peering.name, exc)
            verdict = False
        if checked is None or checked[1] != verdict:
            LOG.info("models loop: %s", "active" if verdict else f"paused by peering {self.peering.name}")
        self._verdicts[scope] = (now, verdict)
        return verdict


def _reads_figures(spec: ModelSpec | None) -> bool:
    """Whether the routers' figures are wanted: the columns without the autoscaler, or a hub
    tokenizer the routers may lack."""
    return spec is None or not spec.autoscaling.enabled or tokenizer_status.hub_tokenizer(spec) is not None


__all__ = ["INTERVAL_SECONDS", "ModelsLoop"]
