"""The autoscaler's tick: read signals, run the pure policy, act, explain.

Called by the operator's models loop (``models_loop``) every second with the models whose
tick is due: a tick runs when spec.autoscaling.intervalSeconds have passed, on that
interval's grid (``next_due``), so all models of one interval tick in the same round and
their signals are read in one batch (``tick_many``): one query per signal for all of them,
not a dozen per model (``autoscaling.queries``).

One tick:

1. signals from Prometheus (``SignalsReader``; ring members only — ready, not being
   deleted — with pods that turned ready moments ago allowed to have no series yet);
2. ``policy.step`` with the policy's state from the resource's memory (``AutoscalerMemory``,
   kept by the models loop);
3. effects, unless in dry run: the replica the policy drains gets the
   ``controller.kubernetes.io/pod-deletion-cost`` annotation (so the ReplicaSet deletes
   exactly that pod when replicas go down; removed again if the drain is cancelled);
   status.autoscaling (desiredReplicas, weights — the ring follows at once) with the
   printer columns and the MetricsAvailable condition; then the engine Deployment with the
   new replica count, through the same plan and field manager as every reconcile;
4. an Event for every decision that is not a plain hold, and the operator's metrics.

Faults: when the signals are unavailable (Prometheus unreachable, engine metrics missing
or stale) nothing moves: the replica count and weights stay, MetricsAvailable=False says
why (one Warning Event per new problem, not per tick), the sample windows start again so
no decision rests on data from before the gap, and the next good read recovers by itself.
A failed write leaves the policy's state as it was, so the next tick decides again.

After an operator restart the memory is empty: windows refill (no scaling for one window),
and a drain in progress and rebalanced weights are taken back from status.autoscaling.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Protocol

from prefixroute.autoscaling.policy import DRAIN, HOLD, SCALE_DOWN, Decision, PolicyState, step
from prefixroute.autoscaling.prometheus_signals import (
    STALE_AFTER_SECONDS,
    WAITING,
    MetricsUnavailable,
    SignalsRequest,
)
from prefixroute.autoscaling.settings import AutoscalingSettings
from prefixroute.autoscaling.signals import FleetSignals
from prefixroute.controller.autoscale_status import (
    DELETION_COST,
    DRAIN_DELETION_COST,
    METRICS_AVAILABLE,
    Event,
    decision_event,
    decision_status,
    holding_status,
    metrics_condition,
    not_verified_event,
    printer_columns,
    restored_event,
    restored_state,
)
from prefixroute.controller.conditions import find, merge_conditions
from prefixroute.controller.errors import SpecError
from prefixroute.controller.names import COMPONENT_ENGINE, COMPONENT_ROUTER
from prefixroute.controller.reconcile import Controller, Pods
from prefixroute.controller.ring_status import Pod, component, is_member, terminating
from prefixroute.controller.spec.model import ModelRef, engine_replicas, model_ref, parse_spec

LOG = logging.getLogger(__name__)
DUE_SLACK_SECONDS = 0.25  # a 1 s timer and a 2 s interval should tick every 2 s, not every 3 s
SLICE = 25
"""Models a round prepares, or starts deciding, between two looks at the event loop's other
work: a thousand decisions in one go held every pod event back for a second. The decisions
then run side by side: a round lasts as long as its slowest write, not the sum of them."""


class SignalsReader(Protocol):
    def __call__(self, requests: Sequence[SignalsRequest], now: float) -> Sequence[FleetSignals | MetricsUnavailable]:
        """Each request's signals, or why not, in order: one batch of queries for all of them.
        Runs in a worker thread."""
        ...


@dataclass
class AutoscalerMemory:
    """What one resource's autoscaler keeps between ticks, in memory only."""

    uid: str = ""
    state: PolicyState | None = None  # None until the first tick (then restored from status)
    next_due: float = 0.0
    last_note: str | None = None  # the last notable hold, so it is told once
    last_recommendation: tuple[str, int, str | None] | None = None  # dry run: told once
    unsynced: bool = False  # the engine Deployment may not have the decided replicas yet
    not_verified: str | None = None  # the Prometheus URL read without verifying its certificate, once told


Item = tuple[Mapping[str, Any], Pods, AutoscalerMemory]
"""One model in a round: its body, its pods (or how to read them), its memory."""


@dataclass
class _Tick:
    """One model's tick between reading and deciding: what the read needs and the decision uses."""

    body: Mapping[str, Any]
    pods: list[Pod]  # as the tick read them
    source: Pods  # how the status write reads them again
    memory: AutoscalerMemory
    ref: ModelRef
    settings: AutoscalingSettings
    view: dict[str, Any]
    members: list[str]
    replicas: int
    request: SignalsRequest


def next_due(now: float, interval: float) -> float:
    """When a model ticking now ticks next: on the grid of its interval (multiples of it since
    the epoch), so every model of one interval ticks in the same round and their reads are
    one batch; a little early (``DUE_SLACK_SECONDS``), so a round every second does not
    stretch each interval by one."""
    return (math.floor((now + DUE_SLACK_SECONDS) / interval) + 1) * interval - DUE_SLACK_SECONDS


@dataclass
class Autoscaler:
    controller: Controller
    read: SignalsReader

    def _now(self) -> float:
        """Seconds since the epoch, from the controller's clock (scrape times are wall-clock)."""
        return self.controller.clock().timestamp()

    def _post(self, ref: ModelRef, event: Event) -> None:
        self.controller.events(ref, event.type, event.reason, event.message)

    def due(self, body: Mapping[str, Any], memory: AutoscalerMemory) -> bool:
        """Whether a tick of this model would evaluate now."""
        try:
            settings = parse_spec(body.get("spec")).autoscaling
        except SpecError:
            return False
        return settings.enabled and self._now() >= memory.next_due

    async def tick(self, body: Mapping[str, Any], pods: Pods, memory: AutoscalerMemory) -> Decision | None:
        """One evaluation if one is due; the decision, or None (not due, off, no signals)."""
        (outcome,) = await self.tick_many([(body, pods, memory)])
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    async def tick_many(self, items: Sequence[Item]) -> list[Decision | BaseException | None]:
        """A round: every due model's signals in one read, then each model's decision and
        writes. Per model, in order: the decision, None (not due, off, no signals), or the
        exception its decision raised (the others go on)."""
        started = time.monotonic()
        now = self._now()
        ticks: list[_Tick | None] = []
        for start in range(0, len(items), SLICE):
            if start:
                await asyncio.sleep(0)  # let the pod watch in between: a ring update must not wait for a round
            ticks += [self._prepare(body, pods, memory, now) for body, pods, memory in items[start : start + SLICE]]
        due = [t for t in ticks if t is not None]
        results: Sequence[FleetSignals | MetricsUnavailable] = []
        if due:
            reading = time.monotonic()
            try:
                results = await asyncio.to_thread(self.read, [t.request for t in due], now)
            except MetricsUnavailable as exc:  # a reader may fail a whole batch at once
                results = [exc] * len(due)
            self.controller.metrics.read_signals(time.monotonic() - reading)
        pairs = list(zip(due, results, strict=True))
        decisions: list[asyncio.Future[Decision | None]] = []
        for start in range(0, len(pairs), SLICE):
            if start:
                await asyncio.sleep(0)  # the slice before takes its first steps: the loop sees other work between
            decisions += [
                asyncio.ensure_future(self._timed(t, r, now, started)) for t, r in pairs[start : start + SLICE]
            ]
        decided = iter(await asyncio.gather(*decisions, return_exceptions=True))
        return [None if t is None else next(decided) for t in ticks]

    def _prepare(self, body: Mapping[str, Any], source: Pods, memory: AutoscalerMemory, now: float) -> _Tick | None:
        try:
            spec = parse_spec(body.get("spec"))
        except SpecError:
            return None  # the reconcile says why (Degraded); nothing to scale
        settings = spec.autoscaling
        if not settings.enabled or now < memory.next_due:
            return None
        memory.next_due = next_due(now, settings.interval_seconds)
        ref = model_ref(body)
        pods = list(source() if callable(source) else source)
        view = self.controller.status_view(body)
        members = sorted(str(p["metadata"]["name"]) for p in pods if component(p) == COMPONENT_ENGINE and is_member(p))
        if memory.state is None or memory.uid != ref.uid:  # first tick, or a new resource of that name
            memory.uid, memory.state = ref.uid, restored_state(view.get("autoscaling") or {}, members)
            memory.last_note = memory.last_recommendation = memory.not_verified = None
            memory.unsynced = False
        self._tell_not_verified(ref, settings, memory)
        young = _young(pods, members, now, max(STALE_AFTER_SECONDS, 3 * settings.interval_seconds))
        routers = sorted(
            str(p["metadata"]["name"]) for p in pods if component(p) == COMPONENT_ROUTER and not terminating(p)
        )
        request = SignalsRequest(settings, ref.namespace, tuple(members), tuple(routers), tuple(young))
        return _Tick(body, pods, source, memory, ref, settings, view, members, engine_replicas(spec, view), request)

    async def _timed(
        self, tick: _Tick, signals: FleetSignals | MetricsUnavailable, now: float, started: float
    ) -> Decision | None:
        """The model's decision; its tick lasted from the round's start until it is written."""
        try:
            if isinstance(signals, MetricsUnavailable):
                await self._hold(tick, signals, now)
                return None
            return await self._decide(tick, signals, now)
        finally:
            self.controller.metrics.ticked(time.monotonic() - started)

    async def _decide(self, tick: _Tick, signals: FleetSignals, now: float) -> Decision:
        body, pods, memory, ref, settings, view = tick.body, tick.pods, tick.memory, tick.ref, tick.settings, tick.view
        replicas = tick.replicas
        signals = replace(signals, pods=_engines(pods))  # what the ReplicaSet left: a drained pod may survive
        before = memory.state
        assert before is not None
        state, decision = step(before, signals, replicas, settings, now)
        dry = settings.dry_run
        if not dry:
            await self._mark(ref, before, decision)

        def fields(current: Mapping[str, Any]) -> dict[str, Any]:
            unverified = " (its certificate not verified)" if settings.skips_verification else ""
            available = metrics_condition(
                True, "SignalsFresh", f"fresh signals of the engine pods from {settings.prometheus}{unverified}"
            )
            return {
                "autoscaling": decision_status(current.get("autoscaling") or {}, decision, state, dry_run=dry, now=now),
                **printer_columns(signals),
                "conditions": merge_conditions(current.get("conditions"), [available], self.controller.clock()),
            }

        apply = not dry and (decision.changes_replicas or memory.unsynced)
        memory.unsynced = apply
        plan = await self.controller.autoscaled(body, tick.source, fields, apply_replicas=apply)
        memory.unsynced = apply and plan is None
        memory.state = state
        # a hold is every tick of a quiet fleet (4,000 lines a minute at 1,000 models): logged
        # at INFO only when it is news, as its Event is; every other decision always is
        news = decision.action != HOLD or (decision.note is not None and decision.note != memory.last_note)
        self._explain(ref, view, decision, dry, memory)
        metrics = self.controller.metrics
        metrics.decision(ref.namespace, ref.name, decision.action, dry)
        metrics.signals(ref.namespace, ref.name, signals.hit_rate, signals.ttft_p50, signals.held)
        metrics.fleet(
            ref.namespace,
            ref.name,
            replicas=_engines(pods),
            desired=plan.engine_replicas if plan else replicas,
            ring=len(tick.members),
        )
        level = logging.INFO if news else logging.DEBUG
        LOG.log(level, "%s/%s autoscaler: %s: %s", ref.namespace, ref.name, decision.action, decision.reason)
        return decision

    def _tell_not_verified(self, ref: ModelRef, settings: AutoscalingSettings, memory: AutoscalerMemory) -> None:
        """A Warning when reading without verifying the certificate takes effect for this
        model, as its spec asks: once per change of URL or setting, not per tick."""
        url = settings.prometheus if settings.skips_verification else None
        if url is not None and url != memory.not_verified:
            self._post(ref, not_verified_event(url))
            LOG.warning("%s/%s autoscaler: Prometheus at %s is read unverified", ref.namespace, ref.name, url)
        memory.not_verified = url

    async def _mark(self, ref: ModelRef, before: PolicyState, decision: Decision) -> None:
        """The drained pod is the one the ReplicaSet deletes: a low deletion cost from the
        moment its drain starts (again when replicas go down: it may have been lost)."""
        if decision.action in (DRAIN, SCALE_DOWN) and decision.drain_member:
            await self.controller.in_status_lane(
                self.controller.edge.annotate_pod,
                ref.namespace,
                decision.drain_member,
                {DELETION_COST: DRAIN_DELETION_COST},
            )
        elif decision.note == "DrainCancelled" and before.draining is not None:
            await self.controller.in_status_lane(
                self.controller.edge.annotate_pod, ref.namespace, before.draining.member, {DELETION_COST: None}
            )
        for survivor in decision.restored:  # it serves again: no longer the first to go
            await self.controller.in_status_lane(
                self.controller.edge.annotate_pod, ref.namespace, survivor, {DELETION_COST: None}
            )

    def _explain(
        self, ref: ModelRef, view: Mapping[str, Any], decision: Decision, dry: bool, memory: AutoscalerMemory
    ) -> None:
        was = find(view.get("conditions"), METRICS_AVAILABLE)
        if was is not None and was.get("status") == "False":
            self._post(ref, Event("Normal", "MetricsRecovered", "signals are available again; autoscaling resumes"))
        for survivor in decision.restored:
            self._post(ref, restored_event(survivor, decision.replicas))
        event = decision_event(decision, dry_run=dry)
        if event is not None:
            if decision.action == HOLD:
                tell = decision.note != memory.last_note
            elif dry:
                key = (decision.action, decision.replicas, decision.drain_member)
                tell, memory.last_recommendation = key != memory.last_recommendation, key
            else:
                tell = True
            if tell:
                self._post(ref, event)
        memory.last_note = decision.note

    async def _hold(self, tick: _Tick, exc: MetricsUnavailable, now: float) -> None:
        """No signals: hold everything, say why, and forget the sample windows."""
        body, pods, memory, ref = tick.body, tick.pods, tick.memory, tick.ref
        replicas, settings = tick.replicas, tick.settings
        assert memory.state is not None
        memory.state = replace(memory.state, samples=(), started_at=None)
        view = self.controller.status_view(body)
        was = find(view.get("conditions"), METRICS_AVAILABLE)
        starting = exc.reason in WAITING  # not a fault: Unknown, and no Warning
        new_problem = not starting and (was is None or was.get("status") != "False" or was.get("reason") != exc.reason)
        message = str(exc)

        def fields(current: Mapping[str, Any]) -> dict[str, Any]:
            unavailable = metrics_condition("Unknown" if starting else False, exc.reason, message)
            return {
                "autoscaling": holding_status(
                    current.get("autoscaling") or {}, replicas, message, dry_run=settings.dry_run, now=now
                ),
                "hitRate": None,
                "ttftP50": None,  # unknown now; a stale figure would mislead
                "conditions": merge_conditions(current.get("conditions"), [unavailable], self.controller.clock()),
            }

        apply = memory.unsynced and not settings.dry_run  # finish applying an earlier decision
        plan = await self.controller.autoscaled(body, tick.source, fields, apply_replicas=apply)
        memory.unsynced = apply and plan is None
        memory.last_note = None
        if new_problem:
            self._post(ref, Event("Warning", "MetricsUnavailable", f"holding {replicas} replicas: {message}"))
        if not starting:
            self.controller.metrics.signals_unavailable(ref.namespace, ref.name, exc.reason)
        self.controller.metrics.fleet(
            ref.namespace,
            ref.name,
            replicas=_engines(pods),
            desired=plan.engine_replicas if plan else replicas,
            ring=sum(1 for p in pods if component(p) == COMPONENT_ENGINE and is_member(p)),
        )
        level = logging.WARNING if new_problem else logging.DEBUG  # told once, as the Event is
        LOG.log(level, "%s/%s autoscaler holds %d replicas: %s", ref.namespace, ref.name, replicas, message)


def _engines(pods: Iterable[Pod]) -> int:
    return sum(1 for p in pods if component(p) == COMPONENT_ENGINE and not terminating(p))


def _ready_since(pod: Pod) -> float | None:
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "Ready" and cond.get("status") == "True":
            stamp = cond.get("lastTransitionTime")
            if isinstance(stamp, str):
                try:
                    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
                except ValueError:
                    return None
    return None


def _young(pods: Iterable[Pod], members: Sequence[str], now: float, grace: float) -> list[str]:
    """Members that turned ready within ``grace``: Prometheus may not have scraped them yet."""
    names = set(members)
    out = []
    for pod in pods:
        name = str(pod["metadata"]["name"])
        since = _ready_since(pod)
        if name in names and since is not None and now - since < grace:
            out.append(name)
    return sorted(out)


__all__ = ["Autoscaler", "AutoscalerMemory", "SignalsReader"]
