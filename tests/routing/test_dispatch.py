"""The one dispatch: a ticket's steps reach the load view and the strategy exactly once, in order."""

import pytest

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher
from prefixroute.routing.errors import AdapterNotReady, AdapterUnavailable, NoMemberAvailable
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.request import routing_request
from tests.routing.helpers import SMALL_BLOCKS, fleet_of, text_request

PROMPT = "the same long system prompt, block after block after block; " * 3


def dispatcher(strategy: str = "prefix-cache", members: int = 2) -> Dispatcher:
    d = Dispatcher(RoutingConfig(**{**SMALL_BLOCKS.__dict__, "strategy": strategy}))
    d.set_fleet(fleet_of(members))
    return d


def test_route_counts_the_request_and_its_prefill_until_the_first_byte() -> None:
    d = dispatcher()
    request = text_request(PROMPT)
    ticket = d.route(request)
    load = d.load.get(ticket.member.name)
    assert (load.in_flight, load.in_flight_units, load.prefill_units) == (1, request.units, request.units)
    assert ticket.matched == 0
    assert ticket.prefill == request.units
    ticket.first_byte()
    ticket.first_byte()  # a second report changes nothing
    assert (load.in_flight, load.prefill_units) == (1, 0)
    ticket.finish(True)
    ticket.finish(True)
    assert (load.in_flight, load.in_flight_units, load.prefill_units) == (0, 0, 0)
    assert ticket.done


def test_finish_without_a_first_byte_releases_the_prefill_too() -> None:
    d = dispatcher()
    ticket = d.route(text_request(PROMPT))
    ticket.finish(False)
    ticket.first_byte()  # too late: the request is over
    load = d.load.get(ticket.member.name)
    assert (load.in_flight, load.in_flight_units, load.prefill_units) == (0, 0, 0)


def test_a_second_request_with_the_prefix_sees_it_cached_and_adds_only_its_tail() -> None:
    d = dispatcher()
    first = d.route(text_request(PROMPT))
    second = d.route(text_request(PROMPT + " and a question"))
    assert second.member == first.member
    assert second.matched == len(first.request.blocks)
    assert second.prefill == second.request.units - second.matched * SMALL_BLOCKS.block_size


def test_strategies_without_an_index_expect_the_whole_prompt_to_be_computed() -> None:
    ticket = dispatcher("round-robin").route(text_request(PROMPT))
    assert ticket.matched is None
    assert ticket.prefill == ticket.request.units


def test_exclude_and_an_empty_fleet() -> None:
    d = dispatcher(members=2)
    assert d.route(text_request(PROMPT), exclude={"m0"}).member.name == "m1"
    with pytest.raises(NoMemberAvailable):
        d.route(text_request(PROMPT), exclude={"m0", "m1"})
    d.set_fleet(Fleet(()))
    with pytest.raises(NoMemberAvailable):
        d.route(text_request(PROMPT))


def test_avoided_members_are_used_only_when_nothing_else_is_left() -> None:
    d = dispatcher(members=3)
    assert d.route(text_request(PROMPT), avoid={"m0", "m1"}).member.name == "m2"
    # m2 failed (excluded): the avoided members beat failing the request
    assert d.route(text_request(PROMPT), exclude={"m2"}, avoid={"m0", "m1"}).member.name in {"m0", "m1"}
    with pytest.raises(NoMemberAvailable):
        d.route(text_request(PROMPT), exclude={"m0", "m1", "m2"}, avoid={"m0"})


def test_a_member_that_leaves_is_forgotten_once_its_last_ticket_finishes() -> None:
    d = dispatcher(members=1)
    request = text_request(PROMPT)
    ticket = d.route(request)
    assert d.set_fleet(Fleet((Member("m9", "http://m9"),))) == ["m0"]
    assert d.strategy.matched_blocks(request, ticket.member) == 0  # the strategy forgot it at once
    assert "m0" in d.load.snapshot()  # the load view keeps it while our request is in flight
    ticket.finish(True)
    assert "m0" not in d.load.snapshot()


def test_a_member_at_a_new_address_is_a_new_engine() -> None:
    d = dispatcher(members=1)
    request = text_request(PROMPT)
    d.route(request).finish(True)
    assert d.set_fleet(Fleet((Member("m0", "http://elsewhere"),))) == ["m0"]
    assert d.strategy.matched_blocks(request, d.fleet.by_name["m0"]) == 0
    assert d.set_fleet(Fleet((Member("m0", "http://elsewhere", weight=0.5),))) == []  # a weight is no new engine


# -- precise mode: the engines' events reach the strategy through the dispatcher ---------


def test_router_replicas_fed_the_same_events_hold_the_same_view_and_choose_alike():
    from prefixroute.routing.kv_events import BlockStored, EventBatch
    from prefixroute.routing.kv_stream import KVEventsFollower
    from prefixroute.routing.request import RoutingRequest
    from prefixroute.routing.token_blocks import chain, first_seed

    config = RoutingConfig(block_size=4)
    fleet = fleet_of(3)
    replicas = [Dispatcher(config) for _ in range(2)]
    followers = [KVEventsFollower(d, "m", 4, 1000) for d in replicas]
    for d, f in zip(replicas, followers):
        d.set_fleet(fleet)
        f.follow(m.name for m in fleet.members)
    tokens = tuple(range(32))
    keys = chain(tokens, 4, first_seed("m"))
    # replica 0 never routed this prefix; the engine m2 stored it (another replica's request)
    for f in followers:
        f.receive("m2", 0, EventBatch(0.0, (BlockStored(tuple(range(8)), None, tokens, 4),)), 0.0)
        f.receive("gone", 0, EventBatch(0.0, (BlockStored((1,), None, tokens[:4], 4),)), 0.0)
    request = RoutingRequest(tuple(keys), keys[1], len(tokens))
    tickets = [d.route(request) for d in replicas]
    assert [t.member.name for t in tickets] == ["m2", "m2"]
    assert [t.matched for t in tickets] == [8, 8]
    # each replica remembers the 8 stored blocks, plus the 8 it has just routed itself
    assert [d.strategy.index_blocks() for d in replicas] == [{"m2": 16}, {"m2": 16}]
    for t in tickets:
        t.finish(True)


# -- TTFT objectives ----------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def timed(members: int = 2) -> tuple[Dispatcher, FakeClock]:
    clock = FakeClock()
    d = Dispatcher(SMALL_BLOCKS, clock=clock)
    d.set_fleet(fleet_of(members))
    return d, clock


def test_first_bytes_teach_the_member_its_ttft() -> None:
    d, clock = timed()
    for i in range(20):
        ticket = d.route(text_request(f"prompt number {i} " * 8))
        assert ticket.routed_at == clock.now
        clock.now += 0.001 * ticket.work  # this fleet prefills 1,000 units a second
        ticket.first_byte()
        assert ticket.delivered == pytest.approx(0.001 * ticket.work)
        ticket.finish(True)
    ticket = d.route(text_request("one more prompt " * 8))
    assert ticket.predicted == pytest.approx(0.001 * ticket.work, rel=0.05)
    ticket.finish(True)


def test_without_a_clock_nothing_is_learned_or_predicted() -> None:
    d = dispatcher()
    ticket = d.route(text_request(PROMPT))
    ticket.first_byte()
    ticket.finish(True)
    assert (ticket.routed_at, ticket.delivered, ticket.predicted) == (None, None, None)


def slow_and_fast(d: Dispatcher) -> None:
    """m0 prefills 10 units a second, m1 1,000."""
    for _ in range(10):
        for name, rate in (("m0", 10.0), ("m1", 1000.0)):
            for work in (100.0, 1000.0):
                d.ttft.learn(name, work, work / rate)


def test_an_objective_moves_a_request_off_a_warm_member_predicted_to_miss_it() -> None:
    d, _ = timed()
    slow_and_fast(d)
    warm = d.route(text_request(PROMPT), exclude={"m1"})  # m0 now holds the prompt
    warm.finish(True)
    kept = d.route(text_request(PROMPT))  # no objective: affinity wins
    assert kept.member.name == "m0"
    kept.finish(True)
    # m0 holds all but 4 units, 0.4 s at its speed; m1 computes all 180 in 0.18 s
    moved = d.route(text_request(PROMPT), objective=0.25)
    assert moved.member.name == "m1"
    assert not moved.best_effort
    assert moved.predicted is not None
    assert moved.predicted <= 0.25
    moved.finish(True)
    hopeless = d.route(text_request(PROMPT + "and more " * 40), objective=0.001)
    assert hopeless.member.name == "m1"  # the quickest
    assert hopeless.best_effort
    hopeless.finish(True)
    assert all(d.load.get(n).in_flight == 0 for n in ("m0", "m1"))


PLACED = Fleet(
    (
        Member("m0", "http://m0", adapters=frozenset({"sql"})),
        Member("m1", "http://m1", adapters=frozenset({"sql", "poems"})),
        Member("m2", "http://m2", adapters=frozenset()),
        Member("m3", "http://m3", adapters=frozenset({"poems"})),
    )
)


@pytest.mark.parametrize("strategy", ["prefix-cache", "prefix-hash", "least-load", "round-robin"])
@pytest.mark.parametrize(("adapter", "servers"), [("sql", {"m0", "m1"}), ("poems", {"m1", "m3"})])
def test_every_strategy_sends_an_adapter_only_to_members_serving_it(
    strategy: str, adapter: str, servers: set[str]
) -> None:
    d = Dispatcher(RoutingConfig(**{**SMALL_BLOCKS.__dict__, "strategy": strategy}))
    d.set_fleet(PLACED)
    chosen = set()
    for i in range(40):
        ticket = d.route(routing_request(f"conversation {i} " * 6, d.config, adapter=adapter))
        chosen.add(ticket.member.name)
        if i % 3:
            ticket.finish(True)
    assert chosen <= servers
    assert len(chosen) == 2  # both servers take a share: load still spreads within the part


@pytest.mark.parametrize("strategy", ["prefix-cache", "prefix-hash", "least-load", "round-robin"])
def test_an_adapter_no_member_serves_is_a_routing_error_naming_it(strategy: str) -> None:
    d = Dispatcher(RoutingConfig(**{**SMALL_BLOCKS.__dict__, "strategy": strategy}))
    d.set_fleet(PLACED)
    with pytest.raises(AdapterUnavailable, match="'law'") as caught:
        d.route(routing_request(PROMPT, d.config, adapter="law"))
    assert caught.value.adapter == "law"
    assert all(d.load.get(m.name).in_flight == 0 for m in PLACED.members)


def test_the_base_model_goes_anywhere_and_excluding_every_server_is_no_member() -> None:
    d = Dispatcher(RoutingConfig(**{**SMALL_BLOCKS.__dict__, "strategy": "least-load"}))
    d.set_fleet(PLACED)
    seen = {d.route(routing_request(f"base {i}", d.config)).member.name for i in range(8)}
    assert seen == {"m0", "m1", "m2", "m3"}
    with pytest.raises(AdapterNotReady, match="'sql' now"):  # servers exist but this request failed on them: a 503
        d.route(routing_request(PROMPT, d.config, adapter="sql"), exclude={"m0", "m1"})


@pytest.mark.parametrize("strategy", ["prefix-cache", "prefix-hash", "least-load", "round-robin"])
def test_an_adapter_only_unready_or_drained_members_list_is_not_ready_not_unknown(strategy: str) -> None:
    d = Dispatcher(RoutingConfig(**{**SMALL_BLOCKS.__dict__, "strategy": strategy}))
    d.set_fleet(
        Fleet(
            (
                Member("m0", "http://m0", ready=False, adapters=frozenset({"sql"})),
                Member("m1", "http://m1", weight=0.0, adapters=frozenset({"sql", "law"})),
                Member("m2", "http://m2", adapters=frozenset()),
            )
        )
    )
    with pytest.raises(AdapterNotReady) as caught:
        d.route(routing_request(PROMPT, d.config, adapter="sql"))
    assert isinstance(caught.value, NoMemberAvailable)  # a 503 at the fronts: retry later
    assert caught.value.adapter == "sql"
    with pytest.raises(AdapterUnavailable):  # no member lists it, ready or not: a 404
        d.route(routing_request(PROMPT, d.config, adapter="poems"))
    assert d.route(routing_request(PROMPT, d.config)).member.name == "m2"  # the base model goes on


def test_nothing_ready_at_all_is_no_member_whatever_the_adapter() -> None:
    d = Dispatcher(SMALL_BLOCKS)
    d.set_fleet(Fleet((Member("m0", "http://m0", ready=False, adapters=frozenset({"sql"})),)))
    for adapter in ("sql", "poems", None):
        with pytest.raises(NoMemberAvailable) as caught:
            d.route(routing_request(PROMPT, d.config, adapter=adapter))
        assert isinstance(caught.value, AdapterNotReady) == (adapter == "sql")


def test_a_ticket_says_whether_the_adapter_was_believed_resident() -> None:
    d = Dispatcher(RoutingConfig(**{**SMALL_BLOCKS.__dict__, "adapter_slots": 2}))
    d.set_fleet(PLACED)
    first = d.route(routing_request(PROMPT, d.config, adapter="sql"))
    again = d.route(routing_request(PROMPT + " next turn", d.config, adapter="sql"))
    assert (first.adapter_resident, again.adapter_resident) == (False, True)
    assert d.route(routing_request(PROMPT, d.config)).adapter_resident is None
