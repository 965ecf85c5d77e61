"""Router replicas that tell each other their load and history: two or three dispatchers,
reports carried by hand, and what each then believes."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher
from prefixroute.routing.peers import PeerPublisher, PeerReport, PeerView, fingerprint
from tests.routing.helpers import SMALL_BLOCKS, fleet_of, text_request

PROMPT = "a conversation's own long history, block after block after block; " * 4


class Replica:
    """A dispatcher with its publisher and its view of the others."""

    def __init__(self, name: str, members: int = 4, history: bool = True, config: RoutingConfig = SMALL_BLOCKS):
        self.dispatcher = Dispatcher(replace(config, strategy="prefix-cache"))
        self.dispatcher.set_fleet(fleet_of(members))
        key = fingerprint(config, "approximate")
        self.publisher = PeerPublisher(name, self.dispatcher, key, history)
        self.view = PeerView(self.dispatcher, key, silence=3.0, me=name)

    def route(self, text: str):  # type: ignore[no-untyped-def]
        return self.dispatcher.route(text_request(text))  # the publisher hears of it (the listener)

    def tell(self, *others: "Replica", now: float = 0.0) -> PeerReport:
        report = self.publisher.report(now)
        for other in others:
            other.view.receive(report, now, source=f"addr-{self.publisher.sender}")
        return report


def test_a_peer_s_requests_in_flight_count_in_the_load_view_until_it_says_they_ended() -> None:
    a, b = Replica("a"), Replica("b")
    ticket = a.route(PROMPT)
    a.tell(b)
    seen = b.dispatcher.load.get(ticket.member.name)
    assert (seen.in_flight, seen.peer_in_flight, seen.requests) == (0, 1, 1)
    assert seen.peer_units == ticket.request.units
    assert seen.queued_prefill == ticket.prefill
    ticket.first_byte()
    a.tell(b)
    assert b.dispatcher.load.get(ticket.member.name).queued_prefill == 0
    ticket.finish(True)
    a.tell(b)
    assert b.dispatcher.load.get(ticket.member.name).requests == 0
    assert b.view.loads() == {}


def test_peers_loads_add_up_and_count_in_the_load_bound() -> None:
    a, b, c = Replica("a"), Replica("b"), Replica("c")
    for _ in range(3):
        a.route(PROMPT)
    b.route(PROMPT)
    a.tell(c)
    b.tell(c)
    member = a.dispatcher.load.own().__next__()[0]
    assert c.dispatcher.load.get(member).requests == 4
    # c's bounds now see the fleet's 4 requests, as one router holding all of them would.
    names = c.dispatcher.fleet.ring.names
    assert c.dispatcher.load.total_requests(names) == 4


def test_history_from_peers_sends_a_conversation_back_where_another_replica_put_it() -> None:
    a, b = Replica("a"), Replica("b")
    first = a.route(PROMPT)
    first.finish(True)
    a.tell(b)
    follow_up = b.route(PROMPT + " and the next question of the same conversation")
    assert follow_up.member == first.member
    assert follow_up.matched == len(first.request.blocks)


def test_without_history_only_the_load_travels() -> None:
    a, b = Replica("a", history=False), Replica("b")
    first = a.route(PROMPT)
    report = a.tell(b)
    assert report.routed == ()
    assert b.dispatcher.strategy.matched_blocks(first.request, first.member) == 0
    assert b.dispatcher.load.get(first.member.name).peer_in_flight == 1


def test_history_keyed_differently_is_ignored_but_its_load_counts() -> None:
    a = Replica("a")
    b = Replica("b", config=replace(SMALL_BLOCKS, block_size=32))  # another block size: other keys
    first = a.route(PROMPT)
    a.tell(b)
    assert b.view.counts["foreign"] == 1
    assert b.view.counts["routed"] == 0
    assert b.dispatcher.strategy.index_blocks() == {}
    assert b.dispatcher.load.get(first.member.name).peer_in_flight == 1


def test_a_silent_peer_stops_counting_after_the_silence_timeout() -> None:
    a, b = Replica("a"), Replica("b")
    ticket = a.route(PROMPT)
    a.tell(b, now=10.0)
    assert b.view.tick(12.9) == []
    assert b.view.peers() == 1
    assert b.view.tick(13.1) == ["a"]
    assert b.view.peers() == 0
    assert b.view.counts["expired"] == 1
    assert b.dispatcher.load.get(ticket.member.name).requests == 0
    # It speaks again: it counts again.
    a.tell(b, now=14.0)
    assert b.dispatcher.load.get(ticket.member.name).requests == 1


def test_a_restarted_peer_replaces_its_old_self_at_once() -> None:
    a, b = Replica("a"), Replica("b")
    for _ in range(2):
        a.route(PROMPT)
    a.tell(b)
    restarted = Replica("a2")  # a new process at the same address: nothing in flight
    report = restarted.publisher.report(1.0)
    b.view.receive(report, 1.0, source="addr-a")
    assert b.view.counts["restarts"] == 1
    assert b.view.peers() == 1
    assert all(load.requests == 0 for load in b.dispatcher.load.snapshot().values())


def test_lost_reports_are_counted_and_the_next_one_corrects_the_load() -> None:
    a, b = Replica("a"), Replica("b")
    a.tell(b)  # heard: b now expects report 1 next
    ticket = a.route(PROMPT)
    a.publisher.report(0.0)  # lost on the way
    ticket.finish(True)
    a.publisher.report(0.1)  # lost too
    second = a.route(PROMPT)
    a.tell(b, now=0.2)
    assert b.view.counts["gaps"] == 1
    assert b.dispatcher.load.get(second.member.name).peer_in_flight == 1


def test_own_reports_heard_back_and_duplicates_are_ignored() -> None:
    a, b = Replica("a"), Replica("b")
    a.route(PROMPT)
    report = a.publisher.report(0.0)
    a.view.receive(report, 0.0)
    assert a.view.peers() == 0
    b.view.receive(report, 0.0)
    b.view.receive(report, 0.0)
    assert b.view.counts["reports"] == 1
    assert b.view.counts["routed"] == 1


def test_a_peer_that_leaves_the_replica_set_is_forgotten_at_once() -> None:
    a, b = Replica("a"), Replica("b")
    a.route(PROMPT)
    a.tell(b)
    b.view.forget_source("addr-a")
    assert b.view.peers() == 0
    assert b.view.loads() == {}


def test_a_report_is_owed_after_a_change_or_when_the_heartbeat_is_due() -> None:
    a = Replica("a")
    assert a.publisher.owed(0.0)  # nothing said yet
    a.publisher.report(0.0)
    assert not a.publisher.owed(0.5)
    assert a.publisher.owed(1.0)  # heartbeat
    a.publisher.report(1.0)
    ticket = a.route(PROMPT)
    assert a.publisher.owed(1.01)
    a.publisher.report(1.01)
    ticket.first_byte()
    assert a.publisher.owed(1.02)


def test_pending_history_is_bounded() -> None:
    dispatcher = Dispatcher(SMALL_BLOCKS)
    dispatcher.set_fleet(fleet_of(2))
    publisher = PeerPublisher("a", dispatcher, "k", max_pending=3)
    for i in range(5):
        dispatcher.route(text_request(f"request {i}"))
    report = publisher.report(0.0)
    assert len(report.routed) == 3
    assert publisher.dropped == 2
    assert [r.request for r in report.routed] == [text_request(f"request {i}") for i in (2, 3, 4)]
    assert [r.id for r in report.routed] == [2, 3, 4]
    assert report.oldest == 0  # all five still in flight


def test_history_from_peers_for_a_member_not_in_the_fleet_is_dropped() -> None:
    a, b = Replica("a", members=4), Replica("b", members=2)
    for i in range(8):
        a.route(f"conversation {i}: " + PROMPT)
    a.tell(b)
    assert set(b.dispatcher.strategy.index_blocks() or {}) <= {"m0", "m1"}


def test_the_fingerprint_follows_what_decides_block_keys() -> None:
    base = fingerprint(SMALL_BLOCKS, "approximate")
    assert fingerprint(SMALL_BLOCKS, "approximate") == base
    assert fingerprint(replace(SMALL_BLOCKS, block_size=32), "approximate") != base
    assert fingerprint(SMALL_BLOCKS, "precise", "tokenizer") != base
    assert fingerprint(replace(SMALL_BLOCKS, load_factor=2.0), "approximate") == base  # not a keying setting


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(("route", "first", "finish", "tell", "silence")), st.integers(0, 2)),
        max_size=50,
    )
)
def test_every_view_equals_the_sum_of_what_its_peers_last_said(steps: list[tuple[str, int]]) -> None:
    replicas = [Replica(name) for name in "abc"]
    tickets: list[list] = [[], [], []]  # type: ignore[type-arg]
    said: dict[tuple[int, int], dict[str, tuple[int, int, int]]] = {}  # (teller, listener) -> loads
    heard_at = [[0.0] * 3 for _ in range(3)]
    now = 0.0
    for op, i in steps:
        now += 0.5
        if op == "route":
            tickets[i].append(replicas[i].route(f"request {len(tickets[i])} " + PROMPT))
        elif op == "first" and tickets[i]:
            tickets[i][0].first_byte()
        elif op == "finish" and tickets[i]:
            tickets[i].pop(0).finish(True)
        elif op == "tell":
            others = [r for j, r in enumerate(replicas) if j != i]
            report = replicas[i].tell(*others, now=now)
            for j in range(3):
                if j != i:
                    said[(i, j)] = {n: (r, u, p) for n, r, u, p in report.loads}
                    heard_at[j][i] = now
        else:
            for j, r in enumerate(replicas):
                for gone in r.view.tick(now):
                    said.pop(("abc".index(gone), j), None)
        for j, listener in enumerate(replicas):
            expected: dict[str, list[int]] = {}
            for (_teller, heard_by), loads in said.items():
                if heard_by == j:
                    for name, figures in loads.items():
                        total = expected.setdefault(name, [0, 0, 0])
                        for k in range(3):
                            total[k] += figures[k]
            assert listener.view.loads() == {n: tuple(v) for n, v in expected.items() if any(v)}
            for name, (count, units, prefill) in listener.view.loads().items():
                seen = listener.dispatcher.load.get(name)
                assert (seen.peer_in_flight, seen.peer_units, seen.peer_prefill) == (count, units, prefill)


@pytest.mark.parametrize("strategy", ["prefix-hash", "least-load", "round-robin"])
def test_other_strategies_take_peers_reports_too(strategy: str) -> None:
    a = Dispatcher(replace(SMALL_BLOCKS, strategy=strategy))
    a.set_fleet(fleet_of(3))
    b = Dispatcher(replace(SMALL_BLOCKS, strategy=strategy))
    b.set_fleet(fleet_of(3))
    publisher = PeerPublisher("a", a, "k")
    ticket = a.route(text_request(PROMPT))
    PeerView(b, "k").receive(publisher.report(0.0), 0.0)
    assert b.load.get(ticket.member.name).requests == 1


def precise_replicas() -> tuple[Replica, Replica]:
    """Two replicas whose members are all followed precisely (their engines' events trusted)."""
    a, b = Replica("a"), Replica("b")
    for replica in (a, b):
        for member in replica.dispatcher.fleet.members:
            replica.dispatcher.set_precise(member.name, True)
    return a, b


def test_a_peer_s_request_counts_as_held_by_a_precise_member_until_it_ends() -> None:
    """The engine announces a prompt's blocks only when its prefill starts (maybe after a queue):
    meanwhile a peer's request with a new prefix counts there, as this replica's own would."""
    a, b = precise_replicas()
    first = a.route(PROMPT)
    a.tell(b)
    strategy = b.dispatcher.strategy
    assert strategy.matched_blocks(first.request, first.member) == len(first.request.blocks)
    second = b.route(PROMPT + " and a second request with the same new prefix")
    assert second.member == first.member
    assert second.matched == len(first.request.blocks)
    second.finish(True)
    first.finish(True)
    a.tell(b)
    assert strategy.matched_blocks(first.request, first.member) == 0  # over: the engine's events speak now


def test_a_lost_end_is_cleared_by_the_next_report_past_it() -> None:
    a, b = precise_replicas()
    first = a.route(PROMPT)
    a.tell(b)
    first.finish(True)
    a.publisher.report(1.0)  # its end, lost on the way
    a.route("another conversation altogether, " * 4)
    a.tell(b, now=2.0)  # says: everything before request 1 is over
    assert b.dispatcher.strategy.matched_blocks(first.request, first.member) == 0


def test_a_silent_peer_s_requests_end_with_it() -> None:
    a, b = precise_replicas()
    first = a.route(PROMPT)
    a.tell(b, now=0.0)
    b.view.tick(10.0)
    assert b.dispatcher.strategy.matched_blocks(first.request, first.member) == 0
