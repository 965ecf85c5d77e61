"""`bench adapters --live`: each target's router flags, the engines' LoRA flags, emptying the
slots between targets, the loads counted, and the table's ratios (the processes themselves:
the run in docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import asyncio
import io
import math
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from prefixroute.bench.adapters_live import (
    BASELINE,
    TARGETS,
    LiveFleet,
    Row,
    adapter_loads,
    empty_slots,
    engine_flags,
    print_table,
    router_flags,
    targets,
    with_ratios,
    write_adapters,
)
from prefixroute.bench.errors import BenchError
from prefixroute.bench.results import RunResult
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
    args = parse("--max-loras", "4", "--router-flags", "--load-slack 2")
    aware = router_flags(BY_LABEL["prefix-cache"], args, fleet(tmp_path))
    blind = router_flags(BY_LABEL["prefix-cache blind"], args, fleet(tmp_path))
    robin = router_flags(BY_LABEL["round-robin"], args, fleet(tmp_path))
    assert _value(aware, "--adapter-slots") == "4"
    assert _value(blind, "--adapter-slots") == "0"
    assert "--adapter-slots" not in robin  # a prefix-cache knob only
    for flags in (aware, blind, robin):
        assert _value(flags, "--backends") == "http://e0,http://e1"
        assert _value(flags, "--served-model") == "engine-sim"  # any other request model is an adapter
        assert flags[-2:] == ["--load-slack", "2"]
        assert "--mode" not in flags


def test_precise_routers_follow_each_engine_s_events_and_replays(tmp_path):
    flags = router_flags(BY_LABEL["prefix-cache"], parse(), fleet(tmp_path, [9001, 9003]))
    assert _value(flags, "--mode") == "precise"
    assert _value(flags, "--kv-events") == "tcp://127.0.0.1:9001,tcp://127.0.0.1:9003"
    assert _value(flags, "--kv-events-replay") == "tcp://127.0.0.1:9002,tcp://127.0.0.1:9004"


def test_every_engine_gets_the_slots_and_registers_every_adapter(tmp_path):
    adapters = write_adapters(tmp_path, ["a", "b"])
    for name, path in adapters.items():
        check_adapter_folder(name, path)  # what engine-sim accepts at start
    flags = engine_flags(parse("--max-loras", "3", "--lora-load-seconds", "0.2"), adapters)
    assert "--max-loras=3" in flags
    assert "--lora-load-seconds=0.2" in flags
    assert flags[flags.index("--lora-modules") + 1 :] == [f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}"]
    assert "--max-model-len=262144" in flags  # the trace's longest prompts fit


def test_targets_must_be_known_and_include_the_baseline():
    assert [t.label for t in targets("prefix-cache, round-robin")] == ["prefix-cache", "round-robin"]
    with pytest.raises(BenchError, match="--targets takes"):
        targets("prefix-cache,least-load")
    with pytest.raises(BenchError, match="must include the baseline"):
        targets("prefix-cache")


def result(hits: int, ttfts: list[float], seconds: float) -> RunResult:
    return RunResult(
        "x", "replay", requests=len(ttfts), prompt_tokens=100, cached_tokens=hits, ttfts=ttfts, duration_s=seconds
    )


def test_loads_are_per_engine_minute_and_every_ratio_is_to_the_baseline():
    aware = Row("prefix-cache", result(60, [1.0, 2.0, 3.0], 120.0), loads=10)
    robin = Row(BASELINE, result(20, [2.0, 4.0, 6.0], 120.0), loads=40)
    assert aware.loads_per_minute == 5.0
    assert math.isnan(Row("x", result(0, [], 0.0), 3).loads_per_minute)
    rows = with_ratios([aware.summary(), robin.summary()], BASELINE)
    assert (rows[0]["hit_rate_x"], rows[0]["ttft_p50_x"], rows[0]["adapter_loads_per_min_x"]) == (3.0, 0.5, 0.25)
    assert rows[1]["ttft_p99_x"] == 1.0
    out = io.StringIO()
    print_table(rows, out)
    table = out.getvalue().splitlines()
    assert table[2] == "| prefix-cache | 3 | 0 | 60.0% | 2.000 | 2.980 | 5.0 | 3.00 | 0.50 | 0.50 | 0.25 |"
    assert "ratio to round-robin in this run" in table[-1]
    with pytest.raises(BenchError, match="baseline"):
        with_ratios([aware.summary()], BASELINE)


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
