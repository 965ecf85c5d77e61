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

`turn_cost` measures what tokenizing a conversation once buys: chats that grow turn by turn
to 8k tokens, each turn keyed and routed after the turn before it was, with and without the
router's token store.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from prefixroute.engine_sim.model_dir import VOCAB, corpus


def event_cost(members: int = 8, runs: int = 400, blocks_per_run: int = 64, block_size: int = 16) -> dict[str, float]:
    """CPU microseconds per stored and per removed block, from the message's bytes to the
    router's index: the edge's reader (msgpack, `kv_events.decode_batch`), then the router's
    own follower and prefix-cache strategy (routing.kv_stream through the dispatcher), at
    steady state: every member's cache full (stores evict older blocks, as an engine's do).

    Removals are measured in both shapes an engine sends: engine-sim's, one BlockRemoved per
    step for every block it evicted (`removed_us_per_block`), and vLLM's, one BlockRemoved per
    evicted block (`removed_one_by_one_us_per_block`). Also the memory each indexed block costs
    the router (the events' view and the engine-hash map), traced while the caches fill: the
    view is capped per member, and this says what the cap costs in bytes."""
    import tracemalloc

    from prefixroute.routing.kv_events import BlockRemoved

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    fleet = _EventFleet(members, blocks_per_run, block_size)
    for member in fleet.names:  # fill: every member holds `runs` runs
        for _ in range(runs):
            fleet.feed(member, fleet.message(member, (fleet.stored(member),)))
    traced = tracemalloc.get_traced_memory()[0] - before - fleet.own_bytes() + fleet.native_bytes()
    tracemalloc.stop()
    filled = members * runs * blocks_per_run
    timed = {"stored": 0.0, "removed": 0.0, "removed_one_by_one": 0.0}
    for turn in range(runs):
        for member in fleet.names:
            old = fleet.held[member].pop(0)
            # Bytes made before the clock starts: they arrive as a message.
            stored = fleet.message(member, (fleet.stored(member),))
            if turn % 2:
                shape, removal = "removed_one_by_one", tuple(BlockRemoved((h,)) for h in old)
            else:
                shape, removal = "removed", (BlockRemoved(old),)
            removed = fleet.message(member, removal)
            started = time.process_time()
            fleet.feed(member, stored)
            middle = time.process_time()
            fleet.feed(member, removed)
            timed["stored"] += middle - started
            timed[shape] += time.process_time() - middle
    blocks = members * runs * blocks_per_run
    sizes = fleet.dispatcher.strategy.index_blocks() or {}
    return {
        "stored_us_per_block": 1e6 * timed["stored"] / blocks,
        "removed_us_per_block": 2e6 * timed["removed"] / blocks,  # half the turns each
        "removed_one_by_one_us_per_block": 2e6 * timed["removed_one_by_one"] / blocks,
        "indexed_blocks": float(sum(sizes.values())),  # every member's view as its engine holds it now
        "bytes_per_indexed_block": traced / filled,
    }


class _EventFleet:
    """`members` engines' event streams as bytes, fed to one router's follower and index."""

    def __init__(self, members: int, blocks_per_run: int, block_size: int) -> None:
        from prefixroute.kv_subscriber.member import read_message
        from prefixroute.routing.config import RoutingConfig
        from prefixroute.routing.dispatch import Dispatcher
        from prefixroute.routing.fleet import Fleet, Member
        from prefixroute.routing.kv_stream import KVEventsFollower

        config = RoutingConfig(block_size=block_size)
        self.dispatcher = Dispatcher(config)
        self.names = [f"engine-{i}" for i in range(members)]
        self.dispatcher.set_fleet(Fleet(tuple(Member(n, f"http://{n}") for n in self.names), config.virtual_nodes))
        self.follower = KVEventsFollower(self.dispatcher, "bench-model", block_size, 1 << 20, stale_after=1e18)
        self.follower.follow(self.names)
        self.read = read_message
        self.rng = random.Random(0)
        self.seq = dict.fromkeys(self.names, 0)
        self.held: dict[str, list[tuple[int, ...]]] = {n: [] for n in self.names}
        self.blocks_per_run, self.block_size = blocks_per_run, block_size

    def stored(self, member: str) -> Any:
        from prefixroute.routing.kv_events import BlockStored

        hashes = tuple(self.rng.getrandbits(63) for _ in range(self.blocks_per_run))
        self.held[member].append(hashes)
        tokens = tuple(self.rng.randrange(VOCAB) for _ in range(self.blocks_per_run * self.block_size))
        return BlockStored(hashes, None, tokens, self.block_size)

    def message(self, member: str, events: tuple[Any, ...]) -> list[bytes]:
        """The next message's frames, as vLLM's publisher sends them."""
        import msgpack  # type: ignore[import-untyped]

        from prefixroute.routing.kv_events import EventBatch, batch_to_wire, encode_sequence

        seq = self.seq[member]
        self.seq[member] = seq + 1
        payload = msgpack.packb(batch_to_wire(EventBatch(time.time(), events)), use_bin_type=True)
        return [b"kv", encode_sequence(seq), payload]

    def feed(self, member: str, frames: list[bytes]) -> None:
        seq, batch = self.read(frames)
        self.follower.receive(member, seq, batch, 0.0)

    def native_bytes(self) -> int:
        """The compiled reader's engine-hash maps and events' view, which tracemalloc does not
        see (their own estimates of their heap)."""
        maps = sum(self.follower.stream(n).keys.native_bytes() for n in self.names)
        return maps + int(self.dispatcher.strategy.index.native_bytes())  # type: ignore[attr-defined]

    def own_bytes(self) -> int:
        """What the bench itself keeps (its record of each run's hashes) is not the router's;
        the hash ints those tuples share with the router's map are not counted here either."""
        import sys

        held = self.held
        return sys.getsizeof(held) + sum(sys.getsizeof(v) + sum(sys.getsizeof(t) for t in v) for v in held.values())


def tokenize_cost(folder: Path, prompt_tokens: int = 8_192, repeats: int = 15) -> dict[str, float]:
    """CPU milliseconds (median of `repeats`) a precise router spends per request before it can
    decide, at `prompt_tokens`-token prompts (issue #12 asks at 8k): the model folder's
    tokenizer on a completion, the chat template and tokenizer on a chat of the same text, and
    the token-block keys; beside them the approximate keys of the same completion (canonical
    text in 256-character blocks), which is what the router would do without a tokenizer. All of
    these tokenize the whole text every time (no token store); beside them, the live bench's
    1.5 kB prompt tokenized whole, and with its shared prefix in the store and a new question."""
    import statistics

    from prefixroute import prompt_tokens as tokens_of
    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.request import request_from_body, request_from_tokens

    tokenize = tokens_of.load(str(folder), store_tokens=0)  # the whole text every time
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

    # the live bench's prompt shape (load.py): a 1.5 kB system prefix the store holds, and a
    # question never seen before (the live bench cycles through 64, so there it is seen too)
    stored, asked = tokens_of.load(str(folder)), iter(range(1 << 30))
    system = "You are a helpful assistant. Answer briefly and precisely. " * 25
    stored("completion", {"prompt": system + " Question 0"})

    def new_question() -> None:
        n = next(asked)
        stored("completion", {"prompt": f"{system} Question {n}: what is {n} + {n * 7}?"})

    return {
        "bench_prompt_new_question_ms": cpu_ms(new_question),
        "bench_prompt_whole_ms": cpu_ms(lambda: tokenize("completion", {"prompt": system + " Question 1: what?"})),
        "prompt_tokens": float(len(ids)),
        "tokenize_completion_ms": cpu_ms(lambda: tokenize("completion", completion)),
        "tokenize_chat_ms": cpu_ms(lambda: tokenize("chat", chat)),
        "token_keys_ms": cpu_ms(lambda: request_from_tokens(ids, precise, "bench-model")),
        "approximate_keys_ms": cpu_ms(lambda: request_from_body("completion", completion, approximate)),
    }


def _conversations(count: int, prompt_chars: int, seed: int = 2) -> list[list[dict[str, Any]]]:
    """`count` chats, turn by turn (each turn's request body), grown to `prompt_chars`: one
    shared system prompt (~2k tokens), then per turn a question of 3 lines and, in the next
    turn's history, an answer of 12 (~350 new tokens a turn)."""
    rng = random.Random(seed)
    lines = list(itertools.islice(corpus(20_000, seed=seed), 20_000))
    system = "\n".join(rng.choice(lines) for _ in range(80))
    out = []
    for _ in range(count):
        messages: list[dict[str, str]] = [{"role": "system", "content": system}]
        turns, size = [], len(system)
        while size < prompt_chars:
            question = "\n".join(rng.choice(lines) for _ in range(3))
            messages = [*messages, {"role": "user", "content": question}]
            turns.append({"model": "bench-model", "messages": messages})
            answer = "\n".join(rng.choice(lines) for _ in range(12))
            messages = [*messages, {"role": "assistant", "content": answer}]
            size += len(question) + len(answer)
        out.append(turns)
    return out


def turn_cost(folder: Path, prompt_chars: int = 40_000, chats: int = 8, members: int = 8) -> dict[str, float]:
    """Milliseconds per routing decision (render, tokenize, token-block keys, route) for chat
    turns whose previous turn the router saw, over the turns of at least 7/8 of `prompt_chars`
    (~8k tokens by default): median wall time and CPU time, with the token store and without
    it (the whole conversation tokenized every turn), and the prompt's and each turn's new tokens."""
    from prefixroute import prompt_tokens as tokens_of
    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.dispatch import Dispatcher
    from prefixroute.routing.fleet import Fleet, Member
    from prefixroute.routing.request import request_from_tokens
    from prefixroute.token_store import DEFAULT_CAPACITY_TOKENS

    conversations = _conversations(chats, prompt_chars)
    out: dict[str, float] = {}
    for name, store in (("store", DEFAULT_CAPACITY_TOKENS), ("whole", 0)):
        tokenize = tokens_of.ModelFolderTokens(folder, store_tokens=store)
        config = RoutingConfig(block_size=16)
        dispatcher = Dispatcher(config)
        dispatcher.set_fleet(Fleet(tuple(Member(f"engine-{i}", f"sim://engine-{i}") for i in range(members))))
        walls, cpus, sizes = [], [], []
        for turn in range(max(len(c) for c in conversations)):
            for chat in conversations:  # conversations interleave, as at a router
                if turn >= len(chat):
                    continue
                wall, cpu = time.perf_counter(), time.process_time()
                tokens = tokenize("chat", chat[turn])
                ticket = dispatcher.route(request_from_tokens(tokens, config, "bench-model"))
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                ticket.first_byte()
                ticket.finish(True)
                if len(json.dumps(chat[turn]["messages"])) >= prompt_chars * 7 // 8:
                    walls.append(1e3 * wall)
                    cpus.append(1e3 * cpu)
                    sizes.append(len(tokens))
        out[f"{name}_decision_ms"] = _median(walls)
        out[f"{name}_decision_cpu_ms"] = _median(cpus)
        out["prompt_tokens"] = _median(sizes)
        if store:
            counts = tokenize.store.counts()
            out["new_tokens_per_turn"] = counts["tokenized_tokens"] / sum(len(c) for c in conversations)
    return out


def _median(values: Sequence[float]) -> float:
    import statistics

    return statistics.median(values) if values else float("nan")
