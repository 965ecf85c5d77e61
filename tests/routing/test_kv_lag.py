"""Behind or not on a member's events: from each applied message's lag and whether more wait."""

import pytest

from prefixroute.routing.kv_lag import LagJudge


def test_a_late_message_with_more_waiting_is_behind_and_a_drained_queue_is_caught_up():
    judge = LagJudge(behind_after=1.0)
    assert not judge.observe(0.2, backlog=True)  # keeping up with a queue is fine
    assert judge.observe(1.5, backlog=True)
    assert judge.behind
    assert not judge.observe(0.9, backlog=True)  # still more than half the threshold: stays behind
    assert judge.observe(1.4, backlog=False)  # nothing left to apply: the view is complete again
    assert not judge.behind


def test_a_fast_message_catches_up_even_with_a_queue():
    judge = LagJudge(behind_after=1.0)
    judge.observe(3.0, backlog=True)
    assert judge.observe(0.4, backlog=True)
    assert not judge.behind


@pytest.mark.parametrize("lag", [1.5, 30.0])
def test_late_messages_with_nothing_waiting_are_not_behind(lag):
    # an engine clock ahead of ours makes every lag long, yet nothing is left to apply
    judge = LagJudge(behind_after=1.0)
    assert not judge.observe(lag, backlog=False)
    assert not judge.behind


def test_reset_starts_afresh():
    judge = LagJudge(behind_after=1.0)
    judge.observe(2.0, backlog=True)
    judge.reset()
    assert not judge.behind
