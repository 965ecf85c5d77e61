"""kopf's peering rule as the models loop applies it: only the highest-priority live replica
acts; equal priorities all stand by; dead peers and the replica itself do not count."""

from datetime import UTC, datetime, timedelta

from prefixroute.controller.peering import Peering, active

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
ME = Peering(identity="op-a/1/aa", name="prefixroute", priority=100)


def peer(priority: int, seen_ago: float = 5, lifetime: int = 60) -> dict:
    return {"priority": priority, "lifetime": lifetime, "lastseen": (NOW - timedelta(seconds=seen_ago)).isoformat()}


def test_alone_or_above_every_live_peer_it_acts() -> None:
    assert active({ME.identity: peer(100)}, ME, NOW)
    assert active({ME.identity: peer(100), "op-b": peer(99)}, ME, NOW)


def test_a_live_peer_of_higher_or_equal_priority_pauses_it() -> None:
    assert not active({"op-b": peer(101)}, ME, NOW)
    assert not active({"op-b": peer(100)}, ME, NOW)  # kopf freezes every replica of one priority


def test_dead_peers_do_not_count() -> None:
    assert active({"op-b": peer(500, seen_ago=61, lifetime=60)}, ME, NOW)
    assert not active({"op-b": peer(500, seen_ago=59, lifetime=60)}, ME, NOW)


def test_a_peer_without_lastseen_is_live_as_kopf_reads_it() -> None:
    assert not active({"op-b": {"priority": 200, "lifetime": 60}}, ME, NOW)
    assert active({"op-b": {"priority": 200, "lifetime": 60, "lastseen": "garbage"}}, ME, NOW)


def test_standalone_always_acts_and_a_missing_object_pauses_only_mandatory_peering() -> None:
    assert active(None, Peering(identity="x"), NOW)
    assert not active(None, ME, NOW)
    assert active(None, Peering(identity="x", name="default", mandatory=False), NOW)
