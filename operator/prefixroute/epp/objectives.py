"""--inference-objectives NAMESPACE/POOL: the priorities of GIE InferenceObjectives, read from the API.

A GIE gateway names a request's objective in the `x-gateway-inference-objective` header;
the objective is an InferenceObjective object (inference.networking.x-k8s.io/v1alpha2) whose
`spec.priority` is the request's band and whose `spec.poolRef.name` says which InferencePool
it belongs to. Users create those objects; `--objective-priorities` (spec.router.priorities)
can only spell the same mapping again. So the picker lists its namespace's InferenceObjectives
every `interval` seconds (in a thread: the event loop never waits on the API server), keeps
those of its pool, and gives the gate the mapping; a name `--objective-priorities` also lists
keeps the flag's priority (the spec is the operator's word). A list, not a watch: objectives
are a handful of small objects and a list cannot miss an event.

When the CRD is not installed (a 404), there are no objects, said once at INFO; any other
failure keeps the last mapping and is logged once per kind of failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from prefixroute.crd import OBJECTIVE_API_VERSION, OBJECTIVE_PLURAL, POOL_GROUP
from prefixroute.front.background import cancel_and_wait

log = logging.getLogger("prefixroute.epp.objectives")

Apply = Callable[[dict[str, int]], None]


class ObjectiveEdge(Protocol):
    def objectives(self) -> Sequence[Mapping[str, Any]] | None:
        """The namespace's InferenceObjectives, or None when the API has no such resource."""
        ...


def pool_priorities(objects: Sequence[Mapping[str, Any]], pool: str) -> dict[str, int]:
    """{objective name: priority} of the objects that belong to `pool`. An objective without
    a priority is GIE's default band (0); one of another pool, or of another group's pool
    kind, is not ours; one being deleted no longer counts."""
    out: dict[str, int] = {}
    for obj in objects:
        meta, spec = obj.get("metadata") or {}, obj.get("spec") or {}
        ref = spec.get("poolRef") or {}
        if ref.get("name") != pool or ref.get("group", POOL_GROUP) != POOL_GROUP or meta.get("deletionTimestamp"):
            continue
        priority = spec.get("priority", 0)
        name = meta.get("name")
        if isinstance(name, str) and isinstance(priority, int) and not isinstance(priority, bool):
            out[name] = priority
    return out


class InferenceObjectives:
    def __init__(
        self,
        namespace: str,
        pool: str,
        interval: float = 5.0,
        edge_factory: Callable[[], ObjectiveEdge] | None = None,
    ) -> None:
        self.namespace = namespace
        self.pool = pool
        self.interval = interval
        self.edge_factory = edge_factory or (lambda: PykubeObjectiveEdge(namespace))
        self._edge: ObjectiveEdge | None = None
        self._last: dict[str, int] | None = None
        self._problem = ""
        self._task: asyncio.Task[None] | None = None

    def read(self) -> dict[str, int]:
        """The pool's priorities now (blocking: runs in a thread). Raises on any failure."""
        if self._edge is None:
            self._edge = self.edge_factory()
        objects = self._edge.objectives()
        if objects is None:
            self._say_once("missing", "no InferenceObjective resource in the API (GIE's CRDs not installed)")
            return {}
        if self._problem == "missing":
            self._problem = ""  # installed since: say so again if it goes
        return pool_priorities(objects, self.pool)

    def _say_once(self, problem: str, message: str, level: int = logging.INFO) -> None:
        if problem != self._problem:
            log.log(level, "InferenceObjectives of pool %s/%s: %s", self.namespace, self.pool, message)
        self._problem = problem

    async def poll(self, apply: Apply) -> None:
        try:
            priorities = await asyncio.to_thread(self.read)
        except Exception as exc:  # keep the last mapping; say so once per kind of failure
            self._edge = None  # new credentials and connection next time
            problem = f"{type(exc).__name__}: {exc}"
            self._say_once(problem, f"reading them failed ({problem}); keeping the last", logging.WARNING)
            return
        if self._problem != "missing":
            self._problem = ""
        if priorities != self._last:
            self._last = priorities
            shown = ", ".join(f"{name}={p}" for name, p in sorted(priorities.items())) or "none"
            log.info("InferenceObjectives of pool %s/%s: %s", self.namespace, self.pool, shown)
            apply(priorities)

    async def start(self, apply: Apply) -> None:
        await self.poll(apply)
        self._task = asyncio.create_task(self._run(apply), name="inference-objectives-poll")

    async def _run(self, apply: Apply) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.poll(apply)

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None


class PykubeObjectiveEdge:
    """The namespace's InferenceObjectives through pykube-ng (KUBECONFIG, else the pod's
    service account), as the picker's other reads."""

    def __init__(self, namespace: str) -> None:
        import pykube  # type: ignore[import-untyped]

        from prefixroute.front.membership.kubernetes import kube_config

        self.namespace = namespace
        self.api = pykube.HTTPClient(kube_config(), timeout=10)

    def objectives(self) -> Sequence[Mapping[str, Any]] | None:
        resp = self.api.get(version=OBJECTIVE_API_VERSION, namespace=self.namespace, url=OBJECTIVE_PLURAL)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        items: Sequence[Mapping[str, Any]] = resp.json().get("items") or []
        return items
