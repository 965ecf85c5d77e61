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

Each model's work runs in a task of its own, as kopf's per-resource timers did: a slow
Prometheus for one model never delays another's tick, and a model whose previous tick is
still running is skipped this round.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from prefixroute.controller import auth_status
from prefixroute.controller.autoscale_tick import Autoscaler, AutoscalerMemory
from prefixroute.controller.errors import ApplyError, SpecError
from prefixroute.controller.names import COMPONENT_ROUTER, ROUTER_PORT
from prefixroute.controller.peering import Peering, active
from prefixroute.controller.ports import PeeringReader
from prefixroute.controller.reconcile import utcnow
from prefixroute.controller.ring_status import Pod, address, component, is_ready, ramping
from prefixroute.controller.router_figures import RouterFigures, columns, parse_figures
from prefixroute.controller.spec.model import parse_spec

LOG = logging.getLogger(__name__)
Key = tuple[str, str]
INTERVAL_SECONDS = 1.0  # the autoscaler's own interval (spec.autoscaling.intervalSeconds >= 1) gates each tick
PEERING_CHECK_SECONDS = 5.0
FIGURES_SECONDS = 10.0


def autoscaling_enabled(spec: Mapping[str, Any]) -> bool:
    return bool((spec.get("autoscaling") or {}).get("enabled"))


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
    memories: dict[Key, AutoscalerMemory] = field(default_factory=dict)
    _figures_due: dict[Key, float] = field(default_factory=dict)
    running: dict[Key, asyncio.Task[None]] = field(default_factory=dict)
    auth_due: dict[Key, float] = field(default_factory=dict)  # when to look at a waiting router's Secret again
    _verdicts: dict[str | None, tuple[float, bool]] = field(default_factory=dict)

    async def run(self) -> None:
        """Until cancelled (the operator's cleanup)."""
        try:
            while True:
                try:
                    await self.once()
                except Exception:  # one bad round never ends the loop
                    LOG.exception("models loop: a round failed")
                await asyncio.sleep(self.interval)
        finally:
            for task in self.running.values():
                task.cancel()

    async def once(self) -> list[Key]:
        """One round: start the work of every model that has none running; returns their keys."""
        present: set[Key] = set()
        started: list[Key] = []
        for key, store in list(self.models.items()):
            body = _first(store)
            if body is None:
                continue
            present.add(key)
            task = self.running.get(key)
            if task is not None and not task.done():
                continue
            if not await self._active(key[0]):
                continue
            self.running[key] = asyncio.create_task(self._work(key, body), name=f"model {key[0]}/{key[1]}")
            started.append(key)
        for key in [k for k in self.memories if k not in present]:
            del self.memories[key]  # the model is gone; a new one of that name starts afresh
        for key in [k for k in self.auth_due if k not in present]:
            del self.auth_due[key]
        for key in [k for k, t in self.running.items() if t.done()]:
            del self.running[key]
        return started

    async def settle(self) -> None:
        """Wait for the work started so far (tests)."""
        if self.running:
            await asyncio.gather(*self.running.values(), return_exceptions=True)

    async def _work(self, key: Key, body: Mapping[str, Any]) -> None:
        pods = list(self.model_pods.get(key, ()))
        controller = self.autoscaler.controller
        try:
            slow_start = parse_spec(body.get("spec")).engine.slow_start_seconds
        except SpecError:
            slow_start = 0.0  # the reconcile says why (Degraded); the pod watch keeps the ring
        if ramping(pods, controller.clock(), slow_start):
            try:
                await controller.sync(body, pods)  # writes only when a weight moved a step
            except ApplyError as exc:
                LOG.warning("%s/%s ring: %s (again next round)", key[0], key[1], exc)
        await self._look_at_auth(key, body)
        if not autoscaling_enabled(body.get("spec") or {}):
            self.memories.pop(key, None)  # turned off: a later turn-on starts from status
            await self._figures(key, body, pods)
            return
        memory = self.memories.setdefault(key, AutoscalerMemory())
        try:
            await self.autoscaler.tick(body, pods, memory)
        except ApplyError as exc:
            # the next tick decides again from the same state
            LOG.warning("%s/%s autoscaler: %s (retried at the next tick)", key[0], key[1], exc)
        except Exception:
            LOG.exception("%s/%s autoscaler: tick failed", key[0], key[1])

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
            await self.autoscaler.controller.sync(body, pods)
        except Exception:
            LOG.exception("%s/%s: status sync failed", key[0], key[1])

    async def _figures(self, key: Key, body: Mapping[str, Any], pods: list[Pod]) -> None:
        """The columns from the routers' last minute (router_figures), every figures_seconds."""
        now = self.monotonic()
        if self.fetch is None or now < self._figures_due.get(key, 0.0):
            return
        self._figures_due[key] = now + self.figures_seconds
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

        found = [f for f in await asyncio.gather(*(read(u) for u in urls)) if f is not None]
        if not urls or not found:
            return
        cols = columns(found)
        try:
            await self.autoscaler.controller.autoscaled(body, pods, lambda view: cols, apply_replicas=False)
        except ApplyError as exc:
            LOG.warning("%s/%s columns: %s (again later)", key[0], key[1], exc)

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


__all__ = ["INTERVAL_SECONDS", "ModelsLoop", "autoscaling_enabled"]
