"""Where a front (the router or the EPP) learns its fleet: static URLs, a ring file, its
PrefixRoutedModel, or (the EPP's flag) the ready pods of a GIE InferencePool.

Every source has the same two-method shape (`start(apply)`, `stop()`) and calls
`apply(fleet)` on the event loop whenever membership changes; `source_for` is the
one place that picks a source from a front's settings.
"""

from __future__ import annotations

from typing import Protocol

from prefixroute.front.membership.base import ApplyFleet, MembershipSource
from prefixroute.routing.config import RoutingConfig


class MembershipSettings(Protocol):
    """What `source_for` reads: both fronts' settings have these fields (exactly one source set)."""

    @property
    def backends(self) -> tuple[str, ...]: ...

    @property
    def ring_file(self) -> str | None: ...

    @property
    def resource(self) -> str | None: ...

    @property
    def inference_pool(self) -> str | None: ...

    @property
    def routing(self) -> RoutingConfig: ...

    @property
    def ring_poll_interval(self) -> float: ...


def source_for(settings: MembershipSettings) -> MembershipSource:
    virtual_nodes = settings.routing.virtual_nodes
    if settings.backends:
        from prefixroute.front.membership.static import StaticSource

        return StaticSource(settings.backends, virtual_nodes)
    if settings.ring_file:
        from prefixroute.front.membership.ring_file import RingFileSource

        return RingFileSource(settings.ring_file, virtual_nodes, settings.ring_poll_interval)
    if settings.inference_pool:
        from prefixroute.front.membership.inference_pool import InferencePoolSource

        namespace, name = settings.inference_pool.split("/", 1)
        return InferencePoolSource(namespace, name, virtual_nodes, settings.ring_poll_interval)
    assert settings.resource is not None
    from prefixroute.front.membership.kubernetes import KubernetesSource

    namespace, name = settings.resource.split("/", 1)
    return KubernetesSource(namespace, name, virtual_nodes)


__all__ = ["ApplyFleet", "MembershipSettings", "MembershipSource", "source_for"]
