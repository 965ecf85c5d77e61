"""`bench adapters --live`: LoRA adapters through real processes on loopback.

`--replicas` engine-sims start once, each with `--slots` adapter slots (`--max-loras`) and
every adapter of the mix registered (`--lora-modules`, folders written under the run
directory). The workload and the targets are the simulated run's (`bench.adapters`). For each
target our router starts in front of the engines with `--served-model` (any other request
model is an adapter), every adapter is unloaded and loaded again on every engine (so each
target starts with empty slots, as the caches are emptied too), `bench.replay` sends the
workload through it as clients would, and the router stops.

Measured: the hit rate from the engines' prefix-cache counters; TTFT at the client (so the
router's own time is in it), in engine seconds; the adapter loads the engines counted
(`prefixroute_engine_sim_lora_loads_total`) across the run. `bench.adapters` prints them as
it prints a simulated run, with every ratio against the baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import sys
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import aiohttp

from prefixroute.bench import prom
from prefixroute.bench.errors import BenchError, TargetError
from prefixroute.bench.local_fleet import engine_model_flags, events_config, router_command, start_engines
from prefixroute.bench.replay import replay
from prefixroute.bench.results import RunResult
from prefixroute.bench.workload import BenchRequest, compress
from prefixroute.processes import Child

LOADS = "prefixroute_engine_sim_lora_loads_total"


class Target(Protocol):
    """What a run needs of a target (`bench.adapters.Target`)."""

    @property
    def label(self) -> str: ...
    @property
    def strategy(self) -> str: ...
    @property
    def aware(self) -> bool: ...  # the router believes the engines' slots (--adapter-slots = --slots)


@dataclass(frozen=True)
class LiveFleet:
    """Engine-sims already answering, their adapters, and where each target's router goes."""

    engines: list[str]
    adapters: dict[str, str]  # name -> folder, registered on every engine
    event_ports: list[int]  # each engine's KV event port (precise mode), else empty
    router_port: int
    log_dir: Path


def write_adapters(folder: Path, names: Sequence[str]) -> dict[str, str]:
    """An adapter folder per name (engine-sim reads only its adapter_config.json): name -> path."""
    from prefixroute.engine_sim.lora import write_adapter_folder

    return {name: str(write_adapter_folder(folder / name)) for name in names}


def engine_flags(args: argparse.Namespace, adapters: Mapping[str, str]) -> list[str]:
    """The engines' flags: the bench's engine model, its LoRA slots, every adapter registered."""
    return [
        *engine_model_flags(args),
        f"--tokenizer={args.tokenizer}",
        f"--max-loras={args.slots}",
        f"--lora-load-seconds={args.load_seconds}",
        "--lora-modules",
        *(f"{name}={path}" for name, path in adapters.items()),
    ]


def router_flags(target: Target, args: argparse.Namespace, fleet: LiveFleet) -> list[str]:
    """One target's router: its strategy, its belief in the engines' slots (or none), the
    model it serves (other request models are adapters), precise mode's events where asked."""
    flags = ["--backends", ",".join(fleet.engines), "--strategy", target.strategy, "--served-model", args.model]
    if target.strategy == "prefix-cache":
        flags += ["--adapter-slots", str(args.slots if target.aware else 0)]
        if args.adapter_load_cost is not None:
            flags += ["--adapter-load-cost", str(args.adapter_load_cost)]
    if fleet.event_ports:
        flags += ["--mode", "precise", "--tokenizer", args.tokenizer, "--block-size", str(args.block_tokens)]
        flags += ["--kv-events", ",".join(f"tcp://127.0.0.1:{p}" for p in fleet.event_ports)]
        flags += ["--kv-events-replay", ",".join(f"tcp://127.0.0.1:{p + 1}" for p in fleet.event_ports)]
    return flags + shlex.split(args.router_flags or "")


async def empty_slots(engines: Sequence[str], adapters: Mapping[str, str]) -> None:
    """Unload and load again every adapter on every engine: an adapter unloaded leaves its slot,
    so the next target starts with none resident, whatever the last one left."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for url in engines:
            for name, path in adapters.items():
                for verb, body in (("unload", {"lora_name": name}), ("load", {"lora_name": name, "lora_path": path})):
                    async with session.post(f"{url}/v1/{verb}_lora_adapter", json=body) as resp:
                        if resp.status != 200:
                            raise TargetError(f"{url} answered {verb} of {name} with HTTP {resp.status}")


def adapter_loads(engines: Sequence[str]) -> float:
    """Adapter loads the engines have counted so far, together."""
    total = 0.0
    for url in engines:
        try:
            with urllib.request.urlopen(f"{url}/metrics", timeout=30) as resp:
                total += prom.total(prom.samples(resp.read().decode()), LOADS)
        except OSError as exc:
            raise TargetError(f"cannot read {url}/metrics: {exc!r}") from None
    return total


def play(fleet: LiveFleet, target: Target, requests: Sequence[BenchRequest], args: argparse.Namespace) -> RunResult:
    """The workload through a router of its own for `target`, slots and caches emptied first."""
    flags = router_flags(target, args, fleet)
    log = fleet.log_dir / f"router-{target.label.replace(' ', '-')}.log"
    router = Child("router", router_command(fleet.router_port, *flags), log, fleet.router_port)
    router.start()
    try:
        router.wait_http("/health", timeout=60.0)
        asyncio.run(empty_slots(fleet.engines, fleet.adapters))
        before = adapter_loads(fleet.engines)
        run = replay(
            requests,
            router.url,
            fleet.engines,
            label=target.label,
            model=args.model,
            time_scale=args.time_scale,
            show_progress=sys.stderr.isatty(),
        )
        result = asyncio.run(run)
        result.adapter_loads = int(adapter_loads(fleet.engines) - before)
    finally:
        router.stop()
    return result


@contextmanager
def engine_fleet(args: argparse.Namespace, adapters: Mapping[str, str], log_dir: Path) -> Iterator[LiveFleet]:
    """`args.replicas` engine-sims on `args.base_port`.. with every adapter registered (their KV
    event ports above the router's in precise mode), stopped on the way out."""
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    router_port = args.base_port + args.replicas
    ports = [router_port + 1 + 2 * i for i in range(args.replicas)] if args.precise else []
    per_engine = [["--kv-events-config", events_config(port, i)] for i, port in enumerate(ports)] or None
    engines, procs = start_engines(
        args.replicas,
        args.base_port,
        args.model,
        str(ensure_model_dir()),
        args.time_scale,
        engine_flags(args, adapters),
        log_dir,
        per_engine,
    )
    try:
        yield LiveFleet(engines, dict(adapters), ports, router_port, log_dir)
    finally:
        for proc in procs:
            proc.stop()


def add_live_arguments(p: argparse.ArgumentParser) -> None:
    """`bench adapters`' flags for a live run (the workload's, the engines' and the targets' are shared)."""
    g = p.add_argument_group("live (--live)")
    g.add_argument(
        "--live", action="store_true", help="engine-sim and router processes on loopback (default: simulate)"
    )
    g.add_argument("--precise", action="store_true", help="live: engines publish KV events, routers follow them")
    g.add_argument("--router-flags", default="", help="live: more flags for every router (one shell-quoted string)")
    g.add_argument("--time-scale", type=float, default=1.0, help="live: engines run this much faster than engine time")
    g.add_argument(
        "--base-port", type=int, default=29100, help="live: the engines' first port (the router: after them)"
    )
    g.add_argument("--model", default="engine-sim", help="live: the engines' served model name")
    g.add_argument("--run-dir", default=None, help="live: where logs and adapter folders go (default: a temp dir)")


def run_live(
    args: argparse.Namespace, requests: Sequence[BenchRequest], names: Sequence[str], targets: Sequence[Target]
) -> list[RunResult]:
    """Every target over one engine fleet serving `names` (arrivals in engine seconds), in order."""
    if args.placed:
        raise BenchError("--placed is simulated only: a live router learns each member's adapters from a ring")
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="prefixroute-adapters-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"logs and adapter folders in {run_dir}", file=sys.stderr)
    adapters = write_adapters(run_dir / "adapters", names)
    wall = compress(requests, args.time_scale)
    with engine_fleet(args, adapters, run_dir) as fleet:
        return [play(fleet, target, wall, args) for target in targets]
