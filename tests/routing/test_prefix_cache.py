"""prefix-cache (the default): each request goes where the most of its prefix is cached,
unless the queue there costs more than the prefill it saves. Driven, like a front drives
it, through the Strategy interface only: select, the learning hooks and the engines' events."""

import random
from collections import Counter, OrderedDict

import pytest

from prefixroute.routing.fleet import Fleet
from prefixroute.routing.load import LoadTracker
from prefixroute.routing.request import RoutingRequest, routing_request
from tests.routing.helpers import (
    LONG_SHARED,
    SMALL_BLOCKS,
    expected_bound,
    fleet_of,
    route,
    sessions_on,
    strategy,
    text_request,
)

SYSTEM = "You are a careful assistant for ACME. " * 12  # 456 chars = 28 blocks of 16


def test_prefix_cache_returns_a_prefix_to_the_member_that_holds_it(load):
    s, fleet = strategy("prefix-cache"), fleet_of(6)
    docs = [f"document {d} " * 20 for d in range(6)]
    home = {d: route(s, text_request(docs[d] + "q0"), fleet, load, hold=False).name for d in range(6)}
    for d in range(6):
        for q in range(1, 5):
            assert route(s, text_request(docs[d] + f"question {q}"), fleet, load, hold=False).name == home[d]


def test_a_shared_system_prompt_does_not_pile_onto_one_member():
    s, fleet, load = strategy("prefix-cache"), fleet_of(4), LoadTracker()
    in_flight: list = []
    counts: Counter = Counter()
    for i in range(400):
        req = text_request(SYSTEM + f"user question number {i}")
        member = route(s, req, fleet, load)
        counts[member.name] += 1
        in_flight.append((member.name, req.units))
        if len(in_flight) > 12:  # steady concurrency of 12 requests
            name, units = in_flight.pop(0)
            load.end(name, units)
        per_member = [load.get(m.name).in_flight for m in fleet.members]
        assert max(per_member) <= expected_bound(len(in_flight), 4, 1.25, 3)
    assert len(counts) == 4
    assert min(counts.values()) >= 400 / 4 / 2


def test_a_miss_never_goes_to_an_overloaded_member():
    s, fleet, load = strategy("prefix-cache"), fleet_of(4), LoadTracker()
    for _ in range(20):
        load.begin("m0", 100)
    misses = [text_request(f"brand new prompt {i} " * 4) for i in range(200)]
    owned_by_m0 = [r for r in misses if fleet.ring.owner(r.key) == "m0"]
    assert owned_by_m0, "some new prefixes hash to m0"
    for req in owned_by_m0:
        assert s.select(req, fleet, load).name != "m0"


def test_a_hot_member_loses_only_what_it_cannot_take():
    s, fleet, load = strategy("prefix-cache"), fleet_of(4), LoadTracker()
    docs = {}
    for d in range(16):
        text = f"tenant document {d} " * 10
        docs[d] = (text, route(s, text_request(text + "warm"), fleet, load, hold=False).name)
    hot = docs[0][1]
    for _ in range(30):
        load.begin(hot, 100)  # the hot member is far over the bound
    for d, (text, home) in docs.items():
        chosen = s.select(text_request(text + "again"), fleet, load).name
        if home == hot:
            assert chosen != hot
        else:
            assert chosen == home, f"document {d} lost its affinity"


def test_queue_cost_outweighs_a_small_cached_prefix(load):
    s, fleet = strategy("prefix-cache", load_factor=10.0), fleet_of(2)
    short_shared = "tiny prefix....."  # one block out of many
    first = route(s, text_request(short_shared + "a" * 300), fleet, load, hold=False)
    for _ in range(3):
        load.begin(first.name, 316)
    other = s.select(text_request(short_shared + "b" * 300), fleet, load)
    assert other.name != first.name


def test_removed_member_is_forgotten(load):
    s, fleet = strategy("prefix-cache"), fleet_of(3)
    text = "remember me " * 10
    home = route(s, text_request(text), fleet, load, hold=False).name
    s.on_member_removed(home)
    smaller = Fleet(tuple(m for m in fleet.members if m.name != home))
    assert s.select(text_request(text), smaller, load).name != home


# --- fleet scale: one prefix every request shares ------------------------------------


def test_prefix_cache_scores_the_holders_and_a_few_ring_candidates_not_the_fleet():
    class Counting(LoadTracker):
        def __init__(self) -> None:
            super().__init__()
            self.read: set[str] = set()

        def get(self, name):
            self.read.add(name)
            return super().get(name)

    s, fleet, load = strategy("prefix-cache"), fleet_of(256), Counting()
    sessions_on(s, fleet, load, 600, 2)
    for i in range(50):
        load.read.clear()
        request = text_request(LONG_SHARED + f" question {i}.0 of conversation {i} answer 0 and more")
        s.select(request, fleet, load)
        assert len(load.read) <= 12  # holders of its deepest blocks, a few ring candidates, the bound walk


def test_distinct_new_prefixes_spread_over_idle_members_followed_precisely():
    # Each request is answered before the next: every member is idle at every decision. With
    # the engines' own view (shared by every router replica) a miss goes to the member whose
    # engine holds the fewest blocks; the ring alone would put several prefixes on one member.
    for seed in range(30):
        counts: Counter = Counter()
        s, fleet, load = strategy("prefix-cache"), fleet_of(3), LoadTracker()
        for m in fleet.members:
            s.on_precise(m.name, True)
        for p in range(6):
            prompt = f"{p}{seed:04d} system prompt number {p} " * 4
            first = route(s, text_request(prompt + "question"), fleet, load, hold=False)
            s.on_blocks_stored(first.name, text_request(prompt + "question").blocks)  # the engine's event
            counts[first.name] += 1
            for q in range(3):  # later requests with it find it where it went
                assert route(s, text_request(prompt + f"another {q}"), fleet, load, hold=False) == first
        assert max(counts.values()) == 2


def test_router_replicas_that_learn_apart_send_a_new_prefix_to_the_same_member():
    # Two replicas with their own load views (a has requests in flight, b none) and their own
    # histories: a miss follows the ring walk from its key, so both place each new prefix alike
    # unless a queue ahead is longer than the new prompt's whole prefill.
    a, b, fleet = strategy("prefix-cache"), strategy("prefix-cache"), fleet_of(8)
    load_a, load_b = LoadTracker(), LoadTracker()
    rng = random.Random(4)
    for i in range(60):
        if i < 16:  # a few requests in flight: within every load bound
            load_a.begin(f"m{rng.randrange(8)}", 200, prefill=rng.randrange(20))
        request = text_request(f"{i:03d} a new prefix nobody has seen " * 3)
        chosen = a.select(request, fleet, load_a)
        assert chosen == b.select(request, fleet, load_b)
        (a if i % 2 else b).on_routed(request, chosen)


def test_a_miss_leaves_its_ring_owner_only_for_a_queue_longer_than_its_own_prefill():
    s, fleet, load = strategy("prefix-cache", load_factor=100.0), fleet_of(3), LoadTracker()
    request = text_request("a prompt nobody holds, " * 4)
    owner = next(iter(fleet.ring.walk(s.keys.key(request, 3))))
    load.begin(owner, request.units, prefill=request.units)  # queued: exactly one such prompt
    assert s.select(request, fleet, load).name == owner
    load.begin(owner, 1, prefill=1)  # a little more than one whole prefill ahead
    assert s.select(request, fleet, load).name != owner


def test_a_miss_among_members_followed_precisely_goes_to_the_least_loaded():
    # The engines tell every replica where a new prefix went, so replicas need not agree
    # beforehand: a queue on the ring owner, however short, sends the miss elsewhere.
    s, fleet, load = strategy("prefix-cache", load_factor=100.0), fleet_of(3), LoadTracker()
    for m in fleet.members:
        s.on_precise(m.name, True)
    request = text_request("a prompt nobody holds, " * 4)
    owner = next(iter(fleet.ring.walk(s.keys.key(request, 3))))
    assert s.select(request, fleet, load).name == owner  # all idle and empty: ring order
    load.begin(owner, 1, prefill=1)
    assert s.select(request, fleet, load).name != owner


# --- what it believes each member holds ---------------------------------------------------


@pytest.mark.parametrize("members", [4, 32])  # every member scored, or the holders and a few ring candidates
def test_a_prefix_returns_to_its_holder_unless_that_holder_is_excluded(members, load):
    s, fleet = strategy("prefix-cache"), fleet_of(members)
    homes = {}
    for d in range(12):
        document = f"handbook-{d}-" * 24
        homes[d] = route(s, text_request(document + "first question"), fleet, load, hold=False).name
    assert len(set(homes.values())) > 1  # new prefixes are not all placed on one member
    for d, home in homes.items():
        later = text_request(f"handbook-{d}-" * 24 + "a later question")
        assert s.select(later, fleet, load).name == home
        assert s.select(later, fleet, load, exclude={home}).name != home  # a retry after it failed


@pytest.mark.parametrize(("waiting", "stays"), [(0, True), (2, True), (3, False)])
def test_the_engines_own_queue_weighs_against_its_cache(waiting, stays):
    """queued = the engine's waiting requests x the mean prompt (321 units here); leaving
    the holder recomputes 320 units: 0.4 x 2 x 321 < 320 < 0.4 x 3 x 321."""
    s, fleet, load = strategy("prefix-cache", load_factor=100.0), fleet_of(2), LoadTracker()
    document = "d" * 320  # 20 blocks of 16
    home = route(s, text_request(document + "a"), fleet, load, hold=False).name
    load.report_engine(home, waiting=waiting, running=0, kv_usage=0.5)
    assert (s.select(text_request(document + "b"), fleet, load).name == home) is stays


def test_what_it_remembers_is_a_recount_of_what_it_sent_within_the_cap():
    cap = 40
    s, fleet, load = strategy("prefix-cache", index_blocks_per_member=cap), fleet_of(3), LoadTracker()
    sent: dict[str, OrderedDict[int, None]] = {m.name: OrderedDict() for m in fleet.members}
    rng = random.Random(7)
    requests = []
    for i in range(300):
        request = text_request(f"doc{rng.randrange(30)}-" * 12 + f"question {i}")
        member = route(s, request, fleet, load, hold=False)
        lru = sent[member.name]  # the member's blocks, least recently sent first
        for block in request.blocks:
            lru[block] = None
            lru.move_to_end(block)
        while len(lru) > cap:
            lru.popitem(last=False)
        requests.append(request)
        assert s.index_blocks() == {name: len(lru) for name, lru in sent.items() if lru}
    for request in requests[-60:]:
        for m in fleet.members:
            held = sent[m.name]
            expected = next((i for i, b in enumerate(request.blocks) if b not in held), len(request.blocks))
            assert s.matched_blocks(request, m) == expected
    s.on_member_removed("m0")
    assert "m0" not in s.index_blocks()
    assert s.matched_blocks(requests[-1], fleet.by_name["m0"]) == 0


def test_blocks_the_engine_stored_and_evicted_are_what_a_precise_member_holds():
    s, fleet, load = strategy("prefix-cache"), fleet_of(3), LoadTracker()
    for m in fleet.members:
        s.on_precise(m.name, True)
    document = "document-" * 24  # 13 full blocks of 16
    first = text_request(document)
    home = route(s, first, fleet, load, hold=False)
    s.on_blocks_stored(home.name, first.blocks)  # the engine's event
    s.on_complete(first, home, True)
    # A new request object each time: between select and on_routed, matched_blocks answers
    # with what select found, by design.

    def later():
        return text_request(document + " and a question")

    assert s.select(later(), fleet, load) == home
    assert s.matched_blocks(later(), home) == len(first.blocks) == 13
    s.on_blocks_removed(home.name, first.blocks[6:])
    assert s.matched_blocks(later(), home) == 6
    s.on_cache_cleared(home.name)
    assert s.matched_blocks(later(), home) == 0


def test_a_request_in_flight_to_a_precise_member_stands_for_its_blocks_until_it_ends():
    """Events lag the decision: a burst sharing a new prefix must not scatter before the
    engine announces it, and a request that ended without it leaves nothing behind."""
    s, fleet, load = strategy("prefix-cache"), fleet_of(3), LoadTracker()
    for m in fleet.members:
        s.on_precise(m.name, True)
    first = text_request("burst-" * 30 + "one")
    home = route(s, first, fleet, load, hold=False)

    def second():
        return text_request("burst-" * 30 + "two")

    assert s.select(second(), fleet, load) == home
    assert s.matched_blocks(second(), home) == len(first.blocks) == 11
    s.on_complete(first, home, False)  # ended before the engine stored anything
    assert s.matched_blocks(second(), home) == 0


def test_a_member_whose_events_are_not_trusted_is_judged_by_what_was_sent_there():
    s, fleet, load = strategy("prefix-cache"), fleet_of(3), LoadTracker()
    request = text_request("history-" * 30)
    home = route(s, request, fleet, load, hold=False)
    s.on_complete(request, home, True)
    assert s.matched_blocks(request, home) == len(request.blocks)  # routing history
    s.on_precise(home.name, True)
    assert s.matched_blocks(request, home) == 0  # its engine announced nothing
    s.on_precise(home.name, False)
    assert s.matched_blocks(request, home) == len(request.blocks)


# -- LoRA adapters: the cost of loading one where it is not believed resident ---------------


def adapter_request(text: str, adapter: str | None) -> RoutingRequest:
    return routing_request(text, SMALL_BLOCKS, adapter=adapter)


@pytest.mark.parametrize("members", [4, 24])  # a small fleet scores everyone; a large one adds A's holders
def test_new_conversations_for_an_adapter_go_where_it_is_loaded(members: int) -> None:
    s, fleet, load = strategy("prefix-cache", adapter_slots=2), fleet_of(members), LoadTracker()
    home = route(s, adapter_request("first conversation for sql " * 4, "sql"), fleet, load, hold=False).name
    placed = {
        route(s, adapter_request(f"conversation {i} " * 5, "sql"), fleet, load, hold=False).name for i in range(30)
    }
    assert placed == {home}


def test_without_adapter_slots_new_conversations_follow_the_ring_as_before() -> None:
    s, fleet, load = strategy("prefix-cache"), fleet_of(4), LoadTracker()
    placed = {
        route(s, adapter_request(f"conversation {i} " * 5, "sql"), fleet, load, hold=False).name for i in range(30)
    }
    assert len(placed) > 1
    assert s.adapter_resident(adapter_request("x", "sql"), fleet.members[0]) is None


def test_a_queue_longer_than_the_load_sends_the_adapter_elsewhere() -> None:
    s, fleet, load = strategy("prefix-cache", adapter_slots=2, adapter_load_cost=100), fleet_of(4), LoadTracker()
    home = route(s, adapter_request("first conversation for sql " * 4, "sql"), fleet, load, hold=False).name
    new = adapter_request("another conversation for sql " * 4, "sql")
    load.begin(home, 200, 200)  # 0.4 x 200 = 80 units queued: less than loading sql elsewhere
    assert s.select(new, fleet, load).name == home
    load.begin(home, 200, 200)  # 0.4 x 400 = 160 units queued: more than the 100 a load costs
    assert s.select(new, fleet, load).name != home


def test_a_member_whose_slots_moved_on_pays_the_load_again() -> None:
    s, fleet, load = strategy("prefix-cache", adapter_slots=1, adapter_load_cost=10_000), fleet_of(2), LoadTracker()
    text = "a conversation for sql that grows turn by turn " * 3
    home = route(s, adapter_request(text, "sql"), fleet, load, hold=False)
    other = next(m for m in fleet.members if m is not home)
    # Another adapter took home's only slot, and sql went to the other member since; the load
    # dwarfs the prefix this conversation holds at home.
    s.on_routed(adapter_request("poems " * 9, "poems"), home)
    s.on_routed(adapter_request("another sql conversation " * 3, "sql"), other)
    assert s.adapter_resident(adapter_request(text, "sql"), home) is False
    assert s.select(adapter_request(text + "next turn", "sql"), fleet, load) == other


def test_an_engines_reported_adapters_count_as_resident() -> None:
    s, fleet, load = strategy("prefix-cache", adapter_slots=4), fleet_of(4), LoadTracker()
    s.on_engine_adapters("m2", ["sql"])
    assert s.select(adapter_request("never seen before " * 5, "sql"), fleet, load).name == "m2"
    s.on_member_removed("m2")
    assert s.adapter_resident(adapter_request("x", "sql"), fleet.members[2]) is False


def test_a_peers_routing_of_an_adapter_counts_as_a_load_there() -> None:
    s, fleet, load = strategy("prefix-cache", adapter_slots=2), fleet_of(4), LoadTracker()
    s.on_peer_routed(adapter_request("a peer's conversation for sql " * 4, "sql"), "m3", fleet)
    assert s.adapter_resident(adapter_request("x", "sql"), fleet.members[3]) is True
    assert s.select(adapter_request("a new conversation for sql " * 4, "sql"), fleet, load).name == "m3"
