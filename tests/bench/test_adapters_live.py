"""`bench adapters --live`: each target's router flags, the engines' LoRA flags, emptying the
slots between targets, the loads counted, and the table's ratios (the processes themselves:
the run in docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import asyncio
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from prefixroute.bench.adapters import TARGETS
from prefixroute.bench.adapters_live import (
    LiveFleet,
    adapter_loads,
    empty_slots,
    engine_flags,
    router_flags,
    run_live,
    write_adapters,
)
from prefixroute.bench.errors import BenchError
from prefixroute.cli import build_parser
from prefixroute.engine_sim.lora import LoraModule, check_adapter_folder
from prefixroute.engine_sim.server import DRIVER, create_app
from tests.engine_sim.conftest import FAST

BY_LABEL = {t.label: t for t in TARGETS}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(only="bench").parse_args(["bench", "adapters", "--live", "--trace", "t.jsonl", *argv])


def fleet(tmp_path: Path, event_ports: list[int] | None = None) -> LiveFleet:
    return LiveFleet(["http://e0", "http://e1"], {"a": "/f/a"}, event_ports or [], 9000, tmp_path)


def _value(flags: list[str], name: str) -> str | None:
    return flags[flags.index(name) + 1] if name in flags else None


def test_the_aware_router_believes_the_engines_slots_the_blind_one_does_not(tmp_path):
    args = parse("--slots", "4", "--router-flags", "--load-slack 2")
    aware = router_flags(BY_LABEL["prefix-cache+adapters"], args, fleet(tmp_path))
    blind = router_flags(BY_LABEL["prefix-cache"], args, fleet(tmp_path))
    robin = router_flags(BY_LABEL["round-robin"], args, fleet(tmp_path))
    assert _value(aware, "--adapter-slots") == "4"
    assert _value(blind, "--adapter-slots") == "0"
    assert "--adapter-slots" not in robin  # a prefix-cache knob only
    for flags in (aware, blind, robin):
        assert _value(flags, "--backends") == "http://e0,http://e1"
        assert _value(flags, "--served-model") == "engine-sim"  # any other request model is an adapter
        assert flags[-2:] == ["--load-slack", "2"]
        assert "--mode" not in flags
        assert "--adapter-load-cost" not in flags  # the router's own default
    cost = router_flags(BY_LABEL["prefix-cache+adapters"], parse("--adapter-load-cost", "500"), fleet(tmp_path))
    assert _value(cost, "--adapter-load-cost") == "500"


def test_precise_routers_follow_each_engine_s_events_and_replays(tmp_path):
    flags = router_flags(BY_LABEL["prefix-cache"], parse(), fleet(tmp_path, [9001, 9003]))
    assert _value(flags, "--mode") == "precise"
    assert _value(flags, "--kv-events") == "tcp://127.0.0.1:9001,tcp://127.0.0.1:9003"
    assert _value(flags, "--kv-events-replay") == "tcp://127.0.0.1:9002,tcp://127.0.0.1:9004"


def test_every_engine_gets_the_slots_and_registers_every_adapter(tmp_path):
    adapters = write_adapters(tmp_path, ["a", "b"])
    for name, path in adapters.items():
        check_adapter_folder(name, path)  # what engine-sim accepts at start
    flags = engine_flags(parse("--slots", "3", "--load-seconds", "0.2", "--max-model-len", "262144"), adapters)
    assert "--max-loras=3" in flags
    assert "--lora-load-seconds=0.2" in flags
    assert flags[flags.index("--lora-modules") + 1 :] == [f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}"]
    assert "--max-model-len=262144" in flags  # the bench's engine model reaches every engine


def test_a_placement_is_refused_live(tmp_path):
    with pytest.raises(BenchError, match="--placed is simulated only"):
        run_live(parse("--placed", "2", "--run-dir", str(tmp_path)), [], ["a"], TARGETS)
    assert not (tmp_path / "adapters").exists()  # refused before anything starts


async def test_emptying_the_slots_leaves_no_adapter_resident_and_the_loads_are_read(tmp_path):
    adapters = write_adapters(tmp_path, ["a", "b"])
    modules = [LoraModule(n, p) for n, p in adapters.items()]
    app = create_app(replace(FAST, max_loras=2), lora_modules=modules)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"  # type: ignore[union-attr]
    try:
        driver = app[DRIVER]
        slots = driver.scheduler.adapters
        assert slots is not None
        for name in adapters:
            handle = driver.submit([], 10, 1, adapter=name)
            await handle.finished
        assert set(slots.resident()) == {"a", "b"}
        assert await asyncio.to_thread(adapter_loads, [url, url]) == 4  # two loads, read from each "engine"
        await empty_slots([url], adapters)
        assert slots.resident() == ()
        assert slots.registered == {"a", "b"}  # still served: loaded again
    finally:
        await runner.cleanup()
