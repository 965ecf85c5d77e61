"""How a front's process runs: the event loop it gets, and the collector's settings."""

from __future__ import annotations

import asyncio
import builtins
import gc
from collections.abc import Iterator
from typing import Any

import pytest

from prefixroute.front.runtime import new_event_loop, tune_gc


def test_uvloop_when_installed() -> None:
    uvloop = pytest.importorskip("uvloop")
    loop = new_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
        assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        loop.close()


def test_asyncios_loop_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_uvloop(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "uvloop":
            raise ImportError("no uvloop here")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    loop = new_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
        assert loop.run_until_complete(asyncio.sleep(0, "ran")) == "ran"
    finally:
        loop.close()


@pytest.fixture
def gc_restored() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("gc_restored")
def test_tune_gc_freezes_what_exists_and_makes_young_collections_rare() -> None:
    before = gc.get_freeze_count()
    tune_gc()
    assert gc.get_freeze_count() > before  # the imports' objects are out of the collector's sight
    assert gc.get_threshold() == (10_000, 10, 10)
