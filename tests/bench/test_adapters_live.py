"""`bench adapters --live`: each target's router flags, the engines' LoRA flags, emptying the
slots between targets, the loads counted, and the table's ratios (the processes themselves:
the run in docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import asyncio
import json
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from aiohttp import web

from prefixroute.bench import adapters_live
from prefixroute.bench.adapter_workload import AdapterMix
from prefixroute.bench.adapters import TARGETS, layouts
from prefixroute.bench.adapters_live import (
    LiveFleet,
    adapter_loads,
    empty_slots,
    engine_flags,
    live_fleet,
    lora_flags,
    ring_document,
    router_flags,
    run_live,
    write_adapters,
)
from prefixroute.bench.errors import BenchError
from prefixroute.cli import build_parser
from prefixroute.engine_sim.lora import LoraModule, check_adapter_folder
from prefixroute.engine_sim.server import DRIVER, create_app
from prefixroute.routing.fleet import fleet_from_ring_document
from tests.engine_sim.conftest import FAST

BY_LABEL = {t.label: t for t in TARGETS}


def parse(*argv: str) -> argparse.Namespace:
    return build_parser(only="bench").parse_args(["bench", "adapters", "--live", "--trace", "t.jsonl", *argv])


def fleet(tmp_path: Path, event_ports: list[int] | None = None, ring_file: Path | None = None) -> LiveFleet:
    engines = ["http://e0", "http://e1"]
    return LiveFleet(engines, {e: {"a": "/f/a"} for e in engines}, event_ports or [], 9000, tmp_path, ring_file)


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


def test_every_engine_gets_the_slots_and_registers_its_adapters(tmp_path):
    adapters = write_adapters(tmp_path, ["a", "b"])
    for name, path in adapters.items():
        check_adapter_folder(name, path)  # what engine-sim accepts at start
    flags = engine_flags(parse("--slots", "3", "--load-seconds", "0.2", "--max-model-len", "262144"))
    assert "--max-loras=3" in flags
    assert "--lora-load-seconds=0.2" in flags
    assert "--max-model-len=262144" in flags  # the bench's engine model reaches every engine
    assert lora_flags(adapters) == ["--lora-modules", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}"]
    assert lora_flags({}) == []  # an engine the placement gave nothing: no empty --lora-modules


def test_a_placed_router_follows_the_ring_file_not_backends(tmp_path):
    ring = tmp_path / "ring.json"
    flags = router_flags(BY_LABEL["prefix-cache+adapters"], parse(), fleet(tmp_path, ring_file=ring))
    assert _value(flags, "--ring-file") == str(ring)
    assert "--backends" not in flags
    assert _value(flags, "--served-model") == "engine-sim"


def test_the_ring_file_lists_the_simulated_placement_member_by_member():
    mix = AdapterMix(adapters=5)
    placed = dict(layouts(parse("--placed", "2", "--replicas", "3", "--adapters", "5"), mix))["/placed"]
    assert placed is not None
    doc = ring_document(["http://127.0.0.1:7000", "http://127.0.0.1:7001", "http://127.0.0.1:7002"], placed)
    ring = fleet_from_ring_document(doc)  # the router's own reading of a ring file
    assert [(m.name, m.url) for m in ring.members] == [
        ("engine-0", "http://127.0.0.1:7000"),
        ("engine-1", "http://127.0.0.1:7001"),
        ("engine-2", "http://127.0.0.1:7002"),
    ]
    assert {m.name: m.adapters for m in ring.members} == placed
    assert all(m.ready and m.weight == 1.0 for m in ring.members)
    for name in mix.names:  # each adapter on exactly two members, as simulated
        assert sum(name in (m.adapters or ()) for m in ring.members) == 2


def test_a_placed_fleet_registers_each_engine_s_own_adapters_and_writes_its_ring(tmp_path, monkeypatch):
    started: list[list[str]] = []

    @contextmanager
    def engines(args, flags, log_dir, per_engine=None):
        started.extend(list(f) for f in per_engine)
        yield [f"http://127.0.0.1:{7000 + i}" for i in range(args.replicas)]

    monkeypatch.setattr(adapters_live, "engine_fleet", engines)
    args = parse("--placed", "1", "--replicas", "2", "--adapters", "3")
    adapters = {n: f"/f/{n}" for n in AdapterMix(adapters=3).names}
    held = {"engine-0": frozenset({"adapter-00", "adapter-02"}), "engine-1": frozenset({"adapter-01"})}
    with live_fleet(args, adapters, held, tmp_path) as placed:
        assert started == [
            ["--lora-modules", "adapter-00=/f/adapter-00", "adapter-02=/f/adapter-02"],
            ["--lora-modules", "adapter-01=/f/adapter-01"],
        ]
        assert placed.adapters == {
            "http://127.0.0.1:7000": {"adapter-00": "/f/adapter-00", "adapter-02": "/f/adapter-02"},
            "http://127.0.0.1:7001": {"adapter-01": "/f/adapter-01"},
        }
        assert placed.ring_file is not None
        doc = json.loads(placed.ring_file.read_text())
        assert [m["adapters"] for m in doc["members"]] == [["adapter-00", "adapter-02"], ["adapter-01"]]
    started.clear()
    with live_fleet(parse("--replicas", "2", "--precise"), adapters, None, tmp_path) as everywhere:
        assert everywhere.ring_file is None  # --backends: every engine registers every adapter
        assert all(len(a) == 3 for a in everywhere.adapters.values())
        assert [f[-2] for f in started] == ["--kv-events-config"] * 2


def test_a_placement_is_refused_in_precise_mode(tmp_path):
    args = parse("--placed", "2", "--precise", "--run-dir", str(tmp_path))
    with pytest.raises(BenchError, match="--placed --precise"):
        run_live(args, [], ["a"], TARGETS, layouts(args, AdapterMix(adapters=1)))
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
        await empty_slots({url: adapters})
        assert slots.resident() == ()
        assert slots.registered == {"a", "b"}  # still served: loaded again
    finally:
        await runner.cleanup()
