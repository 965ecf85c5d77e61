"""Precise mode for a front: the engines' KV events in, tokenizer-accurate keys out.

With `--mode precise` and `--kv-events` (a fixed fleet: one endpoint per backend, in
order) or `--kv-events-port` (any membership source: that port on each member's host), a
front subscribes to every member's KV cache event stream (`kv_subscriber`), keeps
what each engine really holds (`routing.kv_stream` -> the dispatcher), and keys
requests the way the engine caches them: the engine's tokens (`--tokenizer`:
`engine-sim`, the served model's folder, or its hub id with `--tokenizer-revision`, fetched
after startup: `front.tokenizer_source`), in the engine's blocks (`--block-size`
tokens, 16 by default here as in vLLM and engine-sim), with model, adapter and
cache_salt in the first block. A request the tokenizer cannot take (a chat without
a usable template) is keyed approximately, as are all requests without
`--tokenizer`, and all requests while a hub tokenizer is still being fetched.

The request's adapter (`front.adapters.adapter_of`: its `model` when a member lists that
adapter, or when it is not `--served-model`) is in the first block's seed as vLLM mixes
it into its block hashes; its approximate keys are salted with it.

Tokenizing is the costly part of a request's keys, so it is done once per piece of text
(`token_reuse`, up to `--token-store-tokens` tokens held) and, when a request brings more
than `OFF_LOOP_CHARS` characters the tokenizer has not seen, on a worker thread: the
tokenizer releases the GIL, so one long prompt does not hold up the event loop's other
requests. Below that the thread's hand-off (about 80 µs CPU, measured) would cost more
than it spares.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from prefixroute import prompt_tokens
from prefixroute.front.tokenizer_source import HUB, TokenizerSource, TokenizerStatus, source_kind
from prefixroute.kv_subscriber import EventEndpoints, KVEventsSubscriber
from prefixroute.routing.beliefs import events_view_capacity
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher, Ticket
from prefixroute.routing.flags import add_knob_arguments, knob_from_args
from prefixroute.routing.fleet import Fleet
from prefixroute.routing.knobs import MODE
from prefixroute.routing.kv_lag import DEFAULT_BEHIND_AFTER_S
from prefixroute.routing.kv_stream import DEFAULT_STALE_AFTER_S, KVEventsFollower
from prefixroute.routing.request import RoutingRequest, request_from_body, request_from_tokens
from prefixroute.token_store import DEFAULT_CAPACITY_TOKENS

log = logging.getLogger("prefixroute.front.precise")

# Unseen characters past which a request is tokenized on a worker thread: ~0.35 µs of
# tokenizer CPU per character (the router-bench's 32k BPE), so ~1.4 ms here, against a
# hand-off of ~80 µs.
OFF_LOOP_CHARS = 4096


@dataclass(frozen=True)
class PreciseSettings:
    mode: str = MODE.default  # "precise": follow the engines' events; "approximate": routing history only
    tokenizer: str | None = None  # "engine-sim", a model folder or a hub id; None: approximate keys
    tokenizer_revision: str | None = None  # a hub tokenizer's branch, tag or commit (None: the default branch)
    tokenizer_cache: str | None = None  # where hub tokenizers are kept (None: the hub library's cache)
    token_store_tokens: int = DEFAULT_CAPACITY_TOKENS  # seen prompt pieces' ids kept (0: none)
    served_model: str = ""  # the engine's model name; other names in requests are adapters
    kv_events: tuple[str, ...] = ()  # one endpoint per backend, in --backends order
    kv_events_replay: tuple[str, ...] = ()
    kv_events_port: int | None = None  # else: this port on each member's host
    kv_events_replay_port: int | None = None
    stale_after: float = DEFAULT_STALE_AFTER_S
    behind_after: float = DEFAULT_BEHIND_AFTER_S

    @property
    def follows_events(self) -> bool:
        return bool(self.kv_events) or self.kv_events_port is not None

    def check(self, backends: tuple[str, ...]) -> None:
        if self.tokenizer_revision is not None and (self.tokenizer is None or source_kind(self.tokenizer) != HUB):
            raise ValueError("--tokenizer-revision is for a --tokenizer named by hub id (org/name)")
        if self.mode == "precise":
            if self.tokenizer is None:
                raise ValueError("--mode precise needs --tokenizer (engine-sim, the served model's folder or hub id)")
            if not self.follows_events:
                raise ValueError("--mode precise needs --kv-events (one per --backends URL) or --kv-events-port")
        elif self.follows_events:
            raise ValueError("--kv-events and --kv-events-port follow the engines' events: they need --mode precise")
        if self.kv_events and len(self.kv_events) != len(backends):
            raise ValueError(f"--kv-events needs one endpoint per backend ({len(backends)}), got {len(self.kv_events)}")
        if self.kv_events_replay and len(self.kv_events_replay) != len(self.kv_events):
            raise ValueError("--kv-events-replay needs one endpoint per --kv-events endpoint")
        for endpoint in self.kv_events + self.kv_events_replay:
            if not endpoint.startswith(("tcp://", "ipc://")):
                raise ValueError(f"KV event endpoint {endpoint!r} must be tcp://HOST:PORT (or ipc://PATH)")
        if self.stale_after <= 0:
            raise ValueError("--kv-events-stale-after must be positive")
        if self.behind_after <= 0:
            raise ValueError("--kv-events-behind-after must be positive")
        if self.token_store_tokens < 0:
            raise ValueError("--token-store-tokens must not be negative")


def add_precise_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("precise mode (the engines' KV cache events)")
    add_knob_arguments(g, [MODE])
    g.add_argument(
        "--tokenizer",
        default=None,
        help="key requests by the engine's tokens: 'engine-sim', the served model's folder (tokenizer.json), "
        "or its hub id (org/name: only its tokenizer files are fetched, after startup; HF_TOKEN and HF_ENDPOINT "
        "are honoured)",
    )
    g.add_argument("--tokenizer-revision", default=None, help="a hub tokenizer's branch, tag or commit (default: main)")
    g.add_argument(
        "--tokenizer-cache",
        default=None,
        help="folder for hub tokenizers (default: the hub library's cache, HF_HUB_CACHE or HF_HOME)",
    )
    g.add_argument(
        "--token-store-tokens",
        type=int,
        default=DEFAULT_CAPACITY_TOKENS,
        help="token ids of seen prompt pieces kept, so a chat's earlier turns are not tokenized again (0: none)",
    )
    g.add_argument("--served-model", default="", help="the engine's model name (other request models are adapters)")
    g.add_argument(
        "--kv-events", default=None, help="comma-separated tcp://HOST:PORT, one per --backends URL, in order"
    )
    g.add_argument("--kv-events-replay", default=None, help="their replay endpoints (vLLM's replay_endpoint), in order")
    g.add_argument("--kv-events-port", type=int, default=None, help="the event port on every member's host")
    g.add_argument("--kv-events-replay-port", type=int, default=None, help="the replay port on every member's host")
    g.add_argument(
        "--kv-events-stale-after",
        type=float,
        default=DEFAULT_STALE_AFTER_S,
        help="seconds without events after sending work before a member is routed from history",
    )
    g.add_argument(
        "--kv-events-behind-after",
        type=float,
        default=DEFAULT_BEHIND_AFTER_S,
        help="lag (publish to applied) past which a member whose events queue up is routed from history",
    )


def _split(text: str | None) -> tuple[str, ...]:
    return tuple(p.strip() for p in (text or "").split(",") if p.strip())


def precise_settings(args: argparse.Namespace) -> PreciseSettings:
    return PreciseSettings(
        mode=knob_from_args(args, MODE),
        tokenizer=args.tokenizer,
        tokenizer_revision=args.tokenizer_revision,
        tokenizer_cache=args.tokenizer_cache,
        token_store_tokens=args.token_store_tokens,
        served_model=args.served_model,
        kv_events=_split(args.kv_events),
        kv_events_replay=_split(args.kv_events_replay),
        kv_events_port=args.kv_events_port,
        kv_events_replay_port=args.kv_events_replay_port,
        stale_after=args.kv_events_stale_after,
        behind_after=args.kv_events_behind_after,
    )


class PreciseMode:
    """Tokenizer and event following for one front's dispatcher."""

    def __init__(
        self,
        settings: PreciseSettings,
        config: RoutingConfig,
        dispatcher: Dispatcher,
        backends: tuple[str, ...],
        clock: Callable[[], float],
        on_lag: Callable[[float], None] | None = None,
    ) -> None:
        """`on_lag`: each live KV event message's lag, publish to applied (the front's histogram)."""
        self.settings = settings
        self.config = config
        self.clock = clock
        self.tokenizer = TokenizerSource(
            settings.tokenizer, settings.token_store_tokens, settings.tokenizer_revision, settings.tokenizer_cache
        )
        self._workers: ThreadPoolExecutor | None = None  # made on the first long prompt
        self.follower: KVEventsFollower | None = None
        self.subscriber: KVEventsSubscriber | None = None
        self._lock = asyncio.Lock()
        if settings.follows_events:
            self.follower = KVEventsFollower(
                dispatcher,
                settings.served_model,
                config.block_size,
                events_view_capacity(config.index_blocks_per_member),
                replay=bool(settings.kv_events_replay) or settings.kv_events_replay_port is not None,
                stale_after=settings.stale_after,
                behind_after=settings.behind_after,
            )
            urls = [b.rstrip("/") for b in backends]
            endpoints = EventEndpoints(
                by_url=dict(zip(urls, settings.kv_events)),
                replay_by_url=dict(zip(urls, settings.kv_events_replay)),
                port=settings.kv_events_port,
                replay_port=settings.kv_events_replay_port,
            )
            self.subscriber = KVEventsSubscriber(self.follower, endpoints, clock, on_lag=on_lag)

    # -- lifecycle ------------------------------------------------------------

    async def start(self) -> None:
        await self.tokenizer.start()  # a hub tokenizer arrives later; keys are approximate until then
        if self.subscriber is not None:
            await self.subscriber.start()

    async def stop(self) -> None:
        await self.tokenizer.stop()
        if self.subscriber is not None:
            await self.subscriber.stop()
        if self._workers is not None:
            self._workers.shutdown(wait=False, cancel_futures=True)

    def fleet_changed(self, fleet: Fleet) -> None:
        """Follow the new fleet's streams (called on the loop, after the dispatcher has it)."""
        if self.subscriber is not None:
            asyncio.get_running_loop().create_task(self._apply(fleet))

    async def _apply(self, fleet: Fleet) -> None:
        assert self.subscriber is not None
        async with self._lock:
            await self.subscriber.apply(fleet)

    @property
    def tokens(self) -> prompt_tokens.PromptTokens | None:
        """The engine's tokenizer, None while there is none (yet)."""
        return self.tokenizer.tokens

    def tokenizer_status(self) -> TokenizerStatus | None:
        """Whether the tokenizer is in use, and why not (for metrics); None without --tokenizer."""
        return self.tokenizer.status()

    # -- requests -------------------------------------------------------------

    def request(
        self,
        kind: str,
        body: Mapping[str, Any],
        tenant: str | None,
        cache_salt: str | None,
        adapter: str | None = None,
    ) -> RoutingRequest:
        """The request's keys: the engine's tokens when they can be had, else approximate."""
        keys = self.keys(kind, body, tenant, cache_salt, off_loop=False, adapter=adapter)
        assert isinstance(keys, RoutingRequest)
        return keys

    def keys(
        self,
        kind: str,
        body: Mapping[str, Any],
        tenant: str | None,
        cache_salt: str | None,
        off_loop: bool = True,
        adapter: str | None = None,
    ) -> RoutingRequest | Awaitable[RoutingRequest]:
        """`request`, or (`off_loop`, called on the event loop) a future of it when the
        tokenizer has more than OFF_LOOP_CHARS unseen characters to go through. `adapter`:
        the LoRA adapter the request asks for (None: the base model)."""
        tokens = self.tokens
        if tokens is not None:
            try:
                plan = getattr(tokens, "plan", None)
                if plan is None:
                    return self._keyed(tokens(kind, body), body, tenant, cache_salt, adapter)
                unseen, finish = plan(kind, body)
            except prompt_tokens.NotTokenizable:
                pass
            else:
                if not off_loop or unseen < OFF_LOOP_CHARS:
                    return self._keyed(finish(), body, tenant, cache_salt, adapter)
                if self._workers is None:
                    self._workers = ThreadPoolExecutor(2, thread_name_prefix="prefixroute-tokenize")
                later = self._workers.submit(lambda: self._keyed(finish(), body, tenant, cache_salt, adapter))
                return asyncio.wrap_future(later)
        return request_from_body(kind, body, self.config, tenant, adapter=adapter)

    def _keyed(
        self,
        tokens: Sequence[int],
        body: Mapping[str, Any],
        tenant: str | None,
        cache_salt: str | None,
        adapter: str | None,
    ) -> RoutingRequest:
        salt = cache_salt if cache_salt is not None else _body_salt(body)
        return request_from_tokens(tokens, self.config, self.settings.served_model, adapter, salt, tenant)

    def token_store(self) -> Mapping[str, int] | None:
        """The token store's counters and size (None: no store), for metrics."""
        store = getattr(self.tokens, "store", None)
        return store.counts() if store is not None else None

    def routed(self, ticket: Ticket) -> None:
        """A request left for its member: if it must store blocks there, events should follow."""
        if self.follower is not None:
            self.follower.routed(ticket.member.name, len(ticket.request.blocks), ticket.matched, self.clock())

    def streams(self) -> Mapping[str, tuple[bool, Mapping[str, int]]]:
        """Per member: routed from its events now, and its stream's counters (for metrics)."""
        if self.follower is None:
            return {}
        return {n: (self.follower.precise(n), s.counts) for n, s in self.follower.streams.items()}

    def behind(self) -> Mapping[str, bool]:
        """Per member: whether this front is behind on its events now (for metrics)."""
        if self.follower is None:
            return {}
        return {n: self.follower.behind(n) for n in self.follower.streams}


def _body_salt(body: Mapping[str, Any]) -> str | None:
    salt = body.get("cache_salt")
    return salt if isinstance(salt, str) and salt else None
