"""`bench adapters --live`: LoRA adapters through real processes on loopback.

`--replicas` engine-sims start once, each with `--slots` adapter slots (`--max-loras`) and
every adapter of the mix registered (`--lora-modules`, folders written under the run
directory). The workload and the targets are the simulated run's (`bench.adapters`). For each
target our router starts in front of the engines with `--served-model` (any other request
model is an adapter), every adapter is unloaded and loaded again on every engine (so each
target starts with empty slots, as the caches are emptied too), `bench.replay` sends the
workload through it as clients would, and the router stops.

With `--placed N` a second fleet then starts in which each engine registers only the adapters
the simulated run's placement gives it (`adapter_workload.placement`, engine-i being the
simulation's replica engine-i), and the routers follow a ring file (docs/contracts.md) that
lists each member's adapters, as the operator's ring does: they learn where an adapter is from
it, as they would in a cluster, and `--backends` (which carries no adapters) is not used.

Measured: the hit rate from the engines' prefix-cache counters; TTFT at the client (so the
router's own time is in it), in engine seconds; the adapter loads the engines counted
(`prefixroute_engine_sim_lora_loads_total`) across the run. `bench.adapters` prints them as
it prints a simulated run, with every ratio against the baseline measured in the same run
over the same fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import json
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
from prefixroute.bench.local_fleet import engine_fleet, engine_model_flags, events_config, running_router
from prefixroute.bench.replay import replay
from prefixroute.bench.results import RunResult
from prefixroute.bench.simulate import replica_names
from prefixroute.bench.workload import BenchRequest, compress

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
    adapters: dict[str, dict[str, str]]  # engine URL -> the adapters registered there (name -> folder)
    event_ports: list[int]  # each engine's KV event port (precise mode), else empty
    router_port: int
    log_dir: Path
    ring_file: Path | None = None  # placed: the routers' members and each one's adapters


def write_adapters(folder: Path, names: Sequence[str]) -> dict[str, str]:
    """An adapter folder per name (engine-sim reads only its adapter_config.json): name -> path."""
    from prefixroute.engine_sim.lora import write_adapter_folder

    return {name: str(write_adapter_folder(folder / name)) for name in names}


def engine_flags(args: argparse.Namespace) -> list[str]:
    """Every engine's flags: the bench's engine model and its LoRA slots (which adapters it
    registers is its own: `lora_flags`)."""
    return [
        *engine_model_flags(args),
        f"--tokenizer={args.tokenizer}",
        f"--max-loras={args.slots}",
        f"--lora-load-seconds={args.load_seconds}",
    ]


def lora_flags(adapters: Mapping[str, str]) -> list[str]:
    """One engine's `--lora-modules` (none for an engine with no adapter registered)."""
    return ["--lora-modules", *(f"{name}={path}" for name, path in adapters.items())] if adapters else []


def ring_document(engines: Sequence[str], held: Mapping[str, frozenset[str]]) -> dict[str, object]:
    """The ring file of a placed fleet (docs/contracts.md): member engine-i at the i-th URL,
    listing the adapters `held` gives engine-i, ready and of weight 1."""
    members = [
        {"pod": name, "address": url, "weight": 1.0, "ready": True, "adapters": sorted(held[name])}
        for name, url in zip(replica_names(len(engines)), engines)
    ]
    return {"version": "1", "members": members}


def router_flags(target: Target, args: argparse.Namespace, fleet: LiveFleet) -> list[str]:
    """One target's router: its strategy, its belief in the engines' slots (or none), the
    model it serves (other request models are adapters), precise mode's events where asked."""
    members = ["--ring-file", str(fleet.ring_file)] if fleet.ring_file else ["--backends", ",".join(fleet.engines)]
    flags = [*members, "--strategy", target.strategy, "--served-model", args.model]
    if target.strategy == "prefix-cache":
        flags += ["--adapter-slots", str(args.slots if target.aware else 0)]
        if args.adapter_load_cost is not None:
            flags += ["--adapter-load-cost", str(args.adapter_load_cost)]
    if fleet.event_ports:
        flags += ["--mode", "precise", "--tokenizer", args.tokenizer, "--block-size", str(args.block_tokens)]
        flags += ["--kv-events", ",".join(f"tcp://127.0.0.1:{p}" for p in fleet.event_ports)]
        flags += ["--kv-events-replay", ",".join(f"tcp://127.0.0.1:{p + 1}" for p in fleet.event_ports)]
    return flags + shlex.split(args.router_flags or "")


async def empty_slots(adapters: Mapping[str, Mapping[str, str]]) -> None:
    """Unload and load again every adapter on every engine (URL -> its adapters): an adapter
    unloaded leaves its slot, so the next target starts with none resident, whatever the last
    one left."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        for url, registered in adapters.items():
            for name, path in registered.items():
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


def play(
    fleet: LiveFleet, target: Target, requests: Sequence[BenchRequest], args: argparse.Namespace, label: str
) -> RunResult:
    """The workload through a router of its own for `target`, slots and caches emptied first."""
    log = fleet.log_dir / f"router-{label.replace(' ', '-').replace('/', '-')}.log"
    with running_router(fleet.router_port, router_flags(target, args, fleet), log) as router:
        asyncio.run(empty_slots(fleet.adapters))
        before = adapter_loads(fleet.engines)
        run = replay(
            requests,
            router.url,
            fleet.engines,
            label=label,
            model=args.model,
            time_scale=args.time_scale,
            show_progress=sys.stderr.isatty(),
        )
        result = asyncio.run(run)
        result.adapter_loads = int(adapter_loads(fleet.engines) - before)
    return result


@contextmanager
def live_fleet(
    args: argparse.Namespace,
    adapters: Mapping[str, str],
    held: Mapping[str, frozenset[str]] | None,
    log_dir: Path,
) -> Iterator[LiveFleet]:
    """`args.replicas` engine-sims on `args.base_port`.. (their KV event ports above the router's
    in precise mode), each registering every adapter, or with `held` (a placement: replica name
    -> its adapters) only its own, then named with them in a ring file; stopped on the way out."""
    router_port = args.base_port + args.replicas
    names = replica_names(args.replicas)
    mine = [dict(adapters) if held is None else {a: adapters[a] for a in sorted(held[n])} for n in names]
    ports = [router_port + 1 + 2 * i for i in range(args.replicas)] if args.precise else []
    per_engine = [lora_flags(m) for m in mine]
    for i, port in enumerate(ports):
        per_engine[i] += ["--kv-events-config", events_config(port, i)]
    with engine_fleet(args, engine_flags(args), log_dir, per_engine) as engines:
        ring_file = None
        if held is not None:
            ring_file = log_dir / "ring.json"
            ring_file.write_text(json.dumps(ring_document(engines, held), indent=1))  # JSON is YAML
        yield LiveFleet(engines, dict(zip(engines, mine)), ports, router_port, log_dir, ring_file)


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


Layout = tuple[str, Mapping[str, frozenset[str]] | None]
"""A label suffix and a placement (replica name -> its adapters; None: every adapter everywhere)."""


def run_live(
    args: argparse.Namespace,
    requests: Sequence[BenchRequest],
    names: Sequence[str],
    targets: Sequence[Target],
    layouts: Sequence[Layout] = (("", None),),
) -> list[list[RunResult]]:
    """Every target over one engine fleet serving `names` (arrivals in engine seconds), in order,
    for each layout in turn (a fleet of its own each): one list of results per layout."""
    if args.precise and any(held is not None for _, held in layouts):
        raise BenchError(
            "--placed --precise: a ring file's members publish KV events on one --kv-events-port, "
            "which engines sharing the loopback address cannot do"
        )
    run_dir = Path(args.run_dir or tempfile.mkdtemp(prefix="prefixroute-adapters-"))
    run_dir.mkdir(parents=True, exist_ok=True)
    print(f"logs and adapter folders in {run_dir}", file=sys.stderr)
    adapters = write_adapters(run_dir / "adapters", names)
    wall = compress(requests, args.time_scale)
    out = []
    for suffix, held in layouts:
        log_dir = run_dir / (suffix.strip("/") or "everywhere")
        with live_fleet(args, adapters, held, log_dir) as fleet:
            out.append([play(fleet, target, wall, args, target.label + suffix) for target in targets])
    return out
