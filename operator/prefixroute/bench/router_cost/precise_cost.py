"""What precise mode adds to the router's CPU: a real tokenizer per request, and the engines' events.

Two parts, both measured by `router-bench --precise` in the same run as the rest:

- per request, live: a router in precise mode keys each request by the served model's tokens.
  It tokenizes with the benches' one model folder (`engine_sim.model_dir`): a byte-level BPE
  `tokenizer.json` of 32,000 tokens (trained here with `tokenizers` on generated text, so
  nothing reaches a model hub) and a ChatML chat template. The router follows two event
  endpoints where nothing publishes, so every member stays routed from history: the figure is
  the request path's cost (tokenize, key, decide, relay), not the events';
- per event, in this process: every router replica follows every engine, so it translates and
  indexes every block the fleet stores and evicts — work that grows with the fleet's prefill,
  not with the router's own requests. `event_cost` feeds the router's own follower and
  prefix-cache strategy (routing.kv_stream through the dispatcher) with vLLM-shaped batches of
  16-token blocks and reports CPU microseconds per stored and per removed block.
"""

from __future__ import annotations

import itertools
import random
import time
from pathlib import Path
from typing import Any

from prefixroute.engine_sim.model_dir import VOCAB, corpus


def event_cost(members: int = 8, runs: int = 400, blocks_per_run: int = 64, block_size: int = 16) -> dict[str, float]:
    """CPU microseconds per stored and per removed block through one router's follower and
    prefix-cache index (the router's own classes), at steady state: every member's cache full
    (stores evict older blocks, as an engine's do). Also the memory each indexed block costs
    the router (the events' view and the engine-hash map), traced while the caches fill: the
    view is capped per member, and this says what the cap costs in bytes."""
    import sys
    import tracemalloc

    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.dispatch import Dispatcher
    from prefixroute.routing.fleet import Fleet, Member
    from prefixroute.routing.kv_events import BlockRemoved, BlockStored, EventBatch
    from prefixroute.routing.kv_stream import KVEventsFollower

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    config = RoutingConfig(block_size=block_size)
    dispatcher = Dispatcher(config)
    names = [f"engine-{i}" for i in range(members)]
    fleet = Fleet(tuple(Member(n, f"http://{n}") for n in names), config.virtual_nodes)
    dispatcher.set_fleet(fleet)
    follower = KVEventsFollower(dispatcher, "bench-model", block_size, 1 << 20, stale_after=1e18)
    follower.follow(names)
    rng = random.Random(0)
    seq = dict.fromkeys(names, 0)
    held: dict[str, list[tuple[int, ...]]] = {n: [] for n in names}

    def batch(member: str, events: tuple[object, ...]) -> None:
        follower.receive(member, seq[member], EventBatch(0.0, events), 0.0)  # type: ignore[arg-type]
        seq[member] += 1

    def stored(member: str) -> BlockStored:
        hashes = tuple(rng.getrandbits(63) for _ in range(blocks_per_run))
        held[member].append(hashes)
        tokens = tuple(rng.randrange(VOCAB) for _ in range(blocks_per_run * block_size))
        return BlockStored(hashes, None, tokens, block_size)

    for member in names:  # fill: every member holds `runs` runs
        for _ in range(runs):
            batch(member, (stored(member),))
    # What the bench itself keeps (its record of each run's hashes) is not the router's; the
    # hash ints those tuples share with the router's map are (msgpack makes them for it).
    bench_own = sys.getsizeof(held) + sum(sys.getsizeof(v) + sum(sys.getsizeof(t) for t in v) for v in held.values())
    traced = tracemalloc.get_traced_memory()[0] - before - bench_own
    tracemalloc.stop()
    filled = members * runs * blocks_per_run
    timed_store = timed_remove = 0.0
    count = 0
    for _ in range(runs):
        for member in names:
            old = held[member].pop(0)
            event = stored(member)  # built before the clock starts: the tokens arrive with the message
            started = time.process_time()
            batch(member, (event,))
            middle = time.process_time()
            batch(member, (BlockRemoved(old),))
            timed_store += middle - started
            timed_remove += time.process_time() - middle
            count += 1
    blocks = count * blocks_per_run
    sizes = dispatcher.strategy.index_blocks() or {}
    return {
        "stored_us_per_block": 1e6 * timed_store / blocks,
        "removed_us_per_block": 1e6 * timed_remove / blocks,
        "indexed_blocks": float(sum(sizes.values())),  # every member's view as its engine holds it now
        "bytes_per_indexed_block": traced / filled,
    }


def tokenize_cost(folder: Path, prompt_tokens: int = 8_192, repeats: int = 15) -> dict[str, float]:
    """CPU milliseconds (median of `repeats`) a precise router spends per request before it can
    decide, at `prompt_tokens`-token prompts (issue #12 asks at 8k): the model folder's
    tokenizer on a completion, the chat template and tokenizer on a chat of the same text, and
    the token-block keys; beside them the approximate keys of the same completion (canonical
    text in 256-character blocks), which is what the router would do without a tokenizer."""
    import statistics

    from prefixroute import prompt_tokens as tokens_of
    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.request import request_from_body, request_from_tokens

    tokenize = tokens_of.load(str(folder))
    lines, text = list(itertools.islice(corpus(4_000, seed=1), 4_000)), ""
    for count in range(64, len(lines) + 1, 64):  # grow the text until it is at least that many tokens
        text = "\n".join(lines[:count])
        if len(tokenize("completion", {"prompt": text})) >= prompt_tokens:
            break
    completion = {"model": "bench-model", "prompt": text}
    chat = {
        "model": "bench-model",
        "messages": [{"role": "system", "content": text}, {"role": "user", "content": "Hi"}],
    }
    precise, approximate = RoutingConfig(block_size=16), RoutingConfig()
    ids = tokenize("completion", completion)

    def cpu_ms(work: Any) -> float:
        times = []
        for _ in range(repeats):
            started = time.process_time()
            work()
            times.append(1e3 * (time.process_time() - started))
        return statistics.median(times)

    return {
        "prompt_tokens": float(len(ids)),
        "tokenize_completion_ms": cpu_ms(lambda: tokenize("completion", completion)),
        "tokenize_chat_ms": cpu_ms(lambda: tokenize("chat", chat)),
        "token_keys_ms": cpu_ms(lambda: request_from_tokens(ids, precise, "bench-model")),
        "approximate_keys_ms": cpu_ms(lambda: request_from_body("completion", completion, approximate)),
    }
