"""Where the router learns its fleet: static URLs, a ring file, or its PrefixRoutedModel.

Every source has the same two-method shape (`start(apply)`, `stop()`) and calls
`apply(fleet)` on the event loop whenever membership changes; `source_for` is the
one place that picks a source from the settings.
"""

from __future__ import annotations

from prefixroute.router.membership.base import ApplyFleet, MembershipSource
from prefixroute.router.settings import RouterSettings


def source_for(settings: RouterSettings) -> MembershipSource:
    virtual_nodes = settings.routing.virtual_nodes
    if settings.backends:
        from prefixroute.router.membership.static import StaticSource

        return StaticSource(settings.backends, virtual_nodes)
    if settings.ring_file:
        from prefixroute.router.membership.ring_file import RingFileSource

        return RingFileSource(settings.ring_file, virtual_nodes, settings.ring_poll_interval)
    assert settings.resource is not None
    from prefixroute.router.membership.kubernetes import KubernetesSource

    namespace, name = settings.resource.split("/", 1)
    return KubernetesSource(namespace, name, virtual_nodes)


__all__ = ["ApplyFleet", "MembershipSource", "source_for"]
