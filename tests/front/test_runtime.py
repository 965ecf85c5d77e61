"""How a front's process runs: its logging and settings at start, the event loop it gets, and
the collector's settings."""

from __future__ import annotations

import argparse
import asyncio
import builtins
import gc
import logging
from collections.abc import Iterator
from typing import Any

import pytest

from prefixroute.front.runtime import new_event_loop, start_logging_and_settings, tune_gc


def settings_of(args: argparse.Namespace) -> dict[str, int]:
    if args.port <= 0:
        raise ValueError("--port must be positive")
    return {"port": args.port}


def test_logging_starts_at_the_level_asked_then_the_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    configured: list[dict[str, Any]] = []
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: configured.append(kwargs))
    args = argparse.Namespace(log_level="debug", port=9002)
    assert start_logging_and_settings("epp", args, settings_of) == {"port": 9002}
    [kwargs] = configured
    assert kwargs["level"] == "DEBUG"
    assert "%(name)s" in kwargs["format"]


def test_settings_that_do_not_hold_end_the_process_with_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    configured: list[dict[str, Any]] = []
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: configured.append(kwargs))
    with pytest.raises(SystemExit) as exit_:
        start_logging_and_settings("router", argparse.Namespace(log_level="INFO", port=0), settings_of)
    assert exit_.value.code == "prefixroute router: --port must be positive"
    assert exit_.value.__cause__ is None
    assert exit_.value.__suppress_context__  # no traceback of ours
    assert configured  # logging was up before the settings were read


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
