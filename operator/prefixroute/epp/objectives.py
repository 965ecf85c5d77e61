"""--inference-objectives NAMESPACE/POOL: the priorities of GIE InferenceObjectives, read from the API.

A GIE gateway names a request's objective in the `x-gateway-inference-objective` header;
the objective is an InferenceObjective object (inference.networking.x-k8s.io/v1alpha2) whose
`spec.priority` is the request's band and whose `spec.poolRef.name` says which InferencePool
it belongs to. Users create those objects; `--objective-priorities` (spec.router.priorities)
can only spell the same mapping again. So the picker lists its namespace's InferenceObjectives
every `interval` seconds (`front.api_poll`: a list in a thread), keeps those of its pool, and
gives the gate the mapping; a name `--objective-priorities` also lists keeps the flag's
priority (the spec is the operator's word).

When the CRD is not installed (a 404), there are no objects, said once at INFO; any other
failure keeps the last mapping and is logged once per kind of failure.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from prefixroute.crd import OBJECTIVE_API_VERSION, OBJECTIVE_PLURAL, POOL_GROUP
from prefixroute.front.api_poll import ApiPoll

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
        self.edge_factory = edge_factory or (lambda: PykubeObjectiveEdge(namespace))
        self._edge: ObjectiveEdge | None = None
        self._missing = False
        self._poll: ApiPoll[dict[str, int]] = ApiPoll(
            f"the InferenceObjectives of pool {namespace}/{pool}", self.read, interval, log, on_failure=self._drop_edge
        )

    def read(self) -> dict[str, int]:
        """The pool's priorities now (blocking: runs in a thread). Raises on any failure."""
        if self._edge is None:
            self._edge = self.edge_factory()
        objects = self._edge.objectives()
        if (objects is None) != self._missing:
            self._missing = objects is None
            if self._missing:
                log.info("no InferenceObjective resource in the API (GIE's CRDs not installed): no objectives")
        return {} if objects is None else pool_priorities(objects, self.pool)

    def _drop_edge(self) -> None:
        self._edge = None  # new credentials and connection next time

    def _say(self, apply: Apply) -> Apply:
        def applied(priorities: dict[str, int]) -> None:
            shown = ", ".join(f"{name}={p}" for name, p in sorted(priorities.items())) or "none"
            log.info("InferenceObjectives of pool %s/%s: %s", self.namespace, self.pool, shown)
            apply(priorities)

        return applied

    async def poll(self, apply: Apply) -> None:
        await self._poll.poll(self._say(apply))

    async def start(self, apply: Apply) -> None:
        await self._poll.start(self._say(apply))

    async def stop(self) -> None:
        await self._poll.stop()


class PykubeObjectiveEdge:
    """The namespace's InferenceObjectives through pykube-ng (KUBECONFIG, else the pod's
    service account), as the picker's other reads."""

    def __init__(self, namespace: str) -> None:

        from prefixroute.front.list_watch import client

        self.namespace = namespace
        self.api = client(timeout=10)

    def objectives(self) -> Sequence[Mapping[str, Any]] | None:
        resp = self.api.get(version=OBJECTIVE_API_VERSION, namespace=self.namespace, url=OBJECTIVE_PLURAL)
        if resp.status_code == 404:
            return None
        resp.raise_for_status()
        items: Sequence[Mapping[str, Any]] = resp.json().get("items") or []
        return items
