"""`prefixroute bench decision`: microseconds per routing decision as the fleet grows.

One decision is what the router does per request after hashing the prompt:
`Dispatcher.route` (select, learn, count the load) and the ticket's first byte
and finish. The prompt is 8k tokens (32k characters: 128 blocks of 256), the
first 2k tokens a prefix every request shares and the rest the request's own
conversation; each member holds many conversations, so the index is as full as
at steady state, and requests stay in flight (2 per member) so the load view
is not idle. Every strategy runs on the same request sequence; round-robin,
which looks at nothing, is the baseline of the ratios. Hashing the prompt is
timed apart: it depends on the prompt's length, not on the fleet.

With `--adapters N` each conversation asks for one of N LoRA adapters (Zipf popularity,
`bench.adapter_workload`), so every strategy routes over each adapter's members, and one
more column, `prefix-cache+adapters`, is prefix-cache with `--adapter-slots` set: its
residency belief and load cost, against the blind prefix-cache column of the same run.

Figures are per-process CPU time on whatever machine runs it; compare the
columns of one run, not runs on different machines.
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from collections import deque
from typing import Any

from prefixroute.bench.adapter_workload import AdapterMix, adapter_for
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher, Ticket
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.request import RoutingRequest, routing_request

BASELINE = "round-robin"
PROMPT_TOKENS = 8192
SHARED_TOKENS = 2048
CHARS_PER_TOKEN = 4
AWARE = "prefix-cache+adapters"  # prefix-cache with --adapter-slots (with --adapters)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--members", default="8,64,256,1024", help="comma-separated fleet sizes")
    parser.add_argument("--strategies", default="round-robin,least-load,prefix-hash,prefix-cache")
    parser.add_argument("--decisions", type=int, default=5000, help="timed decisions per strategy and size")
    parser.add_argument("--sessions-per-member", type=int, default=16, help="conversations the index holds per member")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--adapters", type=int, default=0, help="LoRA adapters the conversations ask for (0: none)")
    parser.add_argument("--adapter-slots", type=int, default=4, help="with --adapters: the aware column's slots")


def _requests(
    members: int, sessions_per_member: int, config: RoutingConfig, seed: int, adapters: int = 0
) -> list[RoutingRequest]:
    """One 8k-token request per conversation: the shared prefix's blocks, then its own (and,
    with `adapters`, its conversation's adapter)."""
    rng = random.Random(seed)
    mix = AdapterMix(adapters, seed=seed) if adapters else None
    blocks = PROMPT_TOKENS * CHARS_PER_TOKEN // config.block_size
    shared = [rng.getrandbits(64) for _ in range(SHARED_TOKENS * CHARS_PER_TOKEN // config.block_size)]
    out = []
    for conversation in range(members * sessions_per_member):
        chain = tuple(shared + [rng.getrandbits(64) for _ in range(blocks - len(shared))])
        adapter = adapter_for(conversation, mix) if mix is not None else None
        whole = rng.getrandbits(64)
        out.append(
            RoutingRequest(chain, chain[config.prefix_blocks - 1], blocks * config.block_size, None, whole, adapter)
        )
    return out


def _drive(dispatcher: Dispatcher, request: RoutingRequest, in_flight: deque[Ticket], keep: int) -> None:
    in_flight.append(dispatcher.route(request))
    while len(in_flight) > keep:
        ticket = in_flight.popleft()
        ticket.first_byte()
        ticket.finish(True)


def measure(strategy: str, members: int, args: argparse.Namespace) -> float:
    """Mean microseconds per decision (route + first byte + finish) at steady state."""
    aware = strategy == AWARE
    config = RoutingConfig(strategy="prefix-cache" if aware else strategy, adapter_slots=args.adapter_slots * aware)
    dispatcher = Dispatcher(config)
    dispatcher.set_fleet(Fleet(tuple(Member(f"engine-{i}", f"sim://engine-{i}") for i in range(members))))
    requests = _requests(members, args.sessions_per_member, config, args.seed, args.adapters)
    in_flight: deque[Ticket] = deque()
    keep = 2 * members
    for request in requests:  # warm up: every conversation placed once, the index filled
        _drive(dispatcher, request, in_flight, keep)
    rng = random.Random(args.seed + 1)
    sequence = [requests[rng.randrange(len(requests))] for _ in range(args.decisions)]
    gc.collect()
    batches = []
    batch = max(1, args.decisions // 5)
    for start in range(0, len(sequence), batch):
        part = sequence[start : start + batch]
        began = time.process_time()
        for request in part:
            _drive(dispatcher, request, in_flight, keep)
        batches.append((time.process_time() - began) / len(part))
    return 1e6 * statistics.median(batches)


def hashing_us(config: RoutingConfig, repeats: int = 200) -> float:
    """Microseconds to canonicalise-free hash one 8k-token prompt into blocks (the router does this once)."""
    rng = random.Random(7)
    text = "".join(rng.choice("abcdefghij klmnop") for _ in range(PROMPT_TOKENS * CHARS_PER_TOKEN))
    began = time.process_time()
    for _ in range(repeats):
        routing_request(text, config)
    return 1e6 * (time.process_time() - began) / repeats


def run(args: argparse.Namespace) -> int:
    from prefixroute.bench.errors import BenchError
    from prefixroute.routing.config import STRATEGY_NAMES

    try:
        sizes = [int(s) for s in args.members.split(",") if s.strip()]
    except ValueError:
        raise BenchError(f"--members must be comma-separated integers, got {args.members!r}") from None
    if not sizes or min(sizes) < 1 or args.decisions < 1 or args.sessions_per_member < 1:
        raise BenchError("--members, --decisions and --sessions-per-member must be positive")
    if args.adapters < 0 or args.adapter_slots < 1:
        raise BenchError("--adapters must not be negative and --adapter-slots must be positive")
    strategies = [s.strip() for s in args.strategies.split(",") if s.strip()]
    unknown = [s for s in strategies if s not in STRATEGY_NAMES]
    if unknown:
        raise BenchError(f"unknown strategy {unknown[0]!r}; choose from {', '.join(STRATEGY_NAMES)}")
    if BASELINE not in strategies:
        strategies.insert(0, BASELINE)
    if args.adapters:
        strategies.append(AWARE)
    rows: list[dict[str, Any]] = []
    for members in sizes:
        row: dict[str, Any] = {"members": members}
        for strategy in strategies:
            row[strategy] = measure(strategy, members, args)
            print(f"[{members} members] {strategy}: {row[strategy]:.1f} us", file=sys.stderr)
        rows.append(row)
    header = ["members"] + [f"{s} us" for s in strategies] + [f"{s} x" for s in strategies if s != BASELINE]
    table = [header]
    for row in rows:
        cells = [str(row["members"])] + [f"{row[s]:.1f}" for s in strategies]
        cells += [f"{row[s] / row[BASELINE]:.1f}" for s in strategies if s != BASELINE]
        table.append(cells)
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for n, cells in enumerate(table):
        print("  ".join(c.rjust(w) for c, w in zip(cells, widths)))
        if n == 0:
            print("  ".join("-" * w for w in widths))
    print(
        f"(us = CPU microseconds per decision: route + first byte + finish, {PROMPT_TOKENS}-token prompts, "
        f"median of 5 batches; x = ratio to {BASELINE} in this run)"
    )
    print(
        f"hashing one {PROMPT_TOKENS}-token prompt into blocks (any fleet size): {hashing_us(RoutingConfig()):.1f} us"
    )
    return 0
