"""engine-sim's KV cache events on the wire, as vLLM publishes them.

Turned on by vLLM's own flag and JSON:

    --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
                         "endpoint": "tcp://*:5557", "topic": "kv@engine-0"}'

Each engine step that changed the cache (a prompt starting prefill, a reset) is
one ZMQ PUB message of three frames: the topic, an 8-byte big-endian sequence
number counting from 0, and the msgpack payload `[ts, [event, ...]]` with events
in vLLM's tagged-map form (`routing.kv_events.batch_to_wire`). An endpoint with
`*` (or `::`, or ipc/inproc) is bound, any other is connected to, as vLLM does.
With `replay_endpoint`, a ROUTER socket answers `[b"", start]` (8 bytes, big-endian)
with every buffered message from `start` on, each `[b"", topic, seq, payload]`,
then `[b"", b"", -1, b""]`; the buffer keeps the last `buffer_steps` messages.

PUB sends never block: past the high-water mark (`hwm`) a slow subscriber loses
messages and sees a gap in the numbers, exactly the case the router must handle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import msgpack  # type: ignore[import-untyped]
import zmq
import zmq.asyncio

from prefixroute.routing.kv_events import END_SEQUENCE, EventBatch, KVEvent, batch_to_wire, encode_sequence

log = logging.getLogger("prefixroute.engine_sim.kv_events")


@dataclass(frozen=True)
class KVEventsConfig:
    """vLLM's KVEventsConfig fields (the same names, defaults and meaning)."""

    enable_kv_cache_events: bool = False
    publisher: str = "null"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    @property
    def enabled(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"


def parse_config(text: str) -> KVEventsConfig:
    """`--kv-events-config` JSON, or ValueError naming what is wrong."""
    try:
        raw = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"--kv-events-config is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("--kv-events-config must be a JSON object")
    known = KVEventsConfig.__dataclass_fields__
    unknown = sorted(set(raw) - set(known))
    if unknown:
        raise ValueError(f"--kv-events-config has unknown field(s) {', '.join(unknown)}")
    types: dict[str, tuple[type, ...]] = {
        "enable_kv_cache_events": (bool,),
        "publisher": (str,),
        "endpoint": (str,),
        "replay_endpoint": (str, type(None)),
        "buffer_steps": (int,),
        "hwm": (int,),
        "max_queue_size": (int,),
        "topic": (str,),
    }
    for name, value in raw.items():
        if not isinstance(value, types[name]) or (isinstance(value, bool) and bool not in types[name]):
            raise ValueError(f"--kv-events-config field {name!r} has the wrong type")
    if "publisher" not in raw:  # vLLM: zmq when events are on, else null
        raw["publisher"] = "zmq" if raw.get("enable_kv_cache_events") else "null"
    if raw["publisher"] not in ("zmq", "null"):
        raise ValueError(f"--kv-events-config publisher must be 'zmq' or 'null', got {raw['publisher']!r}")
    for name in ("buffer_steps", "hwm"):
        if name in raw and raw[name] <= 0:
            raise ValueError(f"--kv-events-config {name} must be positive")
    return KVEventsConfig(**raw)


def binds(endpoint: str) -> bool:
    """vLLM's rule: wildcard and ipc/inproc endpoints are bound, any other is connected to."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


def on_host(endpoint: str, host: str | None) -> str:
    """A wildcard TCP endpoint bound on `host` instead, when that is one address: engine-sim
    binds its pod IP like every server of ours (docs/contracts.md), where vLLM binds every
    address — the same for a router that connects to the pod IP, and pods that share one
    network namespace (the local cluster's) do not collide on the port."""
    if host is None or host in ("0.0.0.0", "::", "") or not endpoint.startswith("tcp://*:"):
        return endpoint
    address = f"[{host}]" if ":" in host else host
    return f"tcp://{address}:{endpoint.removeprefix('tcp://*:')}"


class KVEventPublisher:
    """The PUB socket, the sequence numbers, the replay buffer and its ROUTER socket."""

    def __init__(
        self, config: KVEventsConfig, context: zmq.asyncio.Context | None = None, bind_host: str | None = None
    ) -> None:
        self.config = config
        self.bind_host = bind_host
        self._ctx = context or zmq.asyncio.Context.instance()
        self._topic = config.topic.encode("utf-8")
        self._seq = 0
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._pub: zmq.Socket[bytes] | None = None
        self._replay: zmq.asyncio.Socket | None = None
        self._task: asyncio.Task[None] | None = None
        self.sent = 0
        self.dropped = 0

    async def start(self) -> None:
        pub: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)  # a plain socket: a PUB send never waits
        pub.setsockopt(zmq.SNDHWM, self.config.hwm)
        pub.setsockopt(zmq.LINGER, 0)
        if binds(self.config.endpoint):
            pub.bind(on_host(self.config.endpoint, self.bind_host))
        else:
            pub.connect(self.config.endpoint)
        self._pub = pub
        if self.config.replay_endpoint:
            replay = self._ctx.socket(zmq.ROUTER)
            replay.setsockopt(zmq.LINGER, 0)
            replay.bind(on_host(self.config.replay_endpoint, self.bind_host))
            self._replay = replay
            self._task = asyncio.get_running_loop().create_task(self._serve_replay(), name="kv-events replay")
        log.info("publishing KV cache events on %s (topic %r)", self.config.endpoint, self.config.topic)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for sock in (self._pub, self._replay):
            if sock is not None:
                sock.close(linger=0)
        self._pub = self._replay = None

    def publish(self, events: Sequence[KVEvent]) -> None:
        """One message for one engine step's events (none: nothing is sent)."""
        if not events or self._pub is None:
            return
        seq = self._seq
        self._seq += 1
        payload = msgpack.packb(batch_to_wire(EventBatch(time.time(), tuple(events))), use_bin_type=True)
        self._buffer.append((seq, payload))
        try:
            self._pub.send_multipart((self._topic, encode_sequence(seq), payload), flags=zmq.NOBLOCK)
            self.sent += 1
        except zmq.Again:
            self.dropped += 1  # the subscriber will see the gap and ask the replay endpoint

    async def _serve_replay(self) -> None:
        assert self._replay is not None
        replay = self._replay
        while True:
            frames = await replay.recv_multipart()
            if len(frames) != 3 or len(frames[2]) != 8:
                log.warning("ignoring a malformed replay request (%d frames)", len(frames))
                continue
            client, _, start_raw = frames
            start = int.from_bytes(start_raw, "big")
            for seq, payload in list(self._buffer):
                if seq >= start:
                    await replay.send_multipart((client, b"", self._topic, encode_sequence(seq), payload))
            await replay.send_multipart((client, b"", b"", encode_sequence(END_SEQUENCE), b""))
