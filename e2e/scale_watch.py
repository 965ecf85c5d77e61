"""What ``e2e.operator_scale`` sees of its fleet, from two watches (models and pods of its
namespace), each event stamped with the moment it arrived.

``Fleet`` keeps, per model, when it was created, when its first reconcile's status arrived
(``observedGeneration``), when it first was Ready, and the ring members; per engine pod, its
model and readiness. A ring change the run waits for (``expect``) is settled by the first
model event whose ring shows it: that time minus the change's own is one ring update.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from e2e.kube import ApiError, Kube

LOG = logging.getLogger("operator_scale")
MODEL_LABEL = "prefixroute.io/model"
COMPONENT_LABEL = "app.kubernetes.io/component"


class Watch(threading.Thread):
    """List, then watch ``path`` until stopped; list again after any failure (410 Gone, a
    closed stream). ``on_event(type, object, arrived)``; a listing arrives as ADDED events."""

    def __init__(self, kube: Kube, path: str, on_event: Callable[[str, dict[str, Any], float], None]) -> None:
        super().__init__(name=f"watch {path}", daemon=True)
        self.kube, self.path, self.on_event = kube, path, on_event
        self.stopping = threading.Event()
        self.listed = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                listing = self.kube.get(self.path)
                now = time.monotonic()
                for item in listing["items"]:
                    self.on_event("ADDED", item, now)
                self.listed.set()
                version = listing["metadata"]["resourceVersion"]
                while not self.stopping.is_set():
                    for event in self.kube.watch(self.path, version, timeout_seconds=60):
                        if event["type"] == "ERROR":
                            raise ApiError(
                                event["object"].get("code", 500), json.dumps(event["object"]), "WATCH", self.path
                            )
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self.on_event(event["type"], event["object"], time.monotonic())
                        if self.stopping.is_set():
                            return
            except Exception as exc:
                if self.stopping.is_set():
                    return
                LOG.info("watch %s: %s; listing again", self.path, exc)
                time.sleep(0.5)


def is_ready(obj: Mapping[str, Any], kind: str = "Ready") -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True" for c in (obj.get("status") or {}).get("conditions") or ()
    )


@dataclass
class ModelSeen:
    created: float | None = None  # when its create call returned
    observed: float | None = None  # the first status with an observedGeneration (its first reconcile)
    ready: float | None = None  # the first Ready=True
    ring: frozenset[str] = frozenset()
    metrics: str = ""  # the MetricsAvailable condition: "True/SignalsFresh", ...
    ramping: bool = False  # a ring member's weight is below 1 (a slow start under way)


@dataclass
class EnginePod:
    model: str
    ready: bool
    terminating: bool
    seen_ready: float | None = None  # when this watch last saw it turn Ready


@dataclass
class Expectation:
    model: str
    pod: str
    in_ring: bool  # True: the pod must join the ring; False: leave it
    since: float
    kind: str  # delete | unready | ready | join (a replacement pod)
    echoed: float | None = None  # when this run's pod watch saw the change
    settled: float | None = None  # when this run's model watch saw the ring show it


@dataclass
class Fleet:
    """The run's view of its models and engine pods (every method may be called from the
    watch threads and the run's own at once)."""

    models: dict[str, ModelSeen] = field(default_factory=dict)
    engines: dict[str, EnginePod] = field(default_factory=dict)
    pending: list[Expectation] = field(default_factory=list)
    settled: list[tuple[Expectation, float]] = field(default_factory=list)  # (what, seconds)
    echoes: dict[str, Expectation] = field(default_factory=dict)  # by pod: changes this watch has not seen yet
    echoed: list[float] = field(default_factory=list)  # change -> this watch seeing the pod changed
    time_joins: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)
    engines_changed: threading.Event = field(default_factory=threading.Event)

    def created(self, name: str, at: float) -> None:
        with self.lock:
            self.models.setdefault(name, ModelSeen()).created = at

    def on_model(self, type_: str, obj: dict[str, Any], arrived: float) -> None:
        name = obj["metadata"]["name"]
        status = obj.get("status") or {}
        with self.lock:
            seen = self.models.setdefault(name, ModelSeen())
            if type_ == "DELETED":
                return
            if seen.observed is None and status.get("observedGeneration"):
                seen.observed = arrived
            if seen.ready is None and is_ready(obj):
                seen.ready = arrived
            members = (status.get("ring") or {}).get("members") or ()
            seen.ring = frozenset(m["pod"] for m in members)
            seen.ramping = any(float(m.get("weight", 1.0)) < 1.0 for m in members)
            available = next((c for c in status.get("conditions") or () if c.get("type") == "MetricsAvailable"), None)
            if available is not None:
                seen.metrics = f"{available.get('status')}/{available.get('reason')}"
            self._settle(name, seen.ring, arrived)

    def _settle(self, model: str, ring: frozenset[str], arrived: float) -> None:
        still = []
        for want in self.pending:
            if want.model == model and (want.pod in ring) == want.in_ring:
                self.settled.append((want, arrived - want.since))
                want.settled = arrived
            else:
                still.append(want)
        self.pending = still

    def on_pod(self, type_: str, obj: dict[str, Any], arrived: float) -> None:
        meta = obj["metadata"]
        labels = meta.get("labels") or {}
        if labels.get(COMPONENT_LABEL) != "engine" or MODEL_LABEL not in labels:
            return
        name = meta["name"]
        with self.lock:
            self._echo(name, type_ == "DELETED" or bool(meta.get("deletionTimestamp")), is_ready(obj), arrived)
            if type_ == "DELETED":
                if self.engines.pop(name, None) is not None:
                    self.engines_changed.set()
                return
            ready = is_ready(obj)
            known = self.engines.get(name)
            pod = EnginePod(labels[MODEL_LABEL], ready, bool(meta.get("deletionTimestamp")))
            pod.seen_ready = known.seen_ready if known is not None else None
            if ready and not pod.terminating and (known is None or not known.ready):
                pod.seen_ready = arrived
                if known is None or known.seen_ready is None:  # a new pod (a replacement), not one we flipped
                    if self.time_joins and pod.model in self.models:
                        self._expect(Expectation(pod.model, name, True, arrived, "join"))
            self.engines[name] = pod
            if known is None:
                self.engines_changed.set()

    def _echo(self, pod: str, gone: bool, ready: bool, arrived: float) -> None:
        """The change made to ``pod``, as the API server's watch tells it back: the control
        plane's own share of a ring update."""
        want = self.echoes.get(pod)
        if want is not None and (gone if want.kind == "delete" else ready == want.in_ring and not gone):
            self.echoed.append(arrived - want.since)
            want.echoed = arrived
            del self.echoes[pod]

    def _expect(self, want: Expectation) -> None:
        seen = self.models.get(want.model)
        if seen is not None and (want.pod in seen.ring) == want.in_ring:
            self.settled.append((want, 0.0))  # the ring was there first (a join seen late)
        else:
            self.pending.append(want)

    def expect(self, want: Expectation) -> None:
        with self.lock:
            self.pending.append(want)
            self.echoes[want.pod] = want

    def after_echo(self) -> list[float]:
        """For each of the run's own changes seen both ways: from this run's pod watch seeing
        the change to its model watch seeing the ring show it (negative when the ring came
        first) — the ring update less the control plane's share, i.e. the operator's part
        (its watch, its write, the write's way back)."""
        with self.lock:
            return [
                want.settled - want.echoed
                for want, _ in self.settled
                if want.kind != "join" and want.settled is not None and want.echoed is not None
            ]

    def in_ring(self, model: str, pod: str) -> bool:
        with self.lock:
            seen = self.models.get(model)
            return seen is not None and pod in seen.ring

    def engine_pods(self) -> list[tuple[str, EnginePod]]:
        with self.lock:
            return list(self.engines.items())

    def unsettled(self) -> list[Expectation]:
        with self.lock:
            return list(self.pending)

    def waiting_for(self) -> int:
        with self.lock:
            return len(self.pending)

    def snapshot(self) -> dict[str, ModelSeen]:
        with self.lock:
            return {k: replace(v) for k, v in self.models.items()}
