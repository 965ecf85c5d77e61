"""The latency model in virtual time: no wall clock anywhere."""

import pytest

from prefixroute.engine_model.adapters import AdapterSlots
from prefixroute.engine_model.kv_cache import KVCache, block_hashes
from prefixroute.engine_model.latency import LatencyModel
from prefixroute.engine_model.scheduler import EventKind, Scheduler, Sequence, State

MODEL = LatencyModel(prefill_tokens_per_s=1000.0, decode_tokens_per_s=10.0)


def make(max_running: int = 4, capacity: int = 1000) -> Scheduler:
    return Scheduler(KVCache(capacity, 16), MODEL, max_running)


def seq(name: str, tokens: list[int], output: int = 1, arrival: float = 0.0) -> Sequence:
    return Sequence(name, block_hashes(tokens, 16), len(tokens), output, arrival)


def run_all(s: Scheduler, until: float = 1e9) -> list:
    events = s.drain()
    while (t := s.next_event_time()) is not None and t <= until:
        events += s.advance(t)
    return events


def test_prefill_time_is_uncached_tokens_over_rate_and_decode_follows():
    s = make()
    a = seq("a", list(range(1000)), output=11)
    s.submit(a, 0.0)
    run_all(s)
    assert a.first_token == pytest.approx(1.0)
    assert a.finished == pytest.approx(2.0)  # 10 more tokens at 10 tokens/s
    assert a.state is State.FINISHED


def test_cached_prefix_shortens_prefill_in_proportion():
    s = make()
    tokens = list(range(1600))
    first, second = seq("a", tokens), seq("b", tokens + list(range(5000, 5400)), arrival=10.0)
    s.submit(first, 0.0)
    run_all(s)
    s.submit(second, 10.0)
    run_all(s)
    assert second.cached_tokens == 1600
    assert second.first_token - 10.0 == pytest.approx(400 / 1000)


def test_prefills_are_served_first_come_first_served_one_at_a_time():
    s = make(max_running=8)
    a, b, c = (seq(n, list(range(i * 10_000, i * 10_000 + 500))) for i, n in enumerate("abc"))
    for x in (a, b, c):
        s.submit(x, 0.0)
    assert s.num_running == 1
    assert s.num_waiting == 2
    run_all(s)
    assert [a.first_token, b.first_token, c.first_token] == pytest.approx([0.5, 1.0, 1.5])
    assert a.started < b.started < c.started


def test_at_most_max_running_sequences_and_waiters_start_when_a_slot_frees():
    s = make(max_running=2)
    long_out = [seq(f"s{i}", list(range(i * 1000, i * 1000 + 100)), output=21) for i in range(3)]
    for x in long_out:
        s.submit(x, 0.0)
    peak = 0
    while (t := s.next_event_time()) is not None:
        s.advance(t)
        peak = max(peak, s.num_running)
    assert peak == 2
    # the third starts only when the first finishes: 0.1 s prefill + 2 s decode
    assert long_out[2].started == pytest.approx(long_out[0].finished)


def test_events_come_in_time_order_and_cover_each_transition():
    s = make()
    a = seq("a", list(range(100)), output=3)
    s.submit(a, 0.0)
    events = run_all(s)
    assert [e.kind for e in events] == [EventKind.STARTED, EventKind.FIRST_TOKEN, EventKind.FINISHED]
    assert [e.time for e in events] == sorted(e.time for e in events)


def test_advance_stops_at_now():
    s = make()
    a = seq("a", list(range(1000)), output=11)
    s.submit(a, 0.0)
    s.drain()
    assert [e.kind for e in s.advance(0.5)] == []
    assert [e.kind for e in s.advance(1.5)] == [EventKind.FIRST_TOKEN]
    assert a.tokens_out_by(1.5, MODEL.decode_tokens_per_s) == 6


def test_abort_frees_the_slot_and_keeps_the_queue_moving():
    s = make(max_running=1)
    a, b = seq("a", list(range(100)), output=50), seq("b", list(range(5000, 5100)))
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    s.advance(0.2)
    s.abort(a, 0.2)
    assert a.state is State.ABORTED
    run_all(s)
    assert b.started == pytest.approx(0.2)
    assert b.state is State.FINISHED


def test_abort_of_a_waiting_sequence_removes_it():
    s = make(max_running=1)
    a, b = seq("a", list(range(100))), seq("b", list(range(5000, 5100)))
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    s.abort(b, 0.0)
    assert s.num_waiting == 0
    run_all(s)
    assert b.started is None


def test_kv_usage_counts_running_sequences_blocks():
    s = make(capacity=100)
    s.submit(seq("a", list(range(320)), output=16), 0.0)
    assert s.kv_usage() == pytest.approx(21 / 100)


def test_an_adapter_not_in_a_slot_is_loaded_before_its_prefill():
    s = Scheduler(KVCache(1000, 16), MODEL, 4, AdapterSlots(1, load_seconds=0.25, registered="ab"))
    a = seq("a", list(range(500)))
    a.adapter = "a"
    s.submit(a, 0.0)
    run_all(s)
    assert a.adapter_load_seconds == pytest.approx(0.25)
    assert a.first_token == pytest.approx(0.75)
    again = seq("a2", list(range(9000, 9500)), arrival=5.0)
    again.adapter = "a"
    s.submit(again, 5.0)
    run_all(s)
    assert again.first_token - 5.0 == pytest.approx(0.5)  # resident: no load


def test_a_request_whose_adapter_finds_no_slot_is_skipped_not_blocking():
    s = Scheduler(KVCache(1000, 16), MODEL, 4, AdapterSlots(1, load_seconds=0.0, registered="ab"))
    long_a = seq("a", list(range(100)), output=101)  # decodes for 10 s, holding the only slot
    long_a.adapter = "a"
    wants_b = seq("b", list(range(2000, 2100)))
    wants_b.adapter = "b"
    base = seq("base", list(range(4000, 4100)))
    for x in (long_a, wants_b, base):
        s.submit(x, 0.0)
    run_all(s)
    assert base.started < long_a.finished  # went ahead of the blocked request
    assert wants_b.started == pytest.approx(long_a.finished)
