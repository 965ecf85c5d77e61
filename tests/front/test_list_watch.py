"""The list-then-watch loop both Kubernetes followers share, driven by a fake edge: what a list
and each change reach, a server's ERROR and a failure listing again, and stop."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator, Mapping
from typing import Any

from prefixroute.front.list_watch import ListWatch
from tests.polling import until


class FakeEdge:
    """Each list answers the next of `lists` (an exception is raised); each watch plays the next
    of `watches`, then blocks until closed."""

    def __init__(self, lists: list[Any], watches: list[list[tuple[str, Mapping[str, Any]]]]) -> None:
        self.lists, self.watches = lists, watches
        self.closed = threading.Event()

    def list(self) -> tuple[Any, str]:
        found = self.lists.pop(0) if self.lists else "again"
        if isinstance(found, Exception):
            raise found
        return found, "7"

    def watch(self, resource_version: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
        assert resource_version == "7"
        yield from self.watches.pop(0) if self.watches else []
        self.closed.wait(5)

    def close(self) -> None:
        self.closed.set()


class Recorder(ListWatch[Any]):
    def __init__(self, edge: FakeEdge) -> None:
        super().__init__("thing ns/a", "what it had", lambda: edge, (0.01, 0.02))
        self.seen: list[tuple[str, Any]] = []
        self.handed: list[object] = []

    def listed(self, found: Any) -> None:
        self.seen.append(("listed", found))
        self.hand(found)

    def changed(self, kind: str, obj: Mapping[str, Any]) -> None:
        self.seen.append((kind, obj["n"]))


async def test_a_list_then_its_watch_reach_the_follower_and_bookmarks_do_not() -> None:
    edge = FakeEdge(["first"], [[("ADDED", {"n": 1}), ("BOOKMARK", {}), ("MODIFIED", {"n": 2}), ("DELETED", {"n": 1})]])
    follower = Recorder(edge)
    follower.begin("test", follower.handed.append)
    try:
        await until(lambda: len(follower.seen) >= 4, "the list and three changes")
        assert follower.seen == [("listed", "first"), ("ADDED", 1), ("MODIFIED", 2), ("DELETED", 1)]
        await until(
            lambda: follower.handed == ["first"], "the list handed to the loop"
        )  # on the event loop, not the thread
    finally:
        await follower.stop()


async def test_an_error_from_the_server_or_a_failure_lists_again(caplog: Any) -> None:
    caplog.set_level(logging.INFO, logger="prefixroute.front.list_watch")
    edge = FakeEdge(["one", ConnectionError("refused"), "two"], [[("ERROR", {"code": 410, "message": "Gone"})]])
    follower = Recorder(edge)
    follower.begin("test", follower.handed.append)
    try:
        await until(lambda: ("listed", "two") in follower.seen, "a third list")
        assert follower.seen[:2] == [("listed", "one"), ("listed", "two")]
        assert "watch of thing ns/a ended by the server (410 Gone); listing again" in caplog.text
        assert "watching thing ns/a failed (ConnectionError: refused); keeping what it had" in caplog.text
    finally:
        await follower.stop()


async def test_stop_ends_the_thread_and_nothing_is_handed_after_it() -> None:
    edge = FakeEdge(["first"], [])
    follower = Recorder(edge)
    follower.begin("test", follower.handed.append)
    await until(lambda: bool(follower.seen), "the list")
    await follower.stop()
    assert edge.closed.is_set()
    follower.hand("late")
    await asyncio.sleep(0.05)
    assert "late" not in follower.handed
