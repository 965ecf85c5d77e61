"""Fair admission: who goes next when room appears, and when a request must wait at all."""

from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.load import LoadTracker
from prefixroute.tenancy.admission import FairAdmission, free_slots


def test_the_waiting_tenant_with_the_fewest_in_flight_goes_first() -> None:
    queue: FairAdmission[str] = FairAdmission()
    for _ in range(3):
        queue.admitted("noisy")
    for i in range(4):
        assert queue.enqueue("noisy", f"n{i}")
    assert queue.enqueue("quiet", "q0")
    assert queue.enqueue("other", "o0")
    order = [queue.next() for _ in range(6)]
    assert order == [
        ("quiet", "q0"),
        ("other", "o0"),
        ("noisy", "n0"),
        ("noisy", "n1"),
        ("noisy", "n2"),
        ("noisy", "n3"),
    ]
    assert queue.next() is None and queue.waiting == 0
    assert queue.in_flight("noisy") == 7


def test_ties_go_to_the_earliest_arrival() -> None:
    queue: FairAdmission[str] = FairAdmission()
    queue.enqueue("b", "b0")
    queue.enqueue("a", "a0")
    assert queue.next() == ("b", "b0")


def test_a_new_request_never_overtakes_those_waiting() -> None:
    queue: FairAdmission[str] = FairAdmission()
    assert not queue.must_wait(room=True)
    assert queue.must_wait(room=False)
    queue.enqueue("a", "a0")
    assert queue.must_wait(room=True)


def test_the_waiting_room_is_bounded_and_cancel_frees_a_place() -> None:
    queue: FairAdmission[object] = FairAdmission(max_waiting=2)
    first, second = object(), object()
    assert queue.enqueue("a", first) and queue.enqueue("a", second)
    assert not queue.enqueue("b", object())
    assert queue.cancel("a", first) and not queue.cancel("a", first) and not queue.cancel("z", first)
    assert queue.waiting == 1 and queue.waiting_of("a") == 1
    assert queue.enqueue("b", object())


def test_done_releases_in_flight_counts() -> None:
    queue: FairAdmission[str] = FairAdmission()
    queue.admitted("a")
    queue.done("a")
    queue.done("a")  # more releases than admissions never go negative
    assert queue.in_flight("a") == 0


def test_free_slots_are_read_from_the_load_view_and_weights() -> None:
    fleet = Fleet((Member("a", "http://a"), Member("b", "http://b", weight=0.5), Member("c", "http://c", ready=False)))
    load = LoadTracker()
    assert free_slots(fleet, load, 4) == 6  # 4 + half of 4; c is not ready
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
    assert free_slots(Fleet(()), load, 4) == 0
