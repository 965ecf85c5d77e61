"""Our own servers as local processes: engine-sim's and the router's command lines, and an
engine-sim fleet started and waited on.

Starting, waiting and stopping are `prefixroute.processes`'; what is here is what every
live run (`bench peers`, `bench soak`, `router-bench`) and the fault and security tests
would otherwise each spell out: `python -m prefixroute <part> --host 127.0.0.1 --port N`,
and the fleet and the router a live bench (`adapters`, `priorities`, `fairness`) starts
for its run and stops after it, whatever happens in between.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from prefixroute.processes import Child

HOST = "127.0.0.1"
# The engine model's settings, as the benches take them (engine_sim.cli.add_engine_arguments).
ENGINE_MODEL_FLAGS = (
    "block-tokens",
    "kv-blocks",
    "max-running",
    "max-model-len",
    "prefill-tokens-per-s",
    "decode-tokens-per-s",
)


def engine_model_flags(args: argparse.Namespace) -> list[str]:
    """A bench's engine model settings as engine-sim flags, so the engines a live run starts
    run the model that a simulation with the same flags runs."""
    return [f"--{name}={getattr(args, name.replace('-', '_'))}" for name in ENGINE_MODEL_FLAGS]


def events_config(port: int, engine: int) -> str:
    """engine-sim's --kv-events-config: vLLM's flag and JSON (engine-sim binds 127.0.0.1, its --host),
    events on `port`, their replay on the next one."""
    return json.dumps(
        {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{port}",
            "replay_endpoint": f"tcp://*:{port + 1}",
            "topic": f"kv@engine-{engine}",
        }
    )


def _command(part: str, port: int, flags: Sequence[str]) -> list[str]:
    return [sys.executable, "-m", "prefixroute", part, "--host", HOST, "--port", str(port), *flags]


def engine_sim_command(port: int, *flags: str) -> list[str]:
    """`prefixroute engine-sim` on 127.0.0.1:`port`, with `flags` (the model, its settings)."""
    return _command("engine-sim", port, flags)


def router_command(port: int, *flags: str) -> list[str]:
    """`prefixroute router` on 127.0.0.1:`port`, with `flags` (its members, its strategy)."""
    return _command("router", port, flags)


def epp_command(port: int, *flags: str) -> list[str]:
    """`prefixroute epp` (ext_proc on 127.0.0.1:`port`), with `flags` (its members, ports, strategy)."""
    return _command("epp", port, flags)


def start_engines(
    count: int,
    base_port: int,
    model: str,
    model_path: str,
    time_scale: float,
    engine_flags: Sequence[str],
    log_dir: Path,
    per_engine: Sequence[Sequence[str]] | None = None,
) -> tuple[list[str], list[Child]]:
    """`count` engine-sims on base_port.., each answering /health; their URLs and processes.
    `per_engine`: flags of each engine's own (its KV event ports). A failure stops the ones
    already started."""
    procs: list[Child] = []
    try:
        for i in range(count):
            port = base_port + i
            flags = ("--model", model, "--model-path", model_path, "--time-scale", str(time_scale), *engine_flags)
            if per_engine is not None:
                flags += tuple(per_engine[i])
            procs.append(Child(f"engine-{i}", engine_sim_command(port, *flags), log_dir / f"engine-{i}.log", port))
            procs[-1].start()
        for proc in procs:
            proc.wait_http("/health", timeout=90.0)
    except BaseException:
        for proc in procs:
            proc.stop()
        raise
    return [proc.url for proc in procs], procs


@contextmanager
def engine_fleet(
    args: argparse.Namespace,
    engine_flags: Sequence[str],
    log_dir: Path,
    per_engine: Sequence[Sequence[str]] | None = None,
) -> Iterator[list[str]]:
    """A live bench's engines: `args.replicas` engine-sims on `args.base_port`.. serving
    `args.model` (engine-sim's own model folder) at `args.time_scale`, with `engine_flags`
    (and each its `per_engine` ones); their URLs, every one stopped on the way out."""
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    engines, procs = start_engines(
        args.replicas,
        args.base_port,
        args.model,
        str(ensure_model_dir()),
        args.time_scale,
        engine_flags,
        log_dir,
        per_engine,
    )
    try:
        yield engines
    finally:
        for proc in procs:
            proc.stop()


@contextmanager
def running_router(port: int, flags: Sequence[str], log: Path) -> Iterator[Child]:
    """`prefixroute router` on 127.0.0.1:`port` with `flags`, answering /health; stopped on the
    way out (a target's router lives for its run only)."""
    router = Child("router", router_command(port, *flags), log, port)
    router.start()
    try:
        router.wait_http("/health", timeout=60.0)
        yield router
    finally:
        router.stop()
