"""front.api_poll: a value read in a thread, applied when it changed, kept through failures."""

from __future__ import annotations

import asyncio
import logging

import pytest

from prefixroute.front.api_poll import ApiPoll

log = logging.getLogger("tests.api_poll")


async def test_a_value_is_applied_when_its_key_changes_and_kept_through_failures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    values: list[object] = [{"a": 1}]
    failures: list[str] = []
    applied: list[dict[str, int]] = []

    def read() -> dict[str, int]:
        value = values[-1]
        if isinstance(value, Exception):
            raise value
        assert isinstance(value, dict)
        return value

    poll: ApiPoll[dict[str, int]] = ApiPoll(
        "the thing", read, 3600, log, key=lambda v: tuple(sorted(v)), on_failure=lambda: failures.append("x")
    )
    caplog.set_level(logging.WARNING, "tests.api_poll")
    await poll.start(applied.append)
    try:
        assert applied == [{"a": 1}]
        values.append({"a": 2})  # same key: not applied
        await poll.poll(applied.append)
        assert applied == [{"a": 1}]
        values.append(ConnectionError("API server down"))
        await poll.poll(applied.append)
        await poll.poll(applied.append)
        assert applied == [{"a": 1}]
        assert failures == ["x", "x"]
        assert [r.getMessage() for r in caplog.records] == [
            "reading the thing failed (ConnectionError: API server down); keeping the last"
        ]  # once per kind of failure
        values.append({"b": 1})
        await poll.poll(applied.append)
        assert applied[-1] == {"b": 1}
    finally:
        await poll.stop()


async def test_the_loop_reads_again_every_interval_until_stopped() -> None:
    reads: list[int] = []

    def read() -> int:
        reads.append(1)
        return len(reads)

    applied: list[int] = []
    poll: ApiPoll[int] = ApiPoll("a counter", read, 0.01, log)
    await poll.start(applied.append)
    for _ in range(200):
        if len(applied) >= 3:
            break
        await asyncio.sleep(0.01)
    await poll.stop()
    assert applied[:3] == [1, 2, 3]
    settled = len(reads)
    await asyncio.sleep(0.05)
    assert len(reads) == settled  # stopped: no more reads
