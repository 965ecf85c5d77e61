"""Following a member's event stream: order, gaps and replay, restarts, silence, trust."""

from dataclasses import dataclass, field

from prefixroute.routing.kv_events import AllBlocksCleared, BlockStored, EventBatch
from prefixroute.routing.kv_stream import KVEventsFollower, ReplayRequest
from prefixroute.routing.token_blocks import chain, first_seed


@dataclass
class Sink:
    log: list[tuple[str, str, object]] = field(default_factory=list)

    def blocks_stored(self, member, keys):
        self.log.append(("stored", member, list(keys)))

    def blocks_removed(self, member, keys):
        self.log.append(("removed", member, list(keys)))

    def cache_cleared(self, member):
        self.log.append(("cleared", member, None))

    def set_precise(self, member, precise):
        self.log.append(("precise", member, precise))


def stored(first_token: int) -> EventBatch:
    """One root block of 4 tokens (engine hash = first token)."""
    return EventBatch(0.0, (BlockStored((first_token,), None, tuple(range(first_token, first_token + 4)), 4),))


def key(first_token: int) -> list[int]:
    return chain(list(range(first_token, first_token + 4)), 4, first_seed("m"))


def follower(replay: bool = False) -> tuple[KVEventsFollower, Sink]:
    sink = Sink()
    f = KVEventsFollower(sink, "m", 4, 100, replay=replay, stale_after=5.0)
    f.follow(["a", "b"])
    assert sorted(sink.log) == [("precise", "a", True), ("precise", "b", True)]  # idle and silent: nothing to learn
    sink.log.clear()
    return f, sink


def test_in_order_messages_are_applied_and_make_the_member_precise():
    f, sink = follower()
    assert f.receive("a", 0, stored(10), now=0.0) is None
    f.receive("a", 1, stored(20), now=0.1)
    assert sink.log == [("stored", "a", key(10)), ("stored", "a", key(20))]
    assert f.precise("a")
    assert f.precise("b")


def test_a_member_sent_work_is_routed_from_history_until_its_first_message():
    f, sink = follower()
    f.expect("b", 1.0)  # work that must store blocks went to b, which has said nothing yet
    assert not f.precise("b")
    assert sink.log == [("precise", "b", False)]
    f.tick(2.0)
    assert not f.precise("b")
    f.receive("b", 0, stored(10), now=2.5)
    assert f.precise("b")
    assert sink.log[-1] == ("precise", "b", True)


def test_routed_expects_events_only_from_work_that_must_store_blocks():
    f, sink = follower()
    f.routed("b", blocks=3, matched=3, now=1.0)  # all cached: nothing new to store, no events due
    assert f.precise("b")
    assert sink.log == []
    f.routed("b", blocks=3, matched=None, now=1.0)  # nothing known cached: blocks will be stored
    assert not f.precise("b")
    assert sink.log == [("precise", "b", False)]


def test_a_gap_asks_for_a_replay_and_holds_live_messages_until_it_is_in():
    f, sink = follower(replay=True)
    f.receive("a", 0, stored(10), 0.0)
    assert f.receive("a", 3, stored(40), 1.0) == ReplayRequest("a", 1)
    f.receive("a", 4, stored(50), 1.1)
    sink.log.clear()
    f.replayed("a", [(2, stored(30)), (1, stored(20)), (3, stored(40))], 1.2)
    # one change of the same kind after another reaches the sink as one run
    assert [k for kind, _, k in sink.log if kind == "stored"] == [key(20) + key(30) + key(40) + key(50)]
    assert sink.log[-1] == ("precise", "a", True)  # routed from history only while the replay was out
    stream = f.streams["a"]
    assert stream.last_seq == 4
    assert stream.counts["replays"] == 1
    assert stream.counts["gaps"] == 1
    assert f.precise("a")


def test_a_replay_that_cannot_reach_back_resyncs_and_trust_returns_after_settling():
    f, sink = follower(replay=True)
    f.receive("a", 0, stored(10), 0.0)
    f.receive("a", 5, stored(60), 1.0)
    sink.log.clear()
    f.replayed("a", [(3, stored(40)), (4, stored(50))], 1.1)  # 1 and 2 are gone from the engine's buffer
    assert sink.log == [("cleared", "a", None), ("stored", "a", key(60))]
    assert not f.precise("a")
    assert f.streams["a"].counts["replays_failed"] == 1
    f.tick(1.1 + 5.0)
    assert f.precise("a")


def test_a_replay_in_parts_holds_live_messages_until_the_last_part_and_fails_on_a_part_that_skips():
    f, sink = follower(replay=True)
    assert f.receive("a", 4, stored(50), 0.0) == ReplayRequest("a", 0)  # joined late
    f.replayed("a", [(0, stored(10))], 0.1, done=False)
    f.replayed("a", [(1, stored(20)), (2, stored(30))], 0.2, done=False)
    assert f.replaying("a")
    assert not f.precise("a")  # the live message waits for the rest
    assert [k for kind, _, k in sink.log if kind == "stored"] == [key(10), key(20) + key(30)]
    f.replayed("a", [(3, stored(40))], 0.3)
    assert [k for kind, _, k in sink.log if kind == "stored"] == [key(10), key(20) + key(30), key(40) + key(50)]
    assert f.precise("a")
    assert not f.replaying("a")
    assert f.streams["a"].counts["replays"] == 1
    # a later replay whose second part does not go on where the first stopped
    assert f.receive("a", 7, stored(80), 1.0) == ReplayRequest("a", 5)
    f.replayed("a", [(5, stored(60))], 1.1, done=False)
    sink.log.clear()
    f.replayed("a", [(7, stored(80))], 1.2, done=False)  # 6 is gone
    assert not f.replaying("a")
    assert f.streams["a"].counts["replays_failed"] == 1
    assert sink.log[0] == ("cleared", "a", None)
    assert not f.precise("a")  # resynced
    f.replayed("a", [(8, stored(90))], 1.3)  # what the edge may still send is ignored
    assert f.streams["a"].counts["replays"] == 1


def test_more_missing_than_a_replay_may_ask_for_resyncs_instead():
    f, sink = follower(replay=True)
    for name in ("a", "b"):
        f.streams[name].max_replay = 3
    assert f.receive("a", 3, stored(40), 0.0) == ReplayRequest("a", 0)  # joined 3 messages late: replay
    f.replayed("a", [(0, stored(10)), (1, stored(20)), (2, stored(30))], 0.1)
    assert f.precise("a")
    assert f.receive("a", 8, stored(90), 1.0) is None  # 4 missing: no replay, a resync
    stream = f.streams["a"]
    assert stream.counts["gaps"] == 1
    assert stream.counts["resyncs"] == 1
    assert not f.precise("a")
    assert f.receive("b", 50, stored(60), 2.0) is None  # joined 50 messages late: a resync too
    assert f.streams["b"].counts["resyncs"] == 1
    assert not f.precise("b")
    assert sink.log[-2:] == [("stored", "b", key(60)), ("precise", "b", False)]  # it learns from there, settling


def test_without_a_replay_endpoint_a_gap_resyncs_at_once():
    f, sink = follower()
    f.receive("a", 0, stored(10), 0.0)
    assert f.receive("a", 2, stored(30), 1.0) is None
    assert sink.log == [
        ("stored", "a", key(10)),
        ("cleared", "a", None),
        ("stored", "a", key(30)),
        ("precise", "a", False),
    ]
    assert f.streams["a"].counts["resyncs"] == 1
    f.tick(6.5)
    assert f.precise("a")


def test_numbers_starting_again_mean_a_restarted_engine_whose_cache_is_empty():
    f, sink = follower()
    f.receive("a", 0, stored(10), 0.0)
    f.receive("a", 1, stored(20), 0.1)
    sink.log.clear()
    f.receive("a", 0, stored(30), 5.0)
    assert sink.log == [("cleared", "a", None), ("stored", "a", key(30))]
    assert f.precise("a")
    assert f.streams["a"].counts["restarts"] == 1


def test_all_blocks_cleared_empties_the_view():
    f, sink = follower()
    f.receive("a", 0, stored(10), 0.0)
    f.receive("a", 1, EventBatch(0.0, (AllBlocksCleared(),)), 0.1)
    assert sink.log[-1] == ("cleared", "a", None)
    assert f.streams["a"].counts["clears"] == 1


def test_a_clear_after_a_resync_ends_the_settling_at_once():
    """A router that joined late and could not replay (the engine's buffer no longer reached
    back) settles before trusting its partial view; once the engine clears its cache the
    view is complete (both empty), so it is trusted from that message on."""
    f, sink = follower(replay=True)
    assert f.receive("a", 7, stored(10), 0.0) == ReplayRequest("a", 0)  # joined late
    f.replayed("a", [(5, stored(20))], 0.1)  # 0-4 are gone
    assert not f.precise("a")
    assert f.streams["a"].counts["resyncs"] == 1
    f.receive("a", 8, stored(30), 0.2)
    assert not f.precise("a")  # still settling: blocks stored before we joined are unknown
    f.receive("a", 9, EventBatch(0.0, (AllBlocksCleared(),)), 0.3)
    assert f.precise("a")
    assert sink.log[-1] == ("precise", "a", True)
    f.receive("a", 10, stored(40), 0.4)
    assert f.precise("a")
    assert f.streams["a"].counts["clears"] == 1


def test_a_silent_stream_after_work_was_sent_goes_stale_and_recovers_with_the_next_message():
    f, _ = follower()
    f.receive("a", 0, stored(10), 0.0)
    f.tick(100.0)
    assert f.precise("a")  # idle and silent is fine
    f.expect("a", 100.0)
    f.tick(104.0)
    assert f.precise("a")
    f.tick(105.5)
    assert not f.precise("a")
    assert f.streams["a"].counts["stale"] == 1
    f.receive("a", 1, stored(20), 106.0)
    assert f.precise("a")


def test_a_disconnected_member_is_not_trusted_and_members_that_left_are_ignored():
    f, _sink = follower()
    f.receive("a", 0, stored(10), 0.0)
    f.set_connected("a", False, 1.0)
    assert not f.precise("a")
    f.set_connected("a", True, 2.0)
    assert f.precise("a")
    f.follow(["b"])
    assert f.receive("a", 1, stored(20), 3.0) is None
    assert "a" not in f.streams


def test_a_malformed_message_counts_and_resyncs():
    f, sink = follower()
    f.receive("a", 0, stored(10), 0.0)
    f.malformed("a", 1.0)
    assert f.streams["a"].counts["malformed"] == 1
    assert ("cleared", "a", None) in sink.log
    assert not f.precise("a")


def test_a_member_the_front_is_behind_on_is_routed_from_history_until_it_catches_up():
    f, sink = follower()
    f.receive("a", 0, stored(10), now=0.0)
    assert f.lagged("a", 0.05, backlog=True, now=0.0) is None  # keeping up: no change
    assert f.lagged("a", 2.0, backlog=True, now=1.0) is True
    assert f.behind("a")
    assert not f.precise("a")
    assert sink.log[-1] == ("precise", "a", False)
    f.tick(2.0)
    assert not f.precise("a")  # time alone does not catch up: the queue must drain
    assert f.lagged("a", 2.5, backlog=False, now=3.0) is False
    assert f.precise("a")
    assert sink.log[-1] == ("precise", "a", True)
    assert f.streams["a"].counts["behind"] == 1
    assert f.lagged("gone", 2.0, backlog=True, now=3.0) is None  # a member not followed


def test_a_disconnect_forgets_being_behind():
    f, _ = follower()
    f.receive("a", 0, stored(10), now=0.0)
    f.lagged("a", 2.0, backlog=True, now=0.0)
    f.set_connected("a", False, now=1.0)
    f.set_connected("a", True, now=2.0)
    assert not f.behind("a")
    assert f.precise("a")


def test_the_blocks_a_stream_names_are_counted_whether_translated_or_not():
    from prefixroute.routing.kv_events import BlockRemoved

    f, _ = follower()
    f.receive("a", 0, stored(10), now=0.0)
    f.receive("a", 1, EventBatch(0.0, (BlockRemoved((10, 99)),)), now=0.1)  # 99 was never stored
    f.receive("a", 2, EventBatch(0.0, (BlockStored((5,), 777, (1, 2, 3, 4), 4),)), now=0.2)  # an orphan
    counts = f.streams["a"].counts
    assert (counts["stored_blocks"], counts["removed_blocks"], counts["orphaned_blocks"]) == (2, 2, 1)
