"""`bench peers`: prefixroute's strategies and peer routers over one engine-sim fleet, one trace.

What it does, in one run:
1. installs `sglang-router` and `vllm-router` from PyPI into their own virtual
   environment under ~/.cache/prefixroute/peers (not the repo, not our venv);
2. builds the local model folder (a 32k byte-level BPE, see `engine_sim.model_dir`)
   and starts N engine-sims that report it as their model path, so no router ever
   reaches for a model hub;
3. for each target — `prefixroute router --strategy S` for our strategies,
   `sglang-router launch --policy P` and `vllm-router --policy P` — starts
   the router, waits until a completion goes through it, empties the engines'
   caches, replays the workload (`replay`), and stops the router;
4. optionally simulates our strategies on the same workload and engine
   settings, so the table shows simulation and live side by side.

Our router can run as N replicas (`--routers 1,2,4`: each count is a target of its own, N
router processes that take the requests in turn, as a Service spreads clients over a
router Deployment's pods) and in either mode (`--modes approximate,precise`: precise
routers follow every engine's KV events, which the engines then publish, each on its own
port, and key requests by the engines' tokenizer: with `--tokenizer auto`, the default, a
run with a precise target tokenizes with the 32k BPE folder (`engine_sim.model_dir`) on
both sides, so the router pays what a real model's tokenizer costs; `--tokenizer byte`
keeps engine-sim's free byte tokenizer). Its replicas share nothing, or (`--peers
off,all`: each a target of its own) tell each other their load and what they routed where
(`front.peers`: each replica publishes on a port of its own and follows the others').

What the peers need from a worker (engine-sim serves all of it):
- sglang-router: GET /health (startup and periodic checks), GET /server_info
  and /model_info (falling back to /get_server_info, /get_model_info) for the
  model and tokenizer paths; it also tries gRPC first (an HTTP/2 preface that
  engine-sim refuses with a 400, after which it uses HTTP).
- vllm-router: GET /health only; it routes OpenAI requests as they come.
sglang-router 0.3 has no consistent_hash policy; vllm-router's consistent_hash
keys on the whole request text unless a session header is sent.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from prefixroute.bench.errors import BenchError
from prefixroute.bench.local_fleet import events_config, router_command, start_engines
from prefixroute.bench.router_cost.peers import ensure_peers
from prefixroute.bench.seed_summary import (
    add_seeds_argument,
    check_seeds,
    drawn,
    print_seed_table,
    summarize,
    write_seed_json,
)
from prefixroute.cache_folder import cache_dir
from prefixroute.processes import Child


@dataclass(frozen=True)
class Target:
    label: str
    command: list[str]
    url: str
    # An Endpoint Picker target: `command` is the picker, whose ext_proc address this is, and
    # requests go through a real Envoy in front of it (`url` is Envoy's listener).
    epp: str | None = None
    env: dict[str, str] | None = None  # added to the environment the target starts with
    gateway: dict[str, Any] | None = None  # options of the Envoy in front of a picker (`start_gateway`)
    # further replicas of the router (command, url): the requests go to every url in turn
    replicas: tuple[tuple[list[str], str], ...] = ()

    @property
    def urls(self) -> list[str]:
        return [self.url, *(url for _, url in self.replicas)]


def add_peers_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--replicas", type=int, default=8, help="engine-sim processes to start")
    parser.add_argument("--base-port", type=int, default=18600, help="engines on base..base+N-1, routers above")
    parser.add_argument("--time-scale", type=float, default=1.0, help="engine-sim --time-scale (use with --speed)")
    parser.add_argument(
        "--ours",
        default="round-robin,least-load,prefix-hash,prefix-cache",
        help="prefixroute router strategies ('' for none)",
    )
    parser.add_argument(
        "--ours-flags",
        default="",
        help="extra `prefixroute router` flags for our targets, e.g. '--load-factor 8' "
        "(the simulation of --simulate uses the same flags)",
    )
    parser.add_argument("--sglang", default="cache_aware,round_robin", help="sglang-router policies ('' for none)")
    parser.add_argument(
        "--vllm-router",
        dest="vllm_router",
        default="cache_aware,consistent_hash,round_robin",
        help="vllm-router policies ('' for none)",
    )
    parser.add_argument(
        "--epp",
        default="prefix-cache",
        help="`prefixroute epp` strategies behind a real Envoy, as a GIE gateway calls it ('' for none)",
    )
    parser.add_argument(
        "--gie-epp",
        default=None,
        metavar="BINARY",
        help="GIE's reference Endpoint Picker (python -m e2e.build gie builds it) behind Envoy in GIE's processing "
        "mode (FULL_DUPLEX_STREAMED, which it needs); it finds the engines as pods through an API server: needs "
        "--gie-pool and --engines (python -m e2e.peers)",
    )
    parser.add_argument(
        "--gie-pool",
        default=None,
        metavar="NAMESPACE/SELECTOR",
        help="where the reference picker finds the engines' pods, e.g. bench/app=engine (with KUBECONFIG set)",
    )
    parser.add_argument(
        "--gie-refresh-ms",
        default="50",
        help="the reference picker's --refresh-metrics-interval in milliseconds, one target per value (50: GIE's "
        "default); engines time-scaled N times see its metrics N times staler in engine time, so 50/N is the "
        "same freshness as 50 ms on unscaled engines",
    )
    parser.add_argument(
        "--gie-profiles",
        default="default",
        help="the reference picker's scorings, one target per name: default (GIE's chart: queue 2, KV cache 2, "
        "prefix 3), prefix-only, load-only (queue and KV cache)",
    )
    parser.add_argument(
        "--engines",
        default=None,
        help="comma-separated base URLs of running engine-sims to use instead of starting --replicas of them",
    )
    parser.add_argument(
        "--routers",
        default="1",
        help="our router as N replicas taking the requests in turn, as a Service spreads them; a list runs each (1,2,4)",
    )
    parser.add_argument(
        "--modes",
        default="approximate",
        help="our router's modes: approximate (its own routing history) and/or precise (the engines' KV events)",
    )
    parser.add_argument(
        "--peers",
        default="off",
        help="what our router replicas tell each other: off (nothing) and/or all (their load and what they "
        "routed where, front.peers); a list runs each (off,all)",
    )
    parser.add_argument("--simulate", action="store_true", help="also simulate our strategies on the same workload")
    add_seeds_argument(parser)
    parser.add_argument("--skip-install", action="store_true", help="use the peers already in the cache venv")
    parser.add_argument("--run-dir", default=None, help="where process logs go (default: under the cache dir)")


def _split(text: str) -> list[str]:
    return [s.strip() for s in text.split(",") if s.strip()]


def router_counts(args: argparse.Namespace) -> list[int]:
    try:
        counts = [int(n) for n in _split(str(args.routers))]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise BenchError("--routers must be a comma-separated list of positive integers")
    return counts


def modes(args: argparse.Namespace) -> list[str]:
    found = _split(args.modes)
    if not found or any(m not in ("approximate", "precise") for m in found):
        raise BenchError("--modes takes approximate and/or precise")
    return found


def sharings(args: argparse.Namespace) -> list[str]:
    found = _split(args.peers)
    if not found or any(p not in ("off", "all") for p in found):
        raise BenchError("--peers takes off and/or all")
    return found


def peer_flags(ports: list[int], i: int) -> list[str]:
    """Replica `i`'s flags: it publishes on its own port and follows every other's."""
    others = ",".join(f"tcp://127.0.0.1:{p}" for j, p in enumerate(ports) if j != i)
    return ["--peer-port", str(ports[i]), "--peers", others]


def event_ports(args: argparse.Namespace, count: int) -> list[int]:
    """Each engine's KV event port (its replay port is the next one), above the routers' ports."""
    first = args.base_port + args.replicas + 400
    return [first + 2 * i for i in range(count)]


def precise_flags(args: argparse.Namespace, engines: list[str]) -> list[str]:
    """A precise router's flags for this fleet: the engines' tokenizer (--tokenizer, as
    `use_tokenizer` resolved it) and blocks, their events."""
    ports = event_ports(args, len(engines))
    return [
        "--mode", "precise", "--tokenizer", args.tokenizer, "--served-model", args.model,
        "--block-size", str(args.block_tokens),
        "--kv-events", ",".join(f"tcp://127.0.0.1:{p}" for p in ports),
        "--kv-events-replay", ",".join(f"tcp://127.0.0.1:{p + 1}" for p in ports),
    ]  # fmt: skip


def targets(args: argparse.Namespace, engines: list[str], model_path: str, bin_dir: Path | None) -> list[Target]:
    """Every target of the run, in the order they run: our routers, our pickers, GIE's reference
    picker, sglang-router, vllm-router; each on ports of its own above the engines'."""
    extra = shlex.split(args.ours_flags or "")
    port = args.base_port + args.replicas + 10
    ours, port = our_router_targets(args, engines, extra, port)
    pickers, port = epp_targets(args, engines, extra, port)
    reference, port = gie_epp_targets(args, engines, port)
    sglang, port = sglang_targets(args, engines, model_path, bin_dir, port)
    vllm, port = vllm_router_targets(args, engines, bin_dir, port)
    return [*ours, *pickers, *reference, *sglang, *vllm]


def _flags_label(extra: list[str]) -> str:
    """Our extra flags as they appear in a target's label."""
    return f" {' '.join(extra)}" if extra else ""


def our_router_targets(
    args: argparse.Namespace, engines: list[str], extra: list[str], port: int
) -> tuple[list[Target], int]:
    """`prefixroute router` for each strategy, mode and replica count, from `port` on; the
    targets and the next free port. The label names the mode and count when either varies."""
    out: list[Target] = []
    counts, our_modes, shared = router_counts(args), modes(args), sharings(args)
    many = len(counts) > 1 or our_modes != ["approximate"]
    for strategy in _split(args.ours):
        for mode in our_modes:
            for count in counts:
                # One replica has no peers: it runs once, whatever the sharing.
                for sharing in shared if count > 1 else shared[:1]:
                    flags = ["--backends", ",".join(engines), "--strategy", strategy, "--log-level", "WARNING"]
                    if mode == "precise":
                        flags += precise_flags(args, engines)
                    peer_ports = [port + count + i for i in range(count)]
                    commands = [
                        (
                            router_command(
                                port + i, *flags, *extra, *(peer_flags(peer_ports, i) if sharing == "all" else [])
                            ),
                            f"http://127.0.0.1:{port + i}",
                        )
                        for i in range(count)
                    ]
                    label = f"prefixroute/{strategy}{_flags_label(extra)}" + (f" {mode} x{count}" if many else "")
                    if count > 1 and shared != ["off"]:
                        label += f" peers:{sharing}"
                    (first, url), *rest = commands
                    out.append(Target(label, first, url, replicas=tuple(rest)))
                    port += max(2, 2 * count if sharing == "all" else count)
    return out, port


def epp_targets(args: argparse.Namespace, engines: list[str], extra: list[str], port: int) -> tuple[list[Target], int]:
    """`prefixroute epp` for each strategy behind Envoy (the picker on `port`, Envoy on the next)."""
    out: list[Target] = []
    for strategy in _split(args.epp):
        out.append(
            Target(
                f"prefixroute-epp/{strategy}{_flags_label(extra)} (envoy)",
                [sys.executable, "-m", "prefixroute", "epp", "--host", "127.0.0.1", "--port", str(port),
                 "--health-port", "0", "--metrics-port", "0", "--backends", ",".join(engines),
                 "--strategy", strategy, "--log-level", "WARNING", *extra],
                f"http://127.0.0.1:{port + 1}",
                epp=f"127.0.0.1:{port}",
            )
        )  # fmt: skip
        port += 2
    return out, port


def gie_epp_targets(args: argparse.Namespace, engines: list[str], port: int) -> tuple[list[Target], int]:
    """GIE's reference picker behind Envoy, one per scoring profile and metrics refresh interval
    (with --gie-epp); each takes six ports."""
    if not args.gie_epp:
        return [], port
    from prefixroute.bench.gateway import gie_epp_command

    if not args.gie_pool:
        raise BenchError("--gie-epp needs --gie-pool NAMESPACE/SELECTOR (the engines' pods)")
    from prefixroute.bench.gateway import GIE_GATEWAY, GIE_PROFILES

    out: list[Target] = []
    for profile in _split(args.gie_profiles):
        if profile not in GIE_PROFILES:
            raise BenchError(f"--gie-profiles: {profile!r} is not one of {', '.join(GIE_PROFILES)}")
        for refresh in _split(args.gie_refresh_ms):
            command, env = gie_epp_command(
                args.gie_epp, args.gie_pool, engines[0].rsplit(":", 1)[-1], port, GIE_PROFILES[profile]
            )
            command.append(f"--refresh-metrics-interval={int(refresh)}ms")
            label = f"gie-epp/{profile}" + ("" if refresh == "50" else f" refresh {refresh}ms")
            url, epp = f"http://127.0.0.1:{port + 1}", f"127.0.0.1:{port}"
            out.append(Target(f"{label} (envoy)", command, url, epp, env, gateway=GIE_GATEWAY))
            port += 6
    return out, port


def sglang_targets(
    args: argparse.Namespace, engines: list[str], model_path: str, bin_dir: Path | None, port: int
) -> tuple[list[Target], int]:
    """sglang-router for each policy (its metrics on the port after its own)."""
    out: list[Target] = []
    for policy in _split(args.sglang):
        assert bin_dir is not None
        command = [
            str(bin_dir / "sglang-router"), "launch", "--host", "127.0.0.1", "--port", str(port),
            "--worker-urls", *engines, "--policy", policy, "--model-path", model_path,
            "--tokenizer-path", model_path, "--prometheus-port", str(port + 1), "--log-level", "warn",
        ]  # fmt: skip
        out.append(Target(f"sglang-router/{policy}", command, f"http://127.0.0.1:{port}"))
        port += 2
    return out, port


def vllm_router_targets(
    args: argparse.Namespace, engines: list[str], bin_dir: Path | None, port: int
) -> tuple[list[Target], int]:
    """vllm-router for each policy (its metrics on the port after its own)."""
    out: list[Target] = []
    for policy in _split(args.vllm_router):
        assert bin_dir is not None
        command = [
            str(bin_dir / "vllm-router"), "--host", "127.0.0.1", "--port", str(port), "--worker-urls", *engines,
            "--policy", policy, "--prometheus-port", str(port + 1), "--log-level", "warning",
        ]  # fmt: skip
        out.append(Target(f"vllm-router/{policy}", command, f"http://127.0.0.1:{port}"))
        port += 2
    return out, port


EVENT_COUNTS = "prefixroute_router_kv_events_total"
EVENT_PRECISE = "prefixroute_router_kv_events_precise"
EVENT_BEHIND = "prefixroute_router_kv_events_behind"
EVENT_LAG = "prefixroute_router_kv_event_lag_seconds"


def event_health(texts: list[str]) -> dict[str, float]:
    """What precise routers said of the engines' event streams after a run, summed over
    replicas and members: each counter of `prefixroute_router_kv_events_total` by kind,
    `not_precise`, the members routed from history at the end, `behind_now`, those the router
    was behind on at the end, and the live messages' lag, publish to applied (`lag_p50`,
    `lag_p99`, `lag_mean`, as `peer_health` reads its lag). A live precise row is only
    precise if its streams kept up (no stale, resyncs, skipped blocks or behind on a loaded host)."""
    from prefixroute.bench import prom

    out: dict[str, float] = {"not_precise": 0.0}
    for text in texts:
        found = prom.samples(text)
        for kind, value in prom.by_label(found, EVENT_COUNTS, "kind").items():
            out[kind] = out.get(kind, 0.0) + value
        out["not_precise"] += sum(1 for s in found if s.name == EVENT_PRECISE and s.value == 0.0)
        behind = sum(1 for s in found if s.name == EVENT_BEHIND and s.value == 1.0)
        if behind:
            out["behind_now"] = out.get("behind_now", 0.0) + behind
    out.update(_lag_figures(texts, EVENT_LAG))
    return out


PEER_REPORTS = "prefixroute_router_peer_reports_total"
SIMULATED_PEER_DELAY_S = 0.005  # --simulate: how late a report reaches the other replicas (bench simulate's default)
PEER_LAG = "prefixroute_router_peer_report_lag_seconds"


def peer_health(texts: list[str]) -> dict[str, float]:
    """What router replicas said of each other after a run, summed over replicas: each counter
    of `prefixroute_router_peer_reports_total` by kind, `heard` (the peers each counted at the
    end), and the reports' lag (`lag_p50`, `lag_p99`, `lag_mean`: `_lag_figures`)."""
    from prefixroute.bench import prom

    out: dict[str, float] = {"heard": 0.0}
    for text in texts:
        found = prom.samples(text)
        for kind, value in prom.by_label(found, PEER_REPORTS, "kind").items():
            out[kind] = out.get(kind, 0.0) + value
        out["heard"] += prom.total(found, "prefixroute_router_peers")
    out.update(_lag_figures(texts, PEER_LAG))
    return out


def _lag_figures(texts: list[str], name: str) -> dict[str, float]:
    """A lag histogram summed over replicas: `lag_p50` and `lag_p99` (the upper bound of the
    bucket where that share of the observations fell) and `lag_mean`; none when it is empty."""
    from prefixroute.bench import prom

    buckets: dict[float, float] = {}
    lag_sum = lag_count = 0.0
    for text in texts:
        found = prom.samples(text)
        for sample in found:
            if sample.name == name + "_bucket":
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + sample.value
        lag_sum += prom.total(found, name + "_sum")
        lag_count += prom.total(found, name + "_count")
    if not lag_count:
        return {}
    out = {"lag_mean": lag_sum / lag_count}
    for figure, share in (("lag_p50", 0.5), ("lag_p99", 0.99)):
        out[figure] = next((b for b in sorted(buckets) if buckets[b] >= share * lag_count), float("inf"))
    return out


def _read_metrics(urls: list[str]) -> list[str]:
    import urllib.request

    texts = []
    for url in urls:
        with urllib.request.urlopen(url + "/metrics", timeout=30) as resp:  # our own routers
            texts.append(resp.read().decode())
    return texts


def _start_gateway(target: Target, engines: list[str], run_dir: Path) -> Any:
    """Envoy as a GIE gateway in front of the target's picker, routing to the same engines."""
    from prefixroute.bench.gateway import start_gateway
    from prefixroute.epp.protocol import endpoint_of

    assert target.epp is not None
    listen = target.url.split("://", 1)[1]
    host, port = listen.rsplit(":", 1)
    return start_gateway(
        f"{target.label} envoy", listen=listen, admin=f"{host}:{int(port) + 1000}", epp=target.epp,
        endpoints=[endpoint_of(e) for e in engines], log_dir=run_dir, **(target.gateway or {}),
    )  # fmt: skip


def _engine_flags(args: argparse.Namespace) -> list[str]:
    return [
        "--tokenizer",
        args.tokenizer,
        "--block-tokens",
        str(args.block_tokens),
        "--kv-blocks",
        str(args.kv_blocks),
        "--max-running",
        str(args.max_running),
        "--max-model-len",
        str(args.max_model_len),
        "--prefill-tokens-per-s",
        str(args.prefill_tokens_per_s),
        "--decode-tokens-per-s",
        str(args.decode_tokens_per_s),
    ]


def run_peers(args: argparse.Namespace) -> int:
    from prefixroute.bench.sources import emit, load_workload
    from prefixroute.engine_sim.model_dir import ensure_model_dir

    if args.replicas < 1:
        raise BenchError("--replicas must be at least 1")
    seeds = check_seeds(args)
    if len(seeds) > 1 and args.simulate:
        raise BenchError("--simulate runs beside one workload; leave out --seeds (bench simulate --seeds draws them)")
    needs_peers = bool(_split(args.sglang) or _split(args.vllm_router))
    bin_dir = ensure_peers(install=not args.skip_install) if needs_peers else None
    model_path = str(ensure_model_dir())
    use_tokenizer(args)
    requests = load_workload(args) if len(seeds) == 1 else []  # several: each seed's is drawn in turn
    if args.gie_epp and args.time_scale > 1:
        print(gie_time_scale_note(args), file=sys.stderr)
    run_dir = Path(args.run_dir) if args.run_dir else cache_dir() / "runs" / time.strftime("%Y%m%d-%H%M%S")
    engines, fleet = engine_fleet(args, model_path, run_dir)
    try:
        if len(seeds) > 1:
            return _replay_seeds(args, seeds, (engines, model_path, bin_dir), run_dir)
        results, event_reports = _replay_targets(args, requests, (engines, model_path, bin_dir), run_dir)
    finally:
        for proc in fleet:
            proc.stop()
    if args.simulate:
        results.extend(_simulate_ours(args, requests))
    meta = run_meta(args, len(requests), run_dir, event_reports)
    if args.baseline is None:
        args.baseline = default_baseline([r.strategy for r in results])
    emit(results, args, meta, f"live: {meta['source']}, {len(requests)} requests, {args.replicas} engine-sims")
    return 0


_Fleet = tuple[list[str], str, Path | None]  # the engines' URLs, the model's folder, the peers' binaries


def _replay_targets(
    args: argparse.Namespace, requests: list[Any], fleet: _Fleet, run_dir: Path
) -> tuple[list[Any], dict[str, dict[str, Any]]]:
    """Every target in turn on `requests`: their results, and what each said of its streams."""
    engines, model_path, bin_dir = fleet
    results = []
    event_reports: dict[str, dict[str, Any]] = {}
    for target in targets(args, engines, model_path, bin_dir):
        result, health = _run_target(args, target, engines, requests, run_dir)
        results.append(result)
        if health is not None:
            event_reports[target.label] = health
    return results, event_reports


def _replay_seeds(args: argparse.Namespace, seeds: list[int], fleet: _Fleet, run_dir: Path) -> int:
    """Every target on each seed's workload (a seed's targets one after another, then the next
    seed's), then the means over the seeds (`bench.seed_summary`); each seed's logs and its
    targets' summaries (summaries.json) in its folder."""
    from prefixroute.bench.sources import load_workload

    runs: list[list[dict[str, Any]]] = []
    reports: dict[str, dict[str, Any]] = {}
    requests = 0
    for seed in seeds:
        workload = load_workload(drawn(args, seed))
        requests = max(requests, len(workload))
        seed_dir = run_dir / f"seed-{seed}"
        seed_dir.mkdir(parents=True, exist_ok=True)
        results, event_reports = _replay_targets(args, workload, fleet, seed_dir)
        runs.append([r.summary() for r in results])
        # written as each seed ends: a target failing on a later seed loses none run before it
        (seed_dir / "summaries.json").write_text(json.dumps(runs[-1], indent=1) + "\n")
        reports.update({f"{label} seed {seed}": report for label, report in event_reports.items()})
    baseline = args.baseline or default_baseline([s["strategy"] for s in runs[0]])
    rows = summarize(runs, baseline)
    meta = run_meta(args, requests, run_dir, reports)
    print(f"live: {meta['source']}, {args.replicas} engine-sims")
    print_seed_table(rows, seeds[0], sys.stdout)
    if args.json_out:
        write_seed_json(args.json_out, meta, seeds, rows, runs)
    return 0


def use_tokenizer(args: argparse.Namespace) -> str:
    """Resolve --tokenizer once for the whole run (engines, precise routers, the simulation):
    `auto` is the 32k BPE when a target of ours is precise, else engine-sim's byte tokenizer."""
    from prefixroute.engine_sim.cli import tokenizer_source

    precise = "precise" in modes(args) and bool(_split(args.ours))
    args.tokenizer = tokenizer_source(args.tokenizer, precise)
    print(f"engines and precise routers tokenize with {args.tokenizer}", file=sys.stderr)
    return str(args.tokenizer)


def gie_time_scale_note(args: argparse.Namespace) -> str:
    """Why GIE's reference picker is compared at --time-scale 1: its refresh is in wall time."""
    return (
        f"note: engines {args.time_scale:g}x faster than wall time make GIE's reference picker's metrics (refreshed "
        f"every {args.gie_refresh_ms} ms of wall time) {args.time_scale:g}x staler in engine time, and every ms "
        f"a front adds counts {args.time_scale:g}x; compare it at --time-scale 1 (docs/benchmarks.md)"
    )


def engine_fleet(args: argparse.Namespace, model_path: str, run_dir: Path) -> tuple[list[str], list[Child]]:
    """The engines' URLs, and the processes this command started for them: --replicas
    engine-sims (each publishing KV events when a target is precise), or none with --engines."""
    precise = "precise" in modes(args) and bool(_split(args.ours))
    if args.engines:  # engines someone else runs (pods of the local cluster, for GIE's reference picker)
        if precise:
            raise BenchError("--modes precise needs the engines this command starts (not --engines)")
        engines = _split(args.engines)
        args.replicas = len(engines)
        return engines, []
    per_engine = None
    if precise:  # every engine publishes its KV events on a port of its own
        ports = event_ports(args, args.replicas)
        per_engine = [["--kv-events-config", events_config(ports[i], i)] for i in range(args.replicas)]
    return start_engines(
        args.replicas,
        args.base_port,
        args.model,
        model_path,
        args.time_scale,
        _engine_flags(args),
        run_dir,
        per_engine=per_engine,
    )


def _run_target(
    args: argparse.Namespace, target: Target, engines: list[str], requests: list[Any], run_dir: Path
) -> tuple[Any, dict[str, Any] | None]:
    """One target from start to stop: its processes (and Envoy in front of a picker), a
    completion through each replica, the replay; its result, and what its routers said of the
    engines' event streams (a precise target) and of each other (replicas with peers)."""
    from prefixroute.bench.replay import replay

    probe = json.dumps({"model": args.model, "prompt": "ping", "max_tokens": 1}).encode()
    log = run_dir / f"{target.label.replace('/', '_')}.log"
    env = {**os.environ, **target.env} if target.env else None
    router = Child(target.label, target.command, log, env=env).start()
    more = [
        Child(f"{target.label} #{i + 2}", command, log.with_name(f"{log.stem}.{i + 2}.log"), env=env).start()
        for i, (command, _) in enumerate(target.replicas)
    ]
    gateway = None
    try:
        if target.epp is not None:
            gateway = _start_gateway(target, engines, run_dir)
        router.wait_http(target.url + "/v1/completions", body=probe, timeout=120)
        for child, (_, url) in zip(more, target.replicas):
            child.wait_http(url + "/v1/completions", body=probe, timeout=120)
        print(f"replaying {len(requests)} requests through {target.label}", file=sys.stderr)
        result = asyncio.run(
            replay(
                requests,
                target.urls,
                engines,
                label=target.label,
                model=args.model,
                time_scale=args.time_scale,
                reset=True,
            )
        )
        health: dict[str, Any] | None = None
        words = target.label.split()
        if "precise" in words or "peers:all" in words:
            texts = _read_metrics(target.urls)
            health = {}
            if "precise" in words:
                health["kv_events"] = event_health(texts)
                print(f"{target.label}: KV event streams {json.dumps(health['kv_events'], sort_keys=True)}",
                      file=sys.stderr)  # fmt: skip
            if "peers:all" in words:
                health["peers"] = peer_health(texts)
                print(f"{target.label}: peers {json.dumps(health['peers'], sort_keys=True)}", file=sys.stderr)
        return result, health
    finally:
        if gateway is not None:
            gateway.stop()
        for child in more:
            child.stop()
        router.stop()


def run_meta(
    args: argparse.Namespace, requests: int, run_dir: Path, event_reports: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """What the results file says of the run besides the results."""
    from prefixroute.engine_model import tokenization

    meta: dict[str, Any] = {
        "mode": "peers",
        "tokenizer": tokenization.describe(args.tokenizer),
        "source": args.trace or f"synthetic:{args.synthetic}",
        "requests": requests,
        "replicas": args.replicas,
        "speed": args.speed,
        "time_scale": args.time_scale,
        "engine_flags": _engine_flags(args),
        "logs": str(run_dir),
    }
    kv = {label: r["kv_events"] for label, r in event_reports.items() if "kv_events" in r}
    peers = {label: r["peers"] for label, r in event_reports.items() if "peers" in r}
    if kv:
        meta["kv_events"] = kv
    if peers:
        meta["peers"] = peers
    return meta


def default_baseline(labels: list[str]) -> str | None:
    """The target the others are compared with when --baseline is not given: our round-robin."""
    return next((x for x in labels if x.startswith("prefixroute/round-robin")), None)


def _simulate_ours(args: argparse.Namespace, requests: list[Any]) -> list[Any]:
    from prefixroute.bench.simulate import RouterTime, peer_sharing, prepare, simulate
    from prefixroute.engine_sim.cli import engine_config
    from prefixroute.routing.peers import DEFAULT_INTERVAL_S

    engine = engine_config(args, args.model)
    extra = shlex.split(args.ours_flags or "")
    strategies = _split(args.ours)
    if not strategies:
        return []
    # Live arrivals are in wall seconds against engines running time_scale times faster;
    # the simulation runs in engine seconds, so the same schedule is time_scale times longer.
    in_engine_time = [replace(r, at=r.at * args.time_scale) for r in requests]
    # The flags are the same for every strategy, so one reading of the bodies serves them all.
    our_modes, counts = modes(args), router_counts(args)
    many = len(counts) > 1 or our_modes != ["approximate"]
    prepared = prepare(
        in_engine_time, router_routing_config(strategies[0], extra), engine, precise="precise" in our_modes
    )
    shared = sharings(args)
    # The live TTFTs beside hold the router's wall time, time_scale-fold in engine time: so do these.
    charged = RouterTime(None, args.time_scale)
    out = []
    for strategy in strategies:
        routing = router_routing_config(strategy, extra)
        for mode in our_modes:
            for count in counts:
                for sharing in shared if count > 1 else shared[:1]:
                    peers = peer_sharing(sharing, SIMULATED_PEER_DELAY_S, DEFAULT_INTERVAL_S)
                    result = simulate(
                        prepared, strategy, args.replicas, routing, engine, routers=count, mode=mode, peers=peers,
                        router_time=charged,
                    )  # fmt: skip
                    label = f"simulated/{strategy}{' ' + ' '.join(extra) if extra else ''}"
                    result.strategy = label + (f" {mode} x{count}" if many else "")
                    if count > 1 and shared != ["off"]:
                        result.strategy += f" peers:{sharing}"
                    out.append(result)
    return out


def router_routing_config(strategy: str, flags: list[str]) -> Any:
    """The RoutingConfig `prefixroute router --strategy S FLAGS` runs with, read by the router's
    own argument parser, so the simulation and the live router are configured identically."""
    from prefixroute.router.cli import add_router_arguments, settings_from_args

    parser = argparse.ArgumentParser(prog="prefixroute router")
    add_router_arguments(parser)
    parsed = parser.parse_args(["--backends", "http://sim", "--strategy", strategy, *flags])
    return settings_from_args(parsed).routing
