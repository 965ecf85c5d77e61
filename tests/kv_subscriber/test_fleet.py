"""Every member's subscription, following the fleet: who is subscribed where, and when a
stream is dropped or started fresh. The sockets are stood in for (tests/kv_subscriber/
test_member.py runs real ones); the follower records what it was told."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import pytest

from prefixroute.kv_subscriber import fleet as fleet_module
from prefixroute.kv_subscriber.fleet import EventEndpoints, KVEventsSubscriber
from prefixroute.routing.fleet import Fleet, Member


@pytest.mark.parametrize(
    ("endpoints", "url", "found"),
    [
        (EventEndpoints(port=5557), "http://10.0.0.7:8000", ("tcp://10.0.0.7:5557", None)),
        (
            EventEndpoints(port=5557, replay_port=5558),
            "http://10.0.0.7:8000",
            ("tcp://10.0.0.7:5557", "tcp://10.0.0.7:5558"),
        ),
        (EventEndpoints(port=5557), "http://[fd00::7]:8000", ("tcp://[fd00::7]:5557", None)),
        (EventEndpoints(port=5557), "http://engine-0.ns.svc:8000/", ("tcp://engine-0.ns.svc:5557", None)),
        (EventEndpoints(), "http://10.0.0.7:8000", None),  # no list and no port: not followed
        (EventEndpoints(port=5557), "10.0.0.7:8000", None),  # no host to find
        (
            EventEndpoints(
                by_url={"http://a:8000": "tcp://127.0.0.1:7001"}, replay_by_url={"http://a:8000": "tcp://r"}
            ),
            "http://a:8000/",
            ("tcp://127.0.0.1:7001", "tcp://r"),
        ),
        (
            EventEndpoints(by_url={"http://a:8000": "tcp://127.0.0.1:7001"}, port=5557),  # the list wins
            "http://a:8000",
            ("tcp://127.0.0.1:7001", None),
        ),
        (
            EventEndpoints(by_url={"http://a:8000": "tcp://127.0.0.1:7001"}, port=5557),  # the rest: by port
            "http://b:8000",
            ("tcp://b:5557", None),
        ),
    ],
)
def test_where_a_member_publishes(endpoints: EventEndpoints, url: str, found) -> None:
    assert endpoints.of(Member("m", url)) == found


class Follower:
    def __init__(self) -> None:
        self.followed: list[set[str]] = []
        self.ticks: list[float] = []

    def follow(self, members) -> None:
        self.followed.append(set(members))

    def tick(self, now: float) -> None:
        self.ticks.append(now)


class Subscription:
    """Stands in for MemberSubscription: records its endpoints, start and stop."""

    made: ClassVar[list[Subscription]] = []

    def __init__(self, member, endpoint, replay, follower, context, clock, wall=None, on_lag=None) -> None:
        self.member, self.endpoint, self.replay = member, endpoint, replay
        self.started = self.stopped = False
        Subscription.made.append(self)

    def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True


@pytest.fixture
def made(monkeypatch) -> list[Subscription]:
    Subscription.made = []
    monkeypatch.setattr(fleet_module, "MemberSubscription", Subscription)
    return Subscription.made


def fleet(**urls: str) -> Fleet:
    return Fleet(tuple(Member(name, url) for name, url in urls.items()))


async def test_the_subscriptions_follow_the_fleet(made: list[Subscription]) -> None:
    follower = Follower()
    subscriber = KVEventsSubscriber(follower, EventEndpoints(port=5557))  # type: ignore[arg-type]
    await subscriber.start()
    try:
        await subscriber.apply(fleet(a="http://10.0.0.1:8000", b="http://10.0.0.2:8000"))
        assert sorted(subscriber.members()) == ["a", "b"]
        assert [(s.member, s.endpoint, s.started) for s in made] == [
            ("a", "tcp://10.0.0.1:5557", True),
            ("b", "tcp://10.0.0.2:5557", True),
        ]
        assert follower.followed[-1] == {"a", "b"}

        await subscriber.apply(fleet(b="http://10.0.0.2:8000", c="http://10.0.0.3:8000"))
        a, b, c = made
        assert (a.stopped, b.stopped, c.member, c.started) == (True, False, "c", True)  # b kept its stream
        assert sorted(subscriber.members()) == ["b", "c"]
        assert follower.followed[-1] == {"b", "c"}
    finally:
        await subscriber.stop()
    assert all(s.stopped for s in made)
    assert subscriber.members() == []


async def test_a_member_at_a_new_address_is_a_new_engine(made: list[Subscription]) -> None:
    follower = Follower()
    subscriber = KVEventsSubscriber(follower, EventEndpoints(port=5557))  # type: ignore[arg-type]
    await subscriber.start()
    try:
        await subscriber.apply(fleet(a="http://10.0.0.1:8000", b="http://10.0.0.2:8000"))
        follower.followed.clear()
        await subscriber.apply(fleet(a="http://10.0.0.1:8000", b="http://10.0.0.9:8000"))
        old_b, new_b = made[1], made[2]
        assert old_b.stopped
        assert (new_b.member, new_b.endpoint, new_b.started) == ("b", "tcp://10.0.0.9:5557", True)
        # the follower forgets b's stream (its sequence numbers, its view) before it starts afresh
        assert follower.followed == [{"a"}, {"a", "b"}]
    finally:
        await subscriber.stop()


async def test_members_without_an_endpoint_are_not_subscribed(made: list[Subscription]) -> None:
    endpoints = EventEndpoints(by_url={"http://a:8000": "tcp://127.0.0.1:7001"})
    subscriber = KVEventsSubscriber(Follower(), endpoints)  # type: ignore[arg-type]
    await subscriber.start()
    try:
        await subscriber.apply(fleet(a="http://a:8000", b="http://b:8000"))
        assert subscriber.members() == ["a"]
        assert [s.member for s in made] == ["a"]
    finally:
        await subscriber.stop()


async def test_apply_needs_start_first() -> None:
    subscriber = KVEventsSubscriber(Follower(), EventEndpoints(port=5557))  # type: ignore[arg-type]
    with pytest.raises(AssertionError, match="start"):
        await subscriber.apply(fleet(a="http://10.0.0.1:8000"))


async def test_trust_is_rejudged_on_the_injected_clock(monkeypatch) -> None:
    monkeypatch.setattr(fleet_module, "TICK_S", 0.0)
    follower = Follower()
    subscriber = KVEventsSubscriber(follower, EventEndpoints(), clock=lambda: 42.0)  # type: ignore[arg-type]
    await subscriber.start()
    try:
        for _ in range(5):
            await asyncio.sleep(0)  # let the ticker run a few rounds
    finally:
        await subscriber.stop()
    assert follower.ticks
    assert set(follower.ticks) == {42.0}
