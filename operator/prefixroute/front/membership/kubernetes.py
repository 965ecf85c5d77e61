"""--resource NAMESPACE/NAME: follow the PrefixRoutedModel's status.ring in Kubernetes.

The operator publishes the ring (ready engine pods, weights, a version) in the
resource's status; the router lists the one object, then watches it from that
resourceVersion (`front.list_watch`: a daemon thread, a backoff after any failure, the last
fleet kept meanwhile) and turns each new status.ring into a Fleet. An object that does not
exist yet is an empty fleet until it does; a deleted resource empties the fleet (the router
then answers 503 and /ready fails).

The API server is reached through a small edge (list, watch, close); tests drive the loop
with a fake edge, the e2e suite with a real API server.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from prefixroute.crd import API_VERSION, KIND, PLURAL
from prefixroute.front.list_watch import Edge, ListWatch, PykubeWatch, client
from prefixroute.front.membership.base import ApplyFleet
from prefixroute.routing.fleet import Fleet, fleet_from_ring_document

log = logging.getLogger("prefixroute.front.membership")

WatchEdge = Edge[Mapping[str, Any] | None]  # the resource (None when it does not exist)


def ring_document(resource: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """status.ring of a PrefixRoutedModel; an empty ring when there is none yet."""
    if not resource:
        return {"members": []}
    status = resource.get("status")
    ring = status.get("ring") if isinstance(status, Mapping) else None
    return ring if isinstance(ring, Mapping) else {"members": []}


def fleet_from_resource(resource: Mapping[str, Any] | None, virtual_nodes: int) -> Fleet:
    """The fleet a PrefixRoutedModel's status describes (raises ValueError for a malformed ring)."""
    return fleet_from_ring_document(ring_document(resource), virtual_nodes)


class KubernetesSource(ListWatch[Mapping[str, Any] | None]):
    def __init__(
        self,
        namespace: str,
        name: str,
        virtual_nodes: int,
        edge_factory: Callable[[], WatchEdge] | None = None,
        backoff: tuple[float, float] = (1.0, 30.0),
    ) -> None:
        super().__init__(
            f"PrefixRoutedModel {namespace}/{name}",
            "the current fleet",
            edge_factory or (lambda: PykubeEdge(namespace, name)),
            backoff,
        )
        self.namespace = namespace
        self.name = name
        self.virtual_nodes = virtual_nodes
        self._last_ring: Any = object()  # nothing delivered yet

    async def start(self, apply: ApplyFleet) -> None:
        self.begin(f"watch-{self.namespace}/{self.name}", apply)

    def listed(self, found: Mapping[str, Any] | None) -> None:
        if found is None:
            log.warning("%s not found; waiting for it", self.what)
        self._deliver(found)

    def changed(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            log.warning("%s was deleted; no members left", self.what)
            self._deliver(None)
        else:
            self._deliver(obj)

    def _deliver(self, resource: Mapping[str, Any] | None) -> None:
        """Hand a new ring to the loop; unchanged rings (status updates of other fields) are skipped."""
        ring = ring_document(resource)
        if ring == self._last_ring:
            return
        try:
            fleet = fleet_from_ring_document(ring, self.virtual_nodes)
        except (ValueError, TypeError) as exc:
            log.warning(
                "status.ring of %s/%s is malformed (%s); keeping the current fleet", self.namespace, self.name, exc
            )
            return
        self._last_ring = ring
        self.hand(fleet)


class PykubeEdge(PykubeWatch):
    """List and watch one PrefixRoutedModel with pykube-ng."""

    def __init__(self, namespace: str, name: str) -> None:
        from pykube.objects import NamespacedAPIObject  # type: ignore[import-untyped]

        class PrefixRoutedModel(NamespacedAPIObject):  # type: ignore[misc]  # untyped base
            version = API_VERSION
            endpoint = PLURAL
            kind = KIND

        self.name = name
        self.api = client()
        self.query = PrefixRoutedModel.objects(self.api, namespace=namespace).filter(
            field_selector={"metadata.name": name}
        )

    def list(self) -> tuple[Mapping[str, Any] | None, str]:
        body = self.query.execute().json()
        items = body.get("items") or []
        version = str(body.get("metadata", {}).get("resourceVersion", ""))
        return (items[0] if items else None), version
