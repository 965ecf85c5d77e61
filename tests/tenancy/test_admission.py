"""Fair admission: who goes next when slots free up, and when a tenant over its share must wait."""

from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.tenancy.admission import FairAdmission, capacity_slots, free_slots

BIG = 1000  # free and total slots when room is not the question


def drain(queue: FairAdmission[str], free: int = BIG, capacity: int = BIG, now: float = 0.0) -> list[str]:
    out = []
    while (nxt := queue.next(free, capacity, now)) is not None:
        out.append(nxt[1])
    return out


def test_a_newcomer_goes_before_a_backlog_that_arrived_earlier() -> None:
    queue: FairAdmission[str] = FairAdmission()
    queue.arrive("noisy", "n0", 0.0)
    assert queue.next(1, BIG, 0.0) == ("noisy", "n0")
    for i in range(1, 5):
        assert queue.arrive("noisy", f"n{i}", 0.0)
    assert queue.arrive("quiet", "q0", 0.0)
    assert queue.arrive("other", "o0", 0.0)
    assert drain(queue) == ["q0", "o0", "n1", "n2", "n3", "n4"]
    assert queue.waiting == 0 and queue.in_flight("noisy") == 5


def test_a_slot_freed_by_the_noisy_tenant_goes_to_the_quiet_one() -> None:
    """The noisy tenant's request finishing leaves it with nothing in flight too; fairness must
    still remember that it has been served and has more waiting."""
    queue: FairAdmission[str] = FairAdmission()
    for i in range(4):
        queue.arrive("noisy", f"n{i}", 0.0)
    assert queue.next(1, BIG, 0.0) == ("noisy", "n0")
    queue.arrive("quiet", "q0", 0.0)
    queue.done("noisy")
    assert queue.next(1, BIG, 0.0) == ("quiet", "q0")


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
    assert queue.next(capacity - taken, capacity, 0.0) == ("quiet", "q0")
    taken += 1
    for i in range(10):
        queue.arrive("noisy", f"n{i}", 0.0)
    while queue.next(capacity - taken, capacity, 0.0) is not None:
        taken += 1
    # below its share (5) the noisy tenant takes any slot; beyond it, only while more than the
    # headroom (2 slots for the one other tenant) stays free
    assert queue.in_flight("noisy") == 7 and capacity - taken == 2
    queue.arrive("quiet", "q1", 0.0)
    assert queue.next(capacity - taken, capacity, 0.0) == ("quiet", "q1")  # found its slot at once


def test_alone_a_tenant_takes_every_slot_and_idle_tenants_stop_counting() -> None:
    queue: FairAdmission[str] = FairAdmission(reserve_per_tenant=2, active_window=10.0)
    queue.arrive("quiet", "q0", 0.0)
    queue.next(4, 4, 0.0)
    queue.done("quiet")
    for i in range(4):
        queue.arrive("noisy", f"n{i}", 100.0)  # the quiet tenant was last seen 100 s ago
    free = 4
    while queue.next(free, 4, 100.0) is not None:
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
    assert queue.arrive("a", first, 0.0) and queue.arrive("a", second, 0.0)
    assert not queue.arrive("b", object(), 0.0)
    assert queue.cancel("a", first) and not queue.cancel("a", first) and not queue.cancel("z", first)
    assert queue.waiting == 1 and queue.waiting_of("a") == 1
    assert queue.arrive("b", object(), 0.0)


def test_no_slot_no_admission_and_done_never_goes_negative() -> None:
    queue: FairAdmission[str] = FairAdmission()
    queue.arrive("a", "a0", 0.0)
    assert queue.next(0, 4, 0.0) is None
    assert queue.next(1, 4, 0.0) == ("a", "a0")
    queue.done("a")
    queue.done("a")
    assert queue.in_flight("a") == 0


def test_slots_are_read_from_the_load_view_and_weights() -> None:
    fleet = Fleet((Member("a", "http://a"), Member("b", "http://b", weight=0.5), Member("c", "http://c", ready=False)))
    load = LoadTracker()
    assert capacity_slots(fleet, 4) == free_slots(fleet, load, 4) == 6  # 4 + half of 4; c is not ready
    for _ in range(4):
        load.begin("a", 10)
    load.begin("b", 10)
    load.begin("b", 10)
    assert free_slots(fleet, load, 4) == 0
    load.end("b", 10)
    assert free_slots(fleet, load, 4) == 1
    load.report_engine("b", waiting=5, running=0, kv_usage=0.0)  # other routers' traffic counts too
    assert free_slots(fleet, load, 4) == 0
    load.report_engine("a", waiting=0, running=9, kv_usage=0.0)  # an overfull member frees nothing elsewhere
    assert free_slots(fleet, load, 4) == 0
    assert free_slots(Fleet(()), load, 4) == capacity_slots(Fleet(()), 4) == 0
