"""Holding requests while no member is routable: they go on when one appears, wait at most
``seconds``, at most ``limit`` of them; off at 0 seconds."""

import asyncio

import pytest

from prefixroute.front.holding import FULL, SERVED, TIMED_OUT, HoldFailed, Holding


async def test_held_requests_go_on_when_a_member_appears() -> None:
    holding = Holding(30.0, 10)
    waiters = [asyncio.create_task(holding.wait()) for _ in range(3)]
    await asyncio.sleep(0.01)
    assert holding.held == 3
    assert not any(w.done() for w in waiters)
    holding.fleet_changed(True)
    await asyncio.gather(*waiters)
    assert holding.held == 0
    assert holding.outcomes[SERVED] == 3
    await holding.wait()  # a member is routable: no wait, nothing counted
    assert holding.outcomes[SERVED] == 3


async def test_a_hold_ends_with_retry_after_when_its_time_is_up() -> None:
    holding = Holding(0.05, 10)
    with pytest.raises(HoldFailed, match=r"within 0\.05s") as caught:
        await holding.wait()
    assert caught.value.retry_after >= 1
    assert holding.outcomes[TIMED_OUT] == 1
    assert holding.held == 0


async def test_no_more_than_the_limit_wait() -> None:
    holding = Holding(30.0, 2)
    waiters = [asyncio.create_task(holding.wait()) for _ in range(2)]
    await asyncio.sleep(0.01)
    with pytest.raises(HoldFailed, match="2 requests already wait"):
        await holding.wait()
    assert holding.outcomes[FULL] == 1
    holding.fleet_changed(True)
    await asyncio.gather(*waiters)


async def test_off_answers_at_once_and_a_fleet_that_empties_holds_again() -> None:
    with pytest.raises(HoldFailed):
        await Holding(0.0, 10).wait()
    holding = Holding(30.0, 10)
    holding.fleet_changed(True)
    holding.fleet_changed(False)
    waiter = asyncio.create_task(holding.wait())
    await asyncio.sleep(0.01)
    assert not waiter.done()
    holding.fleet_changed(True)
    await waiter
