"""Plan, then apply; and keep status true to the pods. The edge does the I/O.

``Controller`` holds what outlives one handler call: the edge, the event sink, the clock,
one lock per resource (the pod watch and the reconcile both write status; the lock makes
the last writer the one that read the newest pods) and what it last wrote (so an
unchanged status is never written again).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from prefixroute.controller.conditions import DEGRADED, find
from prefixroute.controller.errors import ApplyError, ApplyFailed, ApplyRejected, SpecError
from prefixroute.controller.plan import Plan, plan_for
from prefixroute.controller.ports import Edge, Events
from prefixroute.controller.ring import Pod
from prefixroute.controller.spec.model import ModelRef, model_ref
from prefixroute.controller.status import changed_fields, degraded_condition, live_status, with_outcome

Key = tuple[str, str]


@dataclass(frozen=True)
class Outcome:
    reason: str  # Reconciled | InvalidSpec | ApplyRejected | ApplyFailed
    message: str
    changed: tuple[str, ...] = ()


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


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

    def _lock(self, ref: ModelRef) -> asyncio.Lock:
        return self.locks.setdefault((ref.namespace, ref.name), asyncio.Lock())

    def forget(self, namespace: str, name: str) -> None:
        """The resource is gone: drop its lock and memory."""
        self.locks.pop((namespace, name), None)
        self.written.pop((namespace, name), None)

    def _view(self, ref: ModelRef, status: Mapping[str, Any] | None) -> dict[str, Any]:
        """The freshest status we know: the body's, overlaid with what we wrote since (the
        body handed to a pod event may predate our own last patch)."""
        view = dict(status or {})
        uid, fields = self.written.get((ref.namespace, ref.name), ("", {}))
        if uid == ref.uid:
            view.update(fields)
        return view

    async def _write(self, ref: ModelRef, desired: Mapping[str, Any], view: Mapping[str, Any]) -> dict[str, Any]:
        patch = changed_fields(desired, view)
        if not patch:
            return patch
        written: bool = await asyncio.to_thread(self.edge.patch_status, ref, patch)
        if written:
            key = (ref.namespace, ref.name)
            uid, fields = self.written.get(key, (ref.uid, {}))
            self.written[key] = (ref.uid, {**(fields if uid == ref.uid else {}), **patch})
        return patch

    def _announce_ring(self, ref: ModelRef, view: Mapping[str, Any], patch: Mapping[str, Any]) -> None:
        if "ring" in patch:
            change = _ring_change(view.get("ring"), patch["ring"])
            if change:
                self.events(ref, "Normal", "RingChanged", change)

    async def sync(self, body: Mapping[str, Any], pods: Iterable[Pod]) -> dict[str, Any]:
        """Bring the pod-driven status (ring, counts, Ready, Progressing) up to date; returns
        the patch written (empty when nothing changed)."""
        ref = model_ref(body)
        async with self._lock(ref):
            try:
                plan: Plan | None = plan_for(body)
            except SpecError:
                plan = None
            view = self._view(ref, body.get("status"))
            patch = await self._write(ref, live_status(plan, pods, view, self.clock()), view)
            self._announce_ring(ref, view, patch)
            return patch

    async def reconcile(self, body: Mapping[str, Any], pods: Iterable[Pod]) -> Outcome:
        """Plan, dry-run every child, then apply them all. Nothing is applied unless the whole
        plan exists and the API server accepted every object in the dry run, so a bad spec
        leaves the previous children as they were. Raises ApplyFailed (only) to be retried."""
        ref = model_ref(body)
        pods = list(pods)
        async with self._lock(ref):
            view = self._view(ref, body.get("status"))
            try:
                plan = plan_for(body)
                before = {id(obj): await asyncio.to_thread(self.edge.apply, obj, dry_run=True) for obj in plan.checked}
                changed = []
                for obj in plan.objects:
                    if id(obj) not in before:  # dry-run it now that what it refers to exists
                        before[id(obj)] = await asyncio.to_thread(self.edge.apply, obj, dry_run=True)
                    if await asyncio.to_thread(self.edge.apply, obj, dry_run=False) != before[id(obj)]:
                        changed.append(plan.describe(obj))  # the apply moved its resourceVersion
            except SpecError as exc:
                return await self._fail(ref, None, pods, view, Outcome("InvalidSpec", str(exc)))
            except ApplyRejected as exc:
                return await self._fail(ref, plan, pods, view, Outcome("ApplyRejected", str(exc)))
            except ApplyFailed as exc:
                await self._fail(ref, plan, pods, view, Outcome("ApplyFailed", str(exc)))
                raise
            outcome = Outcome("Reconciled", f"generation {ref.generation} applied ({len(plan.objects)} objects)", tuple(changed))
            degraded = degraded_condition(outcome.reason, outcome.message, ref.generation)
            desired = with_outcome(live_status(plan, pods, view, self.clock()), degraded, ref.generation, self.clock())
            patch = await self._write(ref, desired, view)
            if changed:
                self.events(ref, "Normal", "Applied", f"generation {ref.generation}: applied {', '.join(changed)}")
            if _was_degraded(view):
                self.events(ref, "Normal", "Recovered", outcome.message)
            self._announce_ring(ref, view, patch)
            return outcome

    async def _fail(self, ref: ModelRef, plan: Plan | None, pods: list[Pod], view: dict[str, Any], outcome: Outcome) -> Outcome:
        """Degraded with the reason, the previous children untouched, one Warning event per
        new problem (not one per retry or operator restart)."""
        previous = find(view.get("conditions"), DEGRADED)
        degraded = degraded_condition(outcome.reason, outcome.message, ref.generation)
        desired = with_outcome(live_status(plan, pods, view, self.clock()), degraded, ref.generation, self.clock())
        await self._write(ref, desired, view)
        if not previous or previous.get("reason") != outcome.reason or previous.get("message") != outcome.message:
            self.events(ref, "Warning", outcome.reason, outcome.message)
        return outcome


def _was_degraded(view: Mapping[str, Any]) -> bool:
    found = find(view.get("conditions"), DEGRADED)
    return bool(found and found.get("status") == "True")


__all__ = ["ApplyError", "Controller", "Edge", "Events", "Outcome", "utcnow"]
