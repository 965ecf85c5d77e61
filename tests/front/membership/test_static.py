"""--backends: the fixed fleet, handed over once at start, each URL its own member."""

from __future__ import annotations

from prefixroute.front.membership.static import StaticSource
from prefixroute.routing.fleet import Fleet


async def test_the_fleet_is_applied_once_at_start_and_stop_ends_nothing() -> None:
    applied: list[Fleet] = []
    source = StaticSource(["http://10.0.0.1:8000/", "http://10.0.0.2:8000"], virtual_nodes=7)
    await source.start(applied.append)
    await source.stop()
    [fleet] = applied
    assert [(m.name, m.url) for m in fleet.members] == [
        ("http://10.0.0.1:8000", "http://10.0.0.1:8000"),  # a trailing slash is not part of the name
        ("http://10.0.0.2:8000", "http://10.0.0.2:8000"),
    ]
    assert fleet.virtual_nodes == 7
    assert [m.name for m in fleet.routable] == [m.name for m in fleet.members]
