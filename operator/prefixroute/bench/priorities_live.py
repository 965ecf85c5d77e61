"""`bench priorities --live`: the same workload and targets, through real processes on loopback.

`--replicas` engine-sims (`prefixroute engine-sim`: the engine model the simulation runs, with
the same flags) start once. For each load and target our router starts in front of them,
with an API-key file that gives each tenant its key — with bands, the key's `priority` and
`ttftObjectiveMs`; without, neither — and fair sharing at `--max-in-flight-per-member` where
the target has admission. `bench.replay` then sends the workload through it as clients
would, each tenant with its own key, and the router stops.

Time: the engines run `--time-scale` times faster than engine time, so arrivals, the bands'
TTL, the clients' patience and the keys' objectives are divided by it (the router measures
and decides in wall time), and TTFTs are multiplied back: the table is in engine seconds, as
the simulation's is. What the scale cannot shrink is the work of the processes themselves
(the router's, the clients'), which it magnifies in engine time; a scale near 1 keeps it honest.

Measured per request at the client: its first text (TTFT), or why it got none — a 503 whose
`X-Prefixroute-Shed-Reason` says it was shed (or waited past its band's TTL), or the client
hung up after `--patience` without a first token (the router then aborts it in its engine).
The hit rate is the engines' own: their prefix-cache counters across the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixroute.bench import local_fleet, mixed
from prefixroute.bench.fleet_sim import CLIENT_GONE
from prefixroute.bench.local_fleet import engine_model_flags, running_router
from prefixroute.bench.priority_runs import FAILED, ClassTally, Settings, Tally, Target
from prefixroute.bench.replay import Outcome, replay
from prefixroute.bench.workload import BenchRequest, compress
from prefixroute.tenancy.bands import SHED_REASONS
from prefixroute.tenancy.keys import key_digest


@dataclass(frozen=True)
class LiveFleet:
    """Engine-sims already answering, and where each target's router goes."""

    engines: list[str]
    router_port: int
    time_scale: float
    model: str
    log_dir: Path


def key_entries(
    classes: Sequence[mixed.TenantClass], bands: bool, time_scale: float
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The key file's entries (digests only) and each tenant's key, fresh for every router.
    With bands, each key carries its class's priority and its objective in wall milliseconds."""
    keys = {c.name: f"sk-bench-{c.name}-{secrets.token_urlsafe(12)}" for c in classes}
    entries: list[dict[str, Any]] = []
    for c in classes:
        entry: dict[str, Any] = {"sha256": key_digest(keys[c.name]), "tenant": c.name}
        if bands:
            entry["priority"] = c.priority
            if c.objective_ms is not None:
                entry["ttftObjectiveMs"] = max(1, round(c.objective_ms / time_scale))
        entries.append(entry)
    return entries, keys


def router_flags(
    target: Target, settings: Settings, engines: Sequence[str], key_file: Path, time_scale: float
) -> list[str]:
    """`prefixroute router`'s flags for one target: its strategy, the keys, and fair sharing with
    its TTL (in wall seconds) where the target has admission. Queues as deep as the simulation's
    (unbounded there): a refusal then always means the band said so, never a full queue."""
    flags = ["--backends", ",".join(engines), "--strategy", target.strategy, "--api-keys", str(key_file)]
    if target.admission:
        flags += ["--max-in-flight-per-member", str(settings.per_member), "--max-waiting", "1000000"]
        flags += ["--max-wait-seconds", f"{max(0.1, settings.max_wait_seconds / time_scale):g}"]
    return flags


def router_metrics(url: str) -> bytes:
    """The router's /metrics page (empty when it cannot be read: the run's figures stand without it)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url}/metrics", timeout=10) as resp:
            body: bytes = resp.read()
            return body
    except OSError:
        return b""


def record(tally: Tally, c: mixed.TenantClass, outcome: Outcome, time_scale: float) -> None:
    """Count one request's outcome in its class: answered (good within the class's objective, in
    engine seconds), or dropped for the reason it got none."""
    mine: ClassTally = tally.classes[c.name]
    mine.arrived += 1
    if outcome.ttft is not None:
        ttft = outcome.ttft * time_scale
        mine.answered += 1
        mine.ttfts.append(ttft)
        mine.good += c.objective is None or ttft <= c.objective
    elif outcome.gave_up:
        mine.dropped[CLIENT_GONE] += 1
    elif outcome.shed_reason in SHED_REASONS:
        mine.dropped[outcome.shed_reason] += 1
    else:
        mine.dropped[FAILED] += 1


def play(
    fleet: LiveFleet,
    requests: Sequence[BenchRequest],
    target: Target,
    settings: Settings,
    classes: Sequence[mixed.TenantClass] = mixed.CLASSES,
) -> Tally:
    """The workload (arrivals in engine seconds, each request's tenant a class's name) through a
    router of its own for `target`, over the fleet's engines, emptied of cached prefixes first."""
    known = mixed.by_name(classes)
    tally = Tally({c.name: ClassTally() for c in classes})
    entries, keys = key_entries(classes, target.bands, fleet.time_scale)
    key_file = fleet.log_dir / f"keys-{target.label}.json"
    key_file.write_text(json.dumps(entries, indent=1))  # JSON is YAML: the router reads either
    flags = router_flags(target, settings, fleet.engines, key_file, fleet.time_scale)
    log = fleet.log_dir / f"router-{target.label}.log"
    with running_router(fleet.router_port, flags, log) as router:
        run = replay(
            compress(requests, fleet.time_scale),
            router.url,
            fleet.engines,
            label=target.label,
            model=fleet.model,
            time_scale=fleet.time_scale,
            show_progress=sys.stderr.isatty(),
            tenant_keys=keys,
            patience=settings.patience / fleet.time_scale,
            on_outcome=lambda req, outcome: record(tally, known[req.tenant or ""], outcome, fleet.time_scale),
        )
        result = asyncio.run(run)
        # The router's own account (objectives met, missed or best effort; predicted against
        # delivered TTFT; each band's waits) beside its log, for a reader of the run.
        (fleet.log_dir / f"router-{target.label}.metrics").write_bytes(router_metrics(router.url))
    tally.prompt_tokens, tally.cached_tokens = result.prompt_tokens, result.cached_tokens
    tally.host_load = result.host_load
    return tally


@contextmanager
def live_fleet(args: argparse.Namespace, log_dir: Path) -> Iterator[LiveFleet]:
    """`args.replicas` engine-sims on `args.base_port`.. (the router just above them) with the
    bench's engine model flags, stopped on the way out."""
    flags = [*engine_model_flags(args), f"--tokenizer={args.tokenizer}"]
    with local_fleet.engine_fleet(args, flags, log_dir) as engines:
        yield LiveFleet(engines, args.base_port + args.replicas, args.time_scale, args.model, log_dir)
