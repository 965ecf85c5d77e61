from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.routing.load import LoadTracker


def test_begin_end_track_requests_and_units():
    load = LoadTracker()
    load.begin("a", 100)
    load.begin("a", 50)
    assert load.get("a").in_flight == 2
    assert load.get("a").in_flight_units == 150
    load.end("a", 100)
    assert load.get("a").in_flight == 1
    assert load.get("a").in_flight_units == 50
    load.end("a", 50)
    load.end("a", 50)  # an extra end never goes negative
    assert load.get("a").in_flight == 0
    assert load.get("a").in_flight_units == 0


def test_requests_is_the_larger_of_own_count_and_engine_report():
    load = LoadTracker()
    load.begin("a", 1)
    assert load.get("a").requests == 1
    load.report_engine("a", waiting=3, running=2, kv_usage=0.5)
    assert load.get("a").requests == 5
    assert load.get("unknown").requests == 0


def test_imbalance_is_max_over_mean():
    load = LoadTracker()
    assert load.imbalance(["a", "b"]) == 1.0
    for _ in range(3):
        load.begin("a", 1)
    load.begin("b", 1)
    assert load.imbalance(["a", "b"]) == 1.5


def test_prefill_queue_counts_uncached_units_until_the_first_byte():
    load = LoadTracker()
    load.begin("a", 1000, prefill=300)  # 700 units expected from the cache
    load.begin("a", 500)  # unknown: all of it
    assert load.get("a").prefill_units == 800
    load.first_byte("a", 300)
    assert load.get("a").prefill_units == 500
    load.end("a", 1000, prefill=0)  # its prefill was already done
    load.end("a", 500)  # ended before any byte: its whole prefill leaves the queue
    assert load.get("a").prefill_units == 0
    assert load.get("a").in_flight == 0


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.sampled_from(("begin", "end", "first_byte", "report", "peers", "forget", "rescope")),
            st.sampled_from("abcd"),
            st.integers(0, 6),
        ),
        max_size=60,
    )
)
def test_the_running_total_equals_a_recount_after_any_changes(steps):
    load = LoadTracker()
    scope = frozenset("abc")
    load.total_requests(scope)
    for op, name, n in steps:
        if op == "begin":
            load.begin(name, 10 * n, n)
        elif op == "end":
            load.end(name, 10 * n, 0)
        elif op == "first_byte":
            load.first_byte(name, n)
        elif op == "report":
            load.report_engine(name, waiting=n / 2, running=n, kv_usage=0.1)
        elif op == "peers":
            load.set_peers(name, n, 10 * n, n)
        elif op == "forget":
            load.forget(name)
        else:
            scope = frozenset(scope ^ {name}) or frozenset("a")  # a new fleet: a new set object
        assert load.total_requests(scope) == sum(load.get(x).requests for x in scope)


def test_peers_figures_add_to_the_routers_own_and_count_in_requests():
    load = LoadTracker()
    load.begin("a", 100, prefill=40)
    load.set_peers("a", 2, 300, 200)
    a = load.get("a")
    assert (a.in_flight, a.peer_in_flight, a.requests) == (1, 2, 3)
    assert (a.units, a.queued_prefill) == (400, 240)
    load.report_engine("a", waiting=4, running=1, kv_usage=0.2)
    assert load.get("a").requests == 5  # the engine's figure, when larger, still wins
    assert list(load.own()) == [("a", 1, 100, 40)]  # what this router tells its peers: its own only


def test_only_own_changes_count_as_changes_to_report():
    load = LoadTracker()
    before = load.changes
    load.set_peers("a", 1, 10, 10)
    load.report_engine("a", waiting=1, running=0, kv_usage=0.0)
    assert load.changes == before
    load.begin("a", 10)
    load.first_byte("a", 10)
    load.end("a", 10, 0)
    assert load.changes == before + 3


def test_forget_keeps_what_peers_still_have_in_flight():
    load = LoadTracker()
    load.begin("a", 10)
    load.end("a", 10)
    load.set_peers("a", 2, 20, 0)
    load.forget("a")  # it left the fleet: this router's figures go...
    assert load.get("a").requests == 2  # ...the peers' requests there have not ended
    load.set_peers("a", 0, 0, 0)
    assert "a" not in load.snapshot()
