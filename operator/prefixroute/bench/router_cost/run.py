"""`prefixroute router-bench`: what the router costs, next to a direct connection and a Rust peer.

In one run, against one fast backend (bench/backend.py, two members on two ports):
- direct: wrk → backend;
- prefixroute: wrk → our router → backend;
- sglang-router (when installed under ~/.cache/prefixroute/peers): wrk → it → backend;
- envoy+epp: wrk → Envoy (a GIE gateway, our bootstrap's defaults) → backend, our picker
  choosing over ext_proc (envoy+epp/full-duplex with --full-duplex: behind GIE's processing mode);
- envoy+gie-epp (with --gie-epp): Envoy in GIE's processing mode with GIE's reference picker,
  which finds the backends as pods through an API server (`python -m e2e.peers router-bench`
  runs the backends as pods of the local cluster and passes them as --members);
each streamed and not, closed loop (req/s) and paced (latency at --rate req/s).
It prints ratios: our req/s over direct and over sglang-router's (the median of the
rounds' ratios and their range), the latency each router adds over direct at p50 and
p99, and each router's CPU per request served (its process group's user + system
time over the requests of the closed-loop runs), which moves far less than req/s
when other work shares the machine.

CPU split on a 2-core machine: wrk and the backend share CPU 0, the router under
test has CPU 1 to itself (both routers get the same single core; sglang-router's
runtime sees one CPU through its affinity mask). With fewer cores nothing is pinned.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from prefixroute.bench.errors import BenchError
from prefixroute.bench.local_fleet import router_command
from prefixroute.bench.router_cost.cpu import group_cpu_seconds
from prefixroute.bench.router_cost.load import LoadResult, run_wrk, write_script, wrk_path
from prefixroute.bench.router_cost.peers import PEERS_VENV, ensure_peers, sglang_router
from prefixroute.engine_sim.model_dir import ensure_model_dir
from prefixroute.processes import Child
from prefixroute.router.settings import RouterSettings

DEFAULT_CLIENT = RouterSettings.upstream_client
PICKER_BASELINES = ("envoy+gie-epp", "envoy+grpc-floor")  # what every picker's CPU is also set against


@dataclass(frozen=True)
class Layout:
    load_cpu: str | None
    backend_cpu: str | None
    router_cpu: str | None

    def describe(self) -> str:
        if self.router_cpu is None:
            return "no CPU pinning (fewer than 2 cores or no taskset)"
        return (
            f"wrk (1 thread) and the backend on CPU {self.load_cpu}; "
            f"the router under test alone on CPU {self.router_cpu}"
        )


def choose_layout() -> Layout:
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or shutil.which("taskset") is None:
        return Layout(None, None, None)
    return Layout("0", "0", "1")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each measured run")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; every figure is the median over them")
    parser.add_argument("--connections", type=int, default=64, help="busy connections in closed-loop runs")
    parser.add_argument("--rate", type=float, default=500.0, help="offered req/s in paced runs")
    parser.add_argument("--paced-connections", type=int, default=50)
    parser.add_argument("--strategy", default="prefix-cache", help="our router's strategy")
    parser.add_argument(
        "--upstream-client",
        choices=("aiohttp", "native", "both"),
        default="both",
        help="our router's upstream client(s); 'both' runs two routers side by side",
    )
    parser.add_argument("--peer-policy", default="cache_aware", help="sglang-router's policy")
    parser.add_argument(
        "--peers-venv",
        type=Path,
        default=PEERS_VENV,
        help="the peer routers' virtualenv, shared with bench peers; created with pip when sglang-router is missing",
    )
    parser.add_argument("--no-peer", action="store_true", help="skip sglang-router")
    parser.add_argument(
        "--no-epp", action="store_true", help="skip Envoy + prefixroute epp (a GIE gateway and our picker)"
    )
    parser.add_argument("--no-stream", action="store_true", help="skip the streamed runs")
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        help="also run our router from this checkout (e.g. a `git worktree` of main), same flags and client, "
        "as the target 'prefixroute@baseline': a change's cost as a ratio measured in the same run",
    )
    parser.add_argument(
        "--full-duplex",
        action="store_true",
        help="also run our picker (and the baseline's) behind Envoy configured as GIE's own gateways are "
        "(FULL_DUPLEX_STREAMED both ways, every response event, no mode override) as 'envoy+epp/full-duplex'",
    )
    parser.add_argument(
        "--tracing",
        action="store_true",
        help="also run our router with OpenTelemetry tracing on (every request sampled, spans exported "
        "over OTLP/HTTP to the bench backend, which accepts them) as 'prefixroute+tracing'",
    )
    parser.add_argument(
        "--precise",
        action="store_true",
        help="also run our router in precise mode as 'prefixroute+precise' (keys by a 32k byte-level BPE "
        "tokenizer's tokens; no events arrive, so the figure is the request path's) and measure, in this "
        "process, the CPU per KV event block a precise router spends following the engines",
    )
    parser.add_argument(
        "--members",
        help="comma-separated base URLs of running backends (this module's, e.g. as cluster pods) instead of "
        "starting one; the first is the direct target",
    )
    parser.add_argument(
        "--gie-epp",
        metavar="BINARY",
        help="also GIE's reference Endpoint Picker behind Envoy in GIE's processing mode (python -m e2e.build gie "
        "builds it); it finds the backends as pods: needs --gie-pool and --members (python -m e2e.peers router-bench)",
    )
    parser.add_argument("--gie-pool", metavar="NAMESPACE/SELECTOR", help="the backends' pods, for --gie-epp")
    parser.add_argument(
        "--grpc-floor",
        action="store_true",
        help="also run, behind the same Envoy as our picker, a picker that gives our picker's answers with "
        "nothing behind them (bench/router_cost/grpc_floor.py) as 'envoy+grpc-floor': the Python ext_proc "
        "transport's own CPU per request",
    )
    parser.add_argument("--base-port", type=int, default=18400)
    parser.add_argument("--json", type=Path, help="also write every figure to this file")


def _start(name: str, command: list[str], cpu: str | None, work: Path, env: dict[str, str]) -> Child:
    """Started in its own session (its process group is what CPU per request is read from),
    pinned to `cpu` with taskset when given, its log in the run's folder."""
    if cpu is not None:
        command = ["taskset", "-c", cpu, *command]
    return Child(name, command, work / f"{name}.log", env=env).start()


_READY_PROBE = json.dumps({"model": "bench-model", "prompt": "ready?", "max_tokens": 1}).encode()


def _wait_ready(url: str, process: Child) -> None:
    """Until a completion goes through `url` (a router is ready only once it reaches a worker)."""
    process.wait_http(url + "/v1/completions", body=_READY_PROBE, timeout=60.0)


@dataclass(frozen=True)
class Row:
    target: str
    stream: bool
    mode: str  # "closed" or "paced"
    result: LoadResult
    round: int = 0
    cpu_us: float | None = None  # the target's CPU per request served (None: direct, or no /proc)


def _measured(pgid: int | None, url: str, script: Path, **wrk: Any) -> tuple[LoadResult, float | None]:
    """One wrk run, and the CPU microseconds per request that process group `pgid` spent on it."""
    before = group_cpu_seconds(pgid) if pgid is not None else None
    result = run_wrk(url, script, **wrk)
    after = group_cpu_seconds(pgid) if pgid is not None else None
    if before is None or after is None or not result.requests:
        return result, None
    return result, 1e6 * (after - before) / result.requests


def _epp_command(port: int, members: list[str], strategy: str) -> list[str]:
    return [sys.executable, "-m", "prefixroute", "epp", "--port", str(port), "--health-port", "0",
            "--metrics-port", "0", "--backends", ",".join(members), "--strategy", strategy,
            "--log-level", "WARNING"]  # fmt: skip


def _gateway_target(
    name: str,
    picker_command: list[str],
    epp_port: int,
    envoy_port: int,
    members: list[str],
    layout: Layout,
    work: Path,
    env: dict[str, str],
    processes: list[Child],
    gateway_options: dict[str, Any],
) -> tuple[str, int]:
    """A picker and Envoy in front of it, both on the core a router gets (CPU per request is the
    picker's: Envoy's C++ carries the bytes); returns Envoy's URL and the picker's process group."""
    from prefixroute.bench.gateway import start_gateway

    picker = _start(name, picker_command, layout.router_cpu, work, env)
    processes.append(picker)
    gateway = start_gateway(
        f"{name}-envoy", listen=f"127.0.0.1:{envoy_port}", admin=f"127.0.0.1:{envoy_port + 1}",
        epp=f"127.0.0.1:{epp_port}", endpoints=[m.split("://", 1)[1] for m in members], log_dir=work,
        wrap=("taskset", "-c", layout.router_cpu) if layout.router_cpu is not None else (), **gateway_options,
    )  # fmt: skip
    processes.append(gateway.process)
    _wait_ready(gateway.url, picker)
    return gateway.url, picker.pid


# Ports above --base-port: the backend's two members on +0 and +1; our routers from +10 (one per
# upstream client, then one per variant); sglang-router on +20; our pickers from +30, four apart
# (the picker, its Envoy and Envoy's admin; up to four, to +44); nobody's KV events from +40
# (one per member, two); GIE's picker on +50 to +53 and its Envoy on +55 and +56; the gRPC
# floor's picker on +60 and its Envoy on +61 and +62.


@dataclass
class Started:
    """What a run has started: each target's URL by name, in the order they are measured; the
    process group whose CPU each router's is; every process, stopped last first at the end."""

    targets: dict[str, str]
    groups: dict[str, int] = field(default_factory=dict)
    processes: list[Child] = field(default_factory=list)


def bench_members(members: str | None, port: int) -> tuple[list[str], bool]:
    """The backend members (--members, else this run's backend on `port` and the next) and
    whether they were given."""
    given = [m.strip() for m in (members or "").split(",") if m.strip()]
    return given or [f"http://127.0.0.1:{port}", f"http://127.0.0.1:{port + 1}"], bool(given)


def upstream_clients(choice: str) -> list[str]:
    """Our router's upstream clients to measure: --upstream-client, or both side by side."""
    return ["aiohttp", "native"] if choice == "both" else [choice]


def router_name(client: str) -> str:
    """Our router's target name: plain with the default upstream client, else the client named."""
    return "prefixroute" if client == DEFAULT_CLIENT else f"prefixroute[{client}]"


def router_variants(
    args: argparse.Namespace, members: list[str], env: dict[str, str]
) -> list[tuple[str, list[str], dict[str, str]]]:
    """Our router again, changed by a flag: from --baseline-tree's checkout, with tracing, in
    precise mode; each as (name, extra router flags, environment)."""
    out: list[tuple[str, list[str], dict[str, str]]] = []
    if args.baseline_tree is not None:
        tree = args.baseline_tree.resolve() / "operator"
        if not (tree / "prefixroute").is_dir():
            raise SystemExit(f"router-bench: {tree} holds no prefixroute package")
        out.append(("prefixroute@baseline", [], dict(env, PYTHONPATH=str(tree))))
    if args.tracing:
        out.append(("prefixroute+tracing", ["--otlp-endpoint", members[0], "--trace-sample-ratio", "1"], env))
    if args.precise:
        silent = [f"tcp://127.0.0.1:{args.base_port + 40 + i}" for i in range(len(members))]  # nobody publishes there
        precise = ["--mode", "precise", "--tokenizer", str(ensure_model_dir()), "--served-model", "bench-model",
                   "--kv-events", ",".join(silent)]  # fmt: skip
        out.append(("prefixroute+precise", precise, env))
    return out


def _start_router(
    name: str, port: int, flags: list[str], layout: Layout, work: Path, env: dict[str, str], started: Started
) -> None:
    """One of our routers on `port`, on the router's core, measured once it serves."""
    ours = _start(name, router_command(port, *flags, "--log-level", "WARNING"), layout.router_cpu, work, env)
    started.processes.append(ours)
    _wait_ready(f"http://127.0.0.1:{port}", ours)
    started.targets[name] = f"http://127.0.0.1:{port}"
    started.groups[name] = ours.pid


def _start_routers(
    args: argparse.Namespace,
    members: list[str],
    layout: Layout,
    work: Path,
    env: dict[str, str],
    started: Started,
) -> list[tuple[str, list[str], dict[str, str]]]:
    """Our router with each upstream client, then its variants (with the last client); returns the variants."""
    port = args.base_port
    clients = upstream_clients(args.upstream_client)
    for i, client in enumerate(clients):
        flags = ["--backends", ",".join(members), "--strategy", args.strategy, "--upstream-client", client]
        _start_router(router_name(client), port + 10 + i, flags, layout, work, env, started)
    variants = router_variants(args, members, env)
    for i, (name, more, child_env) in enumerate(variants):
        flags = ["--backends", ",".join(members), "--strategy", args.strategy, "--upstream-client", clients[-1]]
        _start_router(name, port + 10 + len(clients) + i, [*flags, *more], layout, work, child_env, started)
    return variants


def _start_peer(
    args: argparse.Namespace,
    members: list[str],
    model_dir: Path,
    layout: Layout,
    work: Path,
    env: dict[str, str],
    started: Started,
) -> None:
    """sglang-router on the router's core (installed from PyPI the first time), unless skipped or
    it cannot be installed (said either way)."""
    peer = sglang_router(args.peer_policy, args.peers_venv)
    if args.no_peer:
        print("sglang-router: skipped (--no-peer)")
        return
    try:
        ensure_peers(args.peers_venv)
    except BenchError as exc:
        print(f"sglang-router: {exc}; skipped")
        return
    peer_url = f"http://127.0.0.1:{args.base_port + 20}"
    proc = _start("sglang", peer.command(args.base_port + 20, members, model_dir), layout.router_cpu, work, env)
    started.processes.append(proc)
    _wait_ready(peer_url, proc)
    started.targets["sglang-router"] = peer_url
    started.groups["sglang-router"] = proc.pid


def _start_gateways(
    args: argparse.Namespace,
    members: list[str],
    variants: list[tuple[str, list[str], dict[str, str]]],
    layout: Layout,
    work: Path,
    env: dict[str, str],
    started: Started,
) -> None:
    """Envoy as a GIE gateway with our picker (and the baseline's, with --baseline-tree; each
    again behind GIE's own processing mode with --full-duplex), and with GIE's reference picker
    (with --gie-epp, behind GIE's processing mode, which it needs)."""
    from prefixroute.bench.gateway import GIE_GATEWAY

    port = args.base_port
    if not args.no_epp:
        pickers: list[tuple[str, dict[str, str], dict[str, Any]]] = [("envoy+epp", env, {})]
        if args.baseline_tree is not None:
            pickers.append(("envoy+epp@baseline", {n: e for n, _, e in variants}["prefixroute@baseline"], {}))
        if args.full_duplex:
            pickers += [(f"{name}/full-duplex", child_env, GIE_GATEWAY) for name, child_env, _ in pickers]
        for i, (name, child_env, options) in enumerate(pickers):
            epp_port = port + 30 + 4 * i
            started.targets[name], started.groups[name] = _gateway_target(
                name.replace("envoy+", "").replace("/", "-"), _epp_command(epp_port, members, args.strategy),
                epp_port, epp_port + 1, members, layout, work, child_env, started.processes, options,
            )  # fmt: skip
    if args.grpc_floor:
        floor_port = port + 60
        floor = [sys.executable, "-m", "prefixroute.bench.router_cost.grpc_floor", str(floor_port), ",".join(members)]
        started.targets["envoy+grpc-floor"], started.groups["envoy+grpc-floor"] = _gateway_target(
            "grpc-floor", floor, floor_port, floor_port + 1, members, layout, work, env, started.processes, {}
        )
    if args.gie_epp:
        from prefixroute.bench.gateway import gie_epp_command

        epp_port = port + 50
        command, gie_env = gie_epp_command(args.gie_epp, args.gie_pool, members[0].rsplit(":", 1)[-1], epp_port)
        started.targets["envoy+gie-epp"], started.groups["envoy+gie-epp"] = _gateway_target(  # it takes epp_port to +3
            "gie-epp",
            command,
            epp_port,
            epp_port + 5,
            members,
            layout,
            work,
            {**env, **gie_env},
            started.processes,
            GIE_GATEWAY,
        )


def _start_targets(
    args: argparse.Namespace,
    members: list[str],
    given: bool,
    model_dir: Path,
    layout: Layout,
    work: Path,
    env: dict[str, str],
    started: Started,
) -> None:
    """The backend (unless --members), our routers and their variants, sglang-router and the
    gateways, each ready before the next starts."""
    if not given:
        port = args.base_port
        backend = _start(
            "backend",
            [sys.executable, "-m", "prefixroute.bench.router_cost.backend", str(port), str(port + 1)],
            layout.backend_cpu,
            work,
            env,
        )
        started.processes.append(backend)
        _wait_ready(members[0], backend)
    variants = _start_routers(args, members, layout, work, env, started)
    _start_peer(args, members, model_dir, layout, work, env, started)
    _start_gateways(args, members, variants, layout, work, env, started)


def _print_plan(args: argparse.Namespace, layout: Layout, work: Path) -> None:
    print(f"router-bench: {args.seconds:.0f} s per run; {layout.describe()}")
    print(
        f"closed loop: {args.connections} connections; paced: {args.paced_connections} connections "
        f"offering about {args.rate:.0f} req/s; logs in {work}"
    )
    print(
        f"each figure is the median of {args.repeat} rounds; targets alternate within a round, "
        "so noise from other work on the machine falls on all of them alike"
    )


def round_line(closed: Row, paced: Row) -> str:
    """One target's closed-loop and paced figures in one round, as printed while the run goes."""
    c, p = closed.result, paced.result
    return (
        f"  round {closed.round + 1} {'stream' if closed.stream else 'plain '} {closed.target:20} "
        f"{c.rate:6.0f} req/s{_cpu_text(closed.cpu_us)}   paced {p.rate:4.0f} req/s "
        f"p50 {p.p50_ms:6.3f} ms p99 {p.p99_ms:6.3f} ms   errors {c.errors + p.errors}"
    )


def _measure_target(
    args: argparse.Namespace,
    name: str,
    url: str,
    group: int | None,
    script: Path,
    stream: bool,
    round_: int,
    cpu: str | None,
) -> tuple[Row, Row]:
    """One target's closed-loop and paced runs in one round."""
    endpoint = url + "/v1/completions"
    closed, closed_cpu = _measured(
        group, endpoint, script, seconds=args.seconds, connections=args.connections, stream=stream, cpu=cpu
    )
    paced, paced_cpu = _measured(
        group,
        endpoint,
        script,
        seconds=args.seconds,
        connections=args.paced_connections,
        rate=args.rate,
        stream=stream,
        cpu=cpu,
    )
    return Row(name, stream, "closed", closed, round_, closed_cpu), Row(name, stream, "paced", paced, round_, paced_cpu)


def _measure(args: argparse.Namespace, started: Started, script: Path, cpu: str | None) -> list[Row]:
    """Every target, plain then streamed: a warm-up, then --repeat rounds in which the targets
    take turns, each round's figures printed as they come."""
    rows: list[Row] = []
    for stream in [False] if args.no_stream else [False, True]:
        for url in started.targets.values():  # warm-up: connections, caches, the peer's tree
            run_wrk(url + "/v1/completions", script, seconds=1, connections=args.connections, stream=stream, cpu=cpu)
        for round_ in range(args.repeat):
            for name, url in started.targets.items():
                group = started.groups.get(name)
                closed, paced = _measure_target(args, name, url, group, script, stream, round_, cpu)
                rows += [closed, paced]
                print(round_line(closed, paced), flush=True)
    return rows


def _print_precise_costs() -> None:
    """What precise mode costs besides the request path, measured in this process."""
    from prefixroute.bench.router_cost.precise_cost import event_cost, tokenize_cost, turn_cost
    from prefixroute.routing import kv_native

    events = event_cost()
    reader = (
        "the compiled reader" if kv_native.AVAILABLE else "the Python reader (PREFIXROUTE_NATIVE_KV=0 or not built)"
    )
    print(
        f"\nprecise mode's events (8 engines' streams, from their bytes into one router's follower and index, "
        f"{reader}): "
        f"{events['stored_us_per_block']:.2f} us CPU per stored block, "
        f"{events['removed_us_per_block']:.2f} us per removed block "
        f"({events['removed_one_by_one_us_per_block']:.2f} us removed one event each, as vLLM sends them); "
        f"{events['bytes_per_indexed_block']:.0f} bytes of router memory per indexed block"
    )
    keying = tokenize_cost(ensure_model_dir())
    print(
        f"precise mode's keys at {keying['prompt_tokens']:.0f}-token prompts (CPU ms, median): tokenize a "
        f"completion {keying['tokenize_completion_ms']:.2f}, render and tokenize a chat "
        f"{keying['tokenize_chat_ms']:.2f}, token-block keys {keying['token_keys_ms']:.2f}; "
        f"approximate keys of the same completion {keying['approximate_keys_ms']:.2f}; the live bench's 1.5 kB "
        f"prompt {keying['bench_prompt_whole_ms']:.3f} whole, {keying['bench_prompt_new_question_ms']:.3f} with its "
        f"prefix in the token store and a new question"
    )
    turns = turn_cost(ensure_model_dir())
    print(
        f"a chat's turn after the previous one was seen, at {turns['prompt_tokens']:.0f}-token prompts "
        f"({turns['new_tokens_per_turn']:.0f} new tokens a turn): decision p50 {turns['store_decision_ms']:.2f} ms "
        f"({turns['store_decision_cpu_ms']:.2f} ms CPU) with the token store, "
        f"{turns['whole_decision_ms']:.2f} ms ({turns['whole_decision_cpu_ms']:.2f} ms CPU) tokenizing it whole"
    )


def host_load_line(before: float, after: float) -> str:
    """The machine's 1-minute load average around the measurement: the ratios move with it
    (on 2 cores the CPU ratio against sglang-router read 1.23-1.29x at load 2-7 and
    1.32-1.37x at 8-10), so a figure that gates a goal is read beside it."""
    cores = os.cpu_count() or 1
    return f"host load (1-minute average, {cores} cores): {before:.2f} before the rounds, {after:.2f} after"


def rows_json(rows: list[Row]) -> list[dict[str, Any]]:
    """Every measured run as --json writes it: wrk's figures, the achieved rate, which target,
    stream or not, mode and round, and the target's CPU per request."""
    return [
        {
            **asdict(r.result),
            "target": r.target,
            "stream": r.stream,
            "mode": r.mode,
            "rate": r.result.rate,
            "round": r.round,
            "cpu_us_per_request": r.cpu_us,
        }
        for r in rows
    ]


def main(args: argparse.Namespace) -> int:
    wrk_path()
    layout = choose_layout()
    work = Path(tempfile.mkdtemp(prefix="router-bench-"))
    script = write_script(work)
    model_dir = ensure_model_dir()
    members, given = bench_members(args.members, args.base_port)
    if args.gie_epp and not (given and args.gie_pool):
        raise SystemExit("router-bench: --gie-epp needs --members and --gie-pool (python -m e2e.peers router-bench)")
    env = dict(os.environ, PREFIXROUTE_BENCH_MODEL_DIR=str(model_dir))
    started = Started({"direct": members[0]})
    try:
        _start_targets(args, members, given, model_dir, layout, work, env, started)
        _print_plan(args, layout, work)
        load_before = os.getloadavg()[0]
        rows = _measure(args, started, script, layout.load_cpu)
        _report(rows)
        print(host_load_line(load_before, os.getloadavg()[0]))
        if args.precise:
            _print_precise_costs()
        if args.json:
            args.json.write_text(json.dumps(rows_json(rows), indent=1))
    finally:
        for process in reversed(started.processes):
            process.stop()
    return 0


def median_result(results: list[LoadResult]) -> LoadResult:
    """Field by field median over rounds (each field its own median)."""

    def mid(values: list[float]) -> float:
        return statistics.median(values)

    return LoadResult(
        requests=round(mid([r.requests / r.seconds for r in results])),
        seconds=1.0,
        p50_ms=mid([r.p50_ms for r in results]),
        p99_ms=mid([r.p99_ms for r in results]),
        mean_ms=mid([r.mean_ms for r in results]),
        errors=sum(r.errors for r in results),
    )


def _cpu_text(cpu_us: float | None) -> str:
    return f" {cpu_us:5.0f} µs CPU/req" if cpu_us is not None else " " * 17


def _spread(values: list[float]) -> str:
    """The median of per-round figures and their range, e.g. '0.64 (0.58-0.71)'."""
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def _report(rows: list[Row]) -> None:
    def get(target: str, stream: bool, mode: str) -> LoadResult | None:
        found = [r.result for r in rows if (r.target, r.stream, r.mode) == (target, stream, mode)]
        return median_result(found) if found else None

    def per_round(target: str, stream: bool, mode: str) -> dict[int, Row]:
        return {r.round: r for r in rows if (r.target, r.stream, r.mode) == (target, stream, mode)}

    def round_ratios(ours: str, base: str, stream: bool, cpu: bool = False) -> list[float]:
        """ours / base round by round (the two ran minutes apart at most, under the same noise)."""
        a, b = per_round(ours, stream, "closed"), per_round(base, stream, "closed")
        out = []
        for i in sorted(a.keys() & b.keys()):
            if cpu:
                x, y = a[i].cpu_us, b[i].cpu_us
                if x and y:
                    out.append(x / y)
            elif b[i].result.rate:
                out.append(a[i].result.rate / b[i].result.rate)
        return out

    def cpu_median(target: str, stream: bool) -> float | None:
        found = [r.cpu_us for r in rows if (r.target, r.stream, r.mode) == (target, stream, "closed")]
        values = [c for c in found if c is not None]
        return statistics.median(values) if values else None

    print("\nmedians:")
    for stream in sorted({r.stream for r in rows}):
        for target in dict.fromkeys(r.target for r in rows):
            closed, paced = get(target, stream, "closed"), get(target, stream, "paced")
            assert closed is not None
            assert paced is not None
            print(
                f"  {'stream' if stream else 'plain '} {target:20} {closed.rate:6.0f} req/s"
                f"{_cpu_text(cpu_median(target, stream))}   "
                f"paced {paced.rate:4.0f} req/s p50 {paced.p50_ms:6.3f} ms p99 {paced.p99_ms:6.3f} ms"
            )

    print("\nratios (same backend, same run; median of the rounds' ratios and their range):")
    targets = list(dict.fromkeys(r.target for r in rows))
    routers = [t for t in targets if t != "direct"]
    has_peer = "sglang-router" in targets
    for stream in sorted({r.stream for r in rows}):
        label = "streamed" if stream else "non-streamed"
        paced_direct = get("direct", stream, "paced")
        assert paced_direct is not None
        print(f"  {label}:")
        for target in routers:
            paced = get(target, stream, "paced")
            assert paced is not None
            line = f"    {target:20} req/s / direct = {_spread(round_ratios(target, 'direct', stream))}"
            if has_peer and target != "sglang-router":
                line += f"   req/s / sglang-router = {_spread(round_ratios(target, 'sglang-router', stream))}"
                cpu = round_ratios(target, "sglang-router", stream, cpu=True)
                if cpu:
                    line += f"   CPU/req / sglang-router's = {_spread(cpu)}"
            if target.startswith("envoy+") and "prefixroute" in targets:  # a picker against our router
                line += f"   CPU/req / prefixroute's = {_spread(round_ratios(target, 'prefixroute', stream, cpu=True))}"
            print(line)
            print(
                f"    {'':20} added at ~{paced.rate:.0f} req/s: p50 +{paced.p50_ms - paced_direct.p50_ms:.3f} ms, "
                f"p99 +{paced.p99_ms - paced_direct.p99_ms:.3f} ms"
            )
            for picker in PICKER_BASELINES:  # a picker against GIE's and against the transport's floor
                if target.startswith("envoy+") and picker in targets and target != picker:
                    print(
                        f"    {'':20} CPU/req / {picker}'s = {_spread(round_ratios(target, picker, stream, cpu=True))}"
                    )
            base = "envoy+epp@baseline" if target.startswith("envoy+epp") else "prefixroute@baseline"
            if base in targets and target.startswith(base.split("@")[0]) and target != base:
                print(
                    f"    {'':20} req/s / baseline = {_spread(round_ratios(target, base, stream))}"
                    f"   CPU/req / baseline's = {_spread(round_ratios(target, base, stream, cpu=True))}"
                )
