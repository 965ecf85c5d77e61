"""A snapshot of the fleet's signals: what the policy derives from the members' figures."""

import pytest

from prefixroute.autoscaling.signals import FleetSignals, MemberSignals


def test_a_members_load_is_its_waiting_and_running_requests():
    assert MemberSignals("m", waiting=3.0, running=5.0).load == 8.0


@pytest.mark.parametrize(
    ("hits", "queries", "rate"),
    [(30.0, 120.0, 0.25), (0.0, 50.0, 0.0), (0.0, 0.0, None)],  # nothing queried: unknown, not zero
)
def test_a_members_hit_rate_is_hits_over_queries(hits, queries, rate):
    assert MemberSignals("m", hit_tokens_rate=hits, query_tokens_rate=queries).hit_rate == rate


def test_the_fleets_hit_rate_weighs_members_by_their_traffic_not_equally():
    fleet = FleetSignals(
        at=0.0,
        members=(
            MemberSignals("busy", hit_tokens_rate=900.0, query_tokens_rate=1000.0),  # 90%
            MemberSignals("quiet", hit_tokens_rate=0.0, query_tokens_rate=1000.0 / 9),  # 0%
            MemberSignals("idle"),
        ),
    )
    assert fleet.hit_rate == pytest.approx(0.81)  # 900 / 1111.1, not the members' mean of 45%
    assert FleetSignals(at=0.0, members=(MemberSignals("idle"),)).hit_rate is None


def test_the_fleets_totals_sum_its_members():
    fleet = FleetSignals(
        at=0.0, members=(MemberSignals("a", waiting=2.0, running=1.0), MemberSignals("b", waiting=0.5, running=4.0))
    )
    assert (fleet.waiting, fleet.in_flight) == (2.5, 7.5)


@pytest.mark.parametrize(
    ("member", "held", "idle"),
    [
        (MemberSignals("a"), 0.0, True),
        (MemberSignals("a", waiting=1.0), 0.0, False),
        (MemberSignals("a", running=1.0), 0.0, False),
        (MemberSignals("a", request_rate=0.01), 0.0, False),  # requests finished within the window
        (MemberSignals("a"), 1.0, False),  # a request held at the router for want of an engine
    ],
)
def test_idle_means_nothing_in_flight_finished_or_held(member, held, idle):
    assert FleetSignals(at=0.0, members=(member, MemberSignals("b")), held=held).idle is idle


def test_an_empty_fleet_is_idle_unless_requests_are_held():
    assert FleetSignals(at=0.0, members=()).idle
    assert not FleetSignals(at=0.0, members=(), held=2.0).idle


def test_a_member_is_found_by_name():
    a, b = MemberSignals("a", waiting=1.0), MemberSignals("b", waiting=2.0)
    fleet = FleetSignals(at=0.0, members=(a, b))
    assert (fleet.member("b"), fleet.member("c")) == (b, None)
