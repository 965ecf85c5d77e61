"""Ending a background task: cancelled and awaited, so nothing it holds outlives `stop()`."""

from __future__ import annotations

import asyncio

import pytest

from prefixroute.front.background import cancel_and_wait


async def test_nothing_running_is_nothing_to_do() -> None:
    await cancel_and_wait(None)


async def test_a_running_task_is_cancelled_and_has_ended_on_return() -> None:
    cleaned = asyncio.Event()

    async def poller() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    task = asyncio.create_task(poller())
    await asyncio.sleep(0)  # it is waiting
    await cancel_and_wait(task)
    assert task.cancelled()
    assert cleaned.is_set()


async def test_a_task_that_already_ended_is_left_as_it_was() -> None:
    async def done() -> None:
        return None

    task = asyncio.create_task(done())
    await task
    await cancel_and_wait(task)
    assert task.done()
    assert not task.cancelled()


async def test_a_task_that_failed_raises_its_error_rather_than_hiding_it() -> None:
    async def broken() -> None:
        raise RuntimeError("the poller had a bug")

    task = asyncio.create_task(broken())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="had a bug"):
        await cancel_and_wait(task)


async def test_the_callers_own_cancellation_is_not_swallowed() -> None:
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()  # its cleanup takes a while

    task = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    went_on = False

    async def stopper() -> None:
        nonlocal went_on
        await cancel_and_wait(task)
        went_on = True

    caller = asyncio.create_task(stopper())
    await asyncio.sleep(0.01)  # the caller waits for the task's cleanup
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    assert not went_on  # the caller stopped where it was cancelled
    release.set()
    await asyncio.wait((task,))
    assert task.cancelled()
