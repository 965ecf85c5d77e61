"""Fair admission: who goes next when slots free up, and when a tenant over its share must wait."""

from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.tenancy.admission import Admitted, FairAdmission, capacity_slots, free_slots, member_slots

BIG = 1000  # free and total slots when room is not the question


def one(free: int, capacity: int) -> dict[str, tuple[int, int]]:
    """One member with `free` of `capacity` slots free."""
    return {"m": (free, capacity)}


def nxt(queue: FairAdmission[str], free: int, capacity: int, now: float = 0.0) -> tuple[str, str] | None:
    admitted = queue.next(one(free, capacity), now)
    return None if admitted is None else (admitted.tenant, admitted.item)


def drain(queue: FairAdmission[str], free: int = BIG, capacity: int = BIG, now: float = 0.0) -> list[str]:
    out = []
    while (got := nxt(queue, free, capacity, now)) is not None:
        out.append(got[1])
    return out


def test_a_newcomer_goes_before_a_backlog_that_arrived_earlier() -> None:
    queue: FairAdmission[str] = FairAdmission()
    queue.arrive("noisy", "n0", 0.0)
    assert nxt(queue, 1, BIG) == ("noisy", "n0")
    for i in range(1, 5):
        assert queue.arrive("noisy", f"n{i}", 0.0)
    assert queue.arrive("quiet", "q0", 0.0)
    assert queue.arrive("other", "o0", 0.0)
    assert drain(queue) == ["q0", "o0", "n1", "n2", "n3", "n4"]
    assert queue.waiting == 0
    assert queue.in_flight("noisy") == 5


def test_a_slot_freed_by_the_noisy_tenant_goes_to_the_quiet_one() -> None:
    """The noisy tenant's request finishing leaves it with nothing in flight too; fairness must
    still remember that it has been served and has more waiting."""
    queue: FairAdmission[str] = FairAdmission()
    for i in range(4):
        queue.arrive("noisy", f"n{i}", 0.0)
    assert nxt(queue, 1, BIG) == ("noisy", "n0")
    queue.arrive("quiet", "q0", 0.0)
    queue.done("noisy")
    assert nxt(queue, 1, BIG) == ("quiet", "q0")


def test_tenants_alternate_while_both_have_backlogs() -> None:
    queue: FairAdmission[str] = FairAdmission()
    for i in range(6):
        queue.arrive("a", f"a{i}", 0.0)
    for i in range(3):
        queue.arrive("b", f"b{i}", 0.0)
    assert drain(queue) == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "a4", "a5"]


def test_a_tenant_over_its_share_leaves_headroom_for_the_others() -> None:
    queue: FairAdmission[str] = FairAdmission(reserve_per_tenant=2)
    capacity, taken = 10, 0
    queue.arrive("quiet", "q0", 0.0)  # another tenant is active: two tenants share 10 slots
    assert nxt(queue, capacity - taken, capacity) == ("quiet", "q0")
    taken += 1
    for i in range(10):
        queue.arrive("noisy", f"n{i}", 0.0)
    while nxt(queue, capacity - taken, capacity) is not None:
        taken += 1
    # below its share (5) the noisy tenant takes any slot; beyond it, only while more than the
    # headroom (2 slots for the one other tenant) stays free
    assert queue.in_flight("noisy") == 7
    assert capacity - taken == 2
    queue.arrive("quiet", "q1", 0.0)
    assert nxt(queue, capacity - taken, capacity) == ("quiet", "q1")  # found its slot at once


def test_alone_a_tenant_takes_every_slot_and_idle_tenants_stop_counting() -> None:
    queue: FairAdmission[str] = FairAdmission(reserve_per_tenant=2, active_window=10.0)
    queue.arrive("quiet", "q0", 0.0)
    nxt(queue, 4, 4)
    queue.done("quiet")
    for i in range(4):
        queue.arrive("noisy", f"n{i}", 100.0)  # the quiet tenant was last seen 100 s ago
    free = 4
    while nxt(queue, free, 4, 100.0) is not None:
        free -= 1
    assert free == 0


def test_an_idle_tenant_banks_no_credit() -> None:
    queue: FairAdmission[str] = FairAdmission()
    for i in range(10):
        queue.arrive("busy", f"x{i}", 0.0)
    drain(queue)  # virtual time moves on while "idle" sends nothing
    queue.arrive("busy", "b", 0.0)
    for i in range(3):
        queue.arrive("idle", f"i{i}", 0.0)
    got = drain(queue)
    assert got.index("i2") == 3  # its burst does not all jump ahead of the busy tenant


def test_the_waiting_room_is_bounded_and_cancel_frees_a_place() -> None:
    queue: FairAdmission[object] = FairAdmission(max_waiting=2)
    first, second = object(), object()
    assert queue.arrive("a", first, 0.0)
    assert queue.arrive("a", second, 0.0)
    assert not queue.arrive("b", object(), 0.0)
    assert queue.cancel("a", first)
    assert not queue.cancel("a", first)
    assert not queue.cancel("z", first)
    assert queue.waiting == 1
    assert queue.waiting_of("a") == 1
    assert queue.arrive("b", object(), 0.0)


def test_no_slot_no_admission_and_done_never_goes_negative() -> None:
    queue: FairAdmission[str] = FairAdmission()
    queue.arrive("a", "a0", 0.0)
    assert nxt(queue, 0, 4) is None
    assert nxt(queue, 1, 4) == ("a", "a0")
    queue.done("a")
    queue.done("a")
    assert queue.in_flight("a") == 0


def test_slots_are_read_from_the_load_view_and_weights() -> None:
    fleet = Fleet((Member("a", "http://a"), Member("b", "http://b", weight=0.5), Member("c", "http://c", ready=False)))
    load = LoadTracker()
    slots = member_slots(fleet, load, 4)
    assert slots == {"a": (4, 4), "b": (2, 2)}  # b at half weight; c is not ready
    assert capacity_slots(slots) == free_slots(slots) == 6
    for _ in range(4):
        load.begin("a", 10)
    load.begin("b", 10)
    assert member_slots(fleet, load, 4) == {"a": (0, 4), "b": (1, 2)}
    assert member_slots(fleet, load, 4, reserved=1) == {"a": (0, 4), "b": (0, 2)}  # admitted, not yet routed
    load.report_engine("b", waiting=5, running=0, kv_usage=0.0)  # other routers' traffic counts too
    load.report_engine("a", waiting=0, running=9, kv_usage=0.0)  # an overfull member is simply full
    assert free_slots(member_slots(fleet, load, 4)) == 0
    assert member_slots(Fleet(()), load, 4) == {}


def test_over_its_share_a_tenant_is_routed_only_where_headroom_stays() -> None:
    queue: FairAdmission[str] = FairAdmission(reserve_per_tenant=2)
    queue.arrive("quiet", "q0", 0.0)
    queue.next({"a": (4, 4), "b": (4, 4)}, 0.0)
    for _ in range(5):
        queue.arrive("noisy", "n", 0.0)
        queue.next({"a": (4, 4), "b": (4, 4)}, 0.0)
    queue.arrive("noisy", "n5", 0.0)
    # noisy holds 5 of 8 (its share is 4): it must leave 1 slot free per member (2 for quiet, over 2)
    got = queue.next({"a": (1, 4), "b": (2, 4)}, 0.0)
    assert isinstance(got, Admitted)
    assert got.members == frozenset({"b"})
    queue.arrive("noisy", "n6", 0.0)
    assert queue.next({"a": (1, 4), "b": (1, 4)}, 0.0) is None
    queue.arrive("quiet", "q1", 0.0)
    got = queue.next({"a": (1, 4), "b": (1, 4)}, 0.0)
    assert got is not None
    assert got.item == "q1"
    assert got.members == frozenset({"a", "b"})


def test_a_quiet_tenants_burst_is_not_held_to_the_headroom() -> None:
    """Over the last seconds the noisy tenant was admitted far more often: a burst of the quiet
    one (more in flight than its share of slots, for a moment) still takes the last slots,
    while the noisy tenant leaves them free."""
    queue: FairAdmission[str] = FairAdmission(reserve_per_tenant=2, rate_window=10.0)
    for i in range(40):
        queue.arrive("noisy", f"n{i}", i * 0.1)
        queue.next({"a": (8, 8), "b": (8, 8)}, i * 0.1)
    for i in range(6):
        queue.arrive("quiet", f"q{i}", 4.0)
    burst = [queue.next({"a": (1, 8), "b": (0, 8)}, 4.0) for _ in range(6)]
    assert all(got is not None and got.tenant == "quiet" and got.members == {"a"} for got in burst)
    queue.arrive("noisy", "n-late", 4.0)
    assert queue.next({"a": (1, 8), "b": (1, 8)}, 4.0) is None  # the last slots stay free for the others
    got = queue.next({"a": (4, 8), "b": (1, 8)}, 4.0)
    assert got is not None
    assert got.item == "n-late"
    assert got.members == {"a"}
