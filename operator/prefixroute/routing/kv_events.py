"""KV cache events as vLLM publishes them: what an engine stored, evicted or cleared.

vLLM (`--kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq", ...}'`)
sends one ZMQ message per scheduler step that changed its prefix cache:
`[topic, 8-byte big-endian sequence number, msgpack payload]`, the payload being
`[ts, [event, ...], data_parallel_rank]` (the rank left out when unset). Current vLLM
writes each event as a map tagged by "type"; older vLLM wrote tagged positional
arrays (`["BlockStored", block_hashes, parent_block_hash, token_ids, block_size,
lora_id, ...]`). Both are read here. Block hashes are unsigned 64-bit integers by
default (bytes when vLLM is told to publish its raw SHA-256 digests): they are the
engine's own, opaque to us, and only ever compared for equality.

This module is the format, nothing else: typed events, `decode_batch` from what
msgpack unpacked, and `batch_to_wire` for what msgpack should pack (engine-sim
publishes through it, so both ends of our tests share one definition of the
format and vLLM's real stream checks it). Unpacking bytes and ZMQ are the edges'.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

EngineBlockHash = int | bytes  # the engine's identity of a block: opaque, compared only

MEDIUM_GPU = "GPU"  # the tier a prefix-cache hit is served from; others (CPU, storage) are offload copies


class EventFormatError(ValueError):
    """A payload that is not a KV event batch in either of vLLM's forms."""


@dataclass(frozen=True, slots=True)
class BlockStored:
    """Full blocks the engine just cached, in prefix order.

    `parent_block_hash` is the engine hash of the block before the first one (None:
    the first block starts the prompt). `token_ids` holds every stored block's tokens,
    `block_size` each. `extra_keys` has one entry per block: the values that entered
    that block's hash besides its tokens (the LoRA name, the request's cache_salt on
    the prompt's first block, multimodal identifiers), or None.

    `packed_tokens`: `token_ids` as native 8-byte integers, when decoding packed them (one C
    call that also checks every id is an integer): hashing the blocks reads them in that form,
    so a decoded event is not converted twice. Derived, so not compared."""

    block_hashes: tuple[EngineBlockHash, ...]
    parent_block_hash: EngineBlockHash | None
    token_ids: tuple[int, ...]
    block_size: int
    lora_name: str | None = None
    medium: str | None = MEDIUM_GPU
    extra_keys: tuple[tuple[Any, ...] | None, ...] | None = None
    lora_id: int | None = None
    packed_tokens: bytes | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class BlockRemoved:
    """Blocks the engine evicted (by engine hash)."""

    block_hashes: tuple[EngineBlockHash, ...]
    medium: str | None = MEDIUM_GPU


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    """The engine dropped its whole prefix cache (a reset)."""


KVEvent = BlockStored | BlockRemoved | AllBlocksCleared


@dataclass(frozen=True, slots=True)
class EventBatch:
    """One published message's payload: the events of one engine step, in order.

    `native`: the payload as the compiled reader read it (`kv_native`), which holds the events
    instead of `events` (then empty): `kv_index.EngineKeys` applies it as it is."""

    ts: float
    events: tuple[KVEvent, ...]
    data_parallel_rank: int | None = None
    native: Any = field(default=None, compare=False, repr=False)

    @property
    def event_count(self) -> int:
        return len(self.events) if self.native is None else int(self.native.event_count)


# -- reading -------------------------------------------------------------------------


_HASH_TYPES = frozenset((int, bytes))  # exact types: a bool is no hash


def _hashes(value: Any, where: str) -> tuple[EngineBlockHash, ...]:
    if not isinstance(value, (list, tuple)):
        raise EventFormatError(f"{where}: block_hashes must be an array")
    # One pass in C over the hashes' types: a generator checking each one cost 1 us per block.
    if not _HASH_TYPES.issuperset(map(type, value)):
        raise EventFormatError(f"{where}: a block hash must be an integer or bytes")
    return tuple(value)


def _optional_str(value: Any, field: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise EventFormatError(f"{field} must be a string or null")


def _optional_int(value: Any, field: str) -> int | None:
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    raise EventFormatError(f"{field} must be an integer or null")


def _token_ids(value: Any) -> tuple[tuple[int, ...], bytes]:
    """The ids, and the ids packed as hashing reads them. Packing is also the check that each is
    an integer (struct refuses anything else), at a seventh of what testing each id's type in
    Python cost: a router reads every token of every block the fleet stores."""
    if not isinstance(value, (list, tuple)):
        raise EventFormatError("BlockStored.token_ids must be an array of integers")
    try:
        packed = struct.pack(f"{len(value)}q", *value)
    except struct.error:
        raise EventFormatError("BlockStored.token_ids must be an array of 64-bit integers") from None
    return tuple(value), packed


def _extra_keys(value: Any, blocks: int) -> tuple[tuple[Any, ...] | None, ...] | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple)) or len(value) != blocks:
        raise EventFormatError("BlockStored.extra_keys must hold one entry per block")
    out: list[tuple[Any, ...] | None] = []
    for entry in value:
        if entry is not None and not isinstance(entry, (list, tuple)):
            raise EventFormatError("each BlockStored.extra_keys entry must be an array or null")
        out.append(tuple(entry) if entry is not None else None)
    return tuple(out)


def _stored(fields: Mapping[str, Any]) -> BlockStored:
    """A BlockStored from its fields. Checked with few calls: a busy engine stores each block it
    fills while decoding as an event of its own, so this runs once per such block."""
    hashes = _hashes(fields.get("block_hashes"), "BlockStored")
    parent = fields.get("parent_block_hash")
    if parent is not None and type(parent) not in _HASH_TYPES:
        raise EventFormatError("BlockStored.parent_block_hash must be an integer, bytes or null")
    block_size = fields.get("block_size")
    if type(block_size) is not int or block_size <= 0:
        raise EventFormatError("BlockStored.block_size must be a positive integer")
    tokens, packed = _token_ids(fields.get("token_ids"))
    if len(tokens) != len(hashes) * block_size:
        raise EventFormatError(
            f"BlockStored has {len(tokens)} token ids for {len(hashes)} blocks of {block_size} tokens"
        )
    get = fields.get
    lora_name, medium, extra_keys, lora_id = get("lora_name"), get("medium"), get("extra_keys"), get("lora_id")
    if lora_name is not None or extra_keys is not None or lora_id is not None or type(medium) is not str:
        lora_name = _optional_str(lora_name, "BlockStored.lora_name")
        medium = _optional_str(medium, "BlockStored.medium")
        extra_keys = _extra_keys(extra_keys, len(hashes))
        lora_id = _optional_int(lora_id, "BlockStored.lora_id")
    return BlockStored(hashes, parent, tokens, block_size, lora_name, medium, extra_keys, lora_id, packed)


def _removed(fields: Mapping[str, Any]) -> BlockRemoved:
    return BlockRemoved(
        _hashes(fields.get("block_hashes"), "BlockRemoved"),
        _optional_str(fields.get("medium"), "BlockRemoved.medium"),
    )


# Field order of the positional (older vLLM) form, after the tag.
_POSITIONAL = {
    "BlockStored": ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name"),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


def decode_event(raw: Any) -> KVEvent | None:
    """One event from its map or positional form; None for a kind this reader does not know
    (a newer engine may add kinds; skipping them keeps the stream usable)."""
    if type(raw) is dict or isinstance(raw, Mapping):  # the ABC's check alone cost 0.5 us an event
        kind = raw.get("type")
        fields: Mapping[str, Any] = raw
    elif isinstance(raw, (list, tuple)) and raw:
        kind = raw[0]
        names = _POSITIONAL.get(kind) if isinstance(kind, str) else None
        if names is None:
            return None
        if len(raw) - 1 > len(names) and kind != "BlockStored":
            raise EventFormatError(f"{kind} has {len(raw) - 1} fields; at most {len(names)} are known")
        fields = dict(zip(names, raw[1:]))
        if kind == "BlockStored" and "medium" not in fields:
            fields = {**fields, "medium": MEDIUM_GPU}  # before tiers existed, every block was on the GPU
        if kind == "BlockRemoved" and "medium" not in fields:
            fields = {**fields, "medium": MEDIUM_GPU}
    else:
        raise EventFormatError("an event must be a map or a non-empty array")
    if kind == "BlockStored":
        return _stored(fields)
    if kind == "BlockRemoved":
        return _removed(fields)
    if kind == "AllBlocksCleared":
        return AllBlocksCleared()
    if isinstance(kind, str):
        return None
    raise EventFormatError("an event needs a string 'type'")


def decode_batch(raw: Any) -> EventBatch:
    """A batch from the unpacked msgpack payload `[ts, events, data_parallel_rank?]`."""
    if not isinstance(raw, (list, tuple)) or len(raw) not in (2, 3):
        raise EventFormatError("a KV event batch must be [ts, events] or [ts, events, data_parallel_rank]")
    ts, raw_events = raw[0], raw[1]
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise EventFormatError("the batch timestamp must be a number")
    if not isinstance(raw_events, (list, tuple)):
        raise EventFormatError("the batch's events must be an array")
    rank = _optional_int(raw[2], "data_parallel_rank") if len(raw) == 3 else None
    return EventBatch(float(ts), _decode_events(raw_events), rank)


def _decode_events(raw_events: Sequence[Any]) -> tuple[KVEvent, ...]:
    """The events in order, each run of consecutive removals (of one tier) as one BlockRemoved.

    vLLM sends one BlockRemoved per evicted block, so a busy engine's messages are mostly
    removals of one block each; as one event per run, a removed block costs a list extension
    here instead of an event object, a translation and an index update of its own."""
    events: list[KVEvent] = []
    removed: list[Any] = []  # the run's hashes, checked when it ends (one pass in C for all)
    medium: Any = MEDIUM_GPU
    for raw in raw_events:
        if type(raw) is dict and raw.get("type") == "BlockRemoved":
            hashes, tier = raw.get("block_hashes"), raw.get("medium")
            if tier != medium:
                _end_removals(removed, medium, events)
                medium = tier
            if not isinstance(hashes, (list, tuple)):
                raise EventFormatError("BlockRemoved: block_hashes must be an array")
            removed += hashes
            continue
        _end_removals(removed, medium, events)
        event = decode_event(raw)
        if event is not None:
            events.append(event)
    _end_removals(removed, medium, events)
    return tuple(events)


def _end_removals(removed: list[Any], medium: Any, events: list[KVEvent]) -> None:
    """The run of removals so far as one event (none when it is empty), and the run emptied."""
    if removed:
        events.append(BlockRemoved(_hashes(removed, "BlockRemoved"), _optional_str(medium, "BlockRemoved.medium")))
        removed.clear()


END_SEQUENCE = -1  # the number of the message that ends a replay


def decode_sequence(raw: bytes) -> int:
    """The message's sequence number: 8 bytes, big-endian (vLLM's replay end marker is -1)."""
    if len(raw) != 8:
        raise EventFormatError(f"a sequence number is 8 bytes, got {len(raw)}")
    return int.from_bytes(raw, "big", signed=True)


def encode_sequence(seq: int) -> bytes:
    return seq.to_bytes(8, "big", signed=True)


# -- writing -------------------------------------------------------------------------


def event_to_wire(event: KVEvent) -> dict[str, Any]:
    """The map form current vLLM sends (fields left at their defaults are omitted, as vLLM does)."""
    if isinstance(event, BlockStored):
        out: dict[str, Any] = {
            "type": "BlockStored",
            "block_hashes": list(event.block_hashes),
            "parent_block_hash": event.parent_block_hash,
            "token_ids": list(event.token_ids),
            "block_size": event.block_size,
            "lora_id": event.lora_id,
            "medium": event.medium,
            "lora_name": event.lora_name,
        }
        if event.extra_keys is not None:
            out["extra_keys"] = [list(k) if k is not None else None for k in event.extra_keys]
        return out
    if isinstance(event, BlockRemoved):
        return {"type": "BlockRemoved", "block_hashes": list(event.block_hashes), "medium": event.medium}
    return {"type": "AllBlocksCleared"}


def event_to_positional(event: KVEvent) -> list[Any]:
    """The positional form older vLLM sent (tests decode both)."""
    if isinstance(event, BlockStored):
        return [
            "BlockStored",
            list(event.block_hashes),
            event.parent_block_hash,
            list(event.token_ids),
            event.block_size,
            event.lora_id,
            event.medium,
        ]
    if isinstance(event, BlockRemoved):
        return ["BlockRemoved", list(event.block_hashes), event.medium]
    return ["AllBlocksCleared"]


def batch_to_wire(batch: EventBatch) -> list[Any]:
    out: list[Any] = [batch.ts, [event_to_wire(e) for e in batch.events]]
    if batch.data_parallel_rank is not None:
        out.append(batch.data_parallel_rank)
    return out


def first_block_salt(event: BlockStored) -> str | None:
    """The cache_salt that entered the first stored block's hash, if any. vLLM lists a block's
    extra keys in order: the LoRA name (when the request has an adapter), multimodal
    identifier pairs, then the cache_salt (on the prompt's first block only)."""
    if not event.extra_keys or event.extra_keys[0] is None:
        return None
    strings = [value for value in event.extra_keys[0] if isinstance(value, str)]
    if event.lora_name is not None and strings and strings[0] == event.lora_name:
        strings = strings[1:]
    return strings[0] if strings else None


def block_tokens(event: BlockStored) -> Sequence[Sequence[int]]:
    """The stored blocks' token ids, one tuple per block."""
    size = event.block_size
    tokens = event.token_ids
    return [tokens[i : i + size] for i in range(0, len(tokens), size)]
