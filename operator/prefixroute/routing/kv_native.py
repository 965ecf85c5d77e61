"""The compiled reader of KV event payloads, `prefixroute_native` (built from native/), when installed.

It reads a message's msgpack payload straight into the router's block keys: no Python object
per token or per block, where the Python reader (`kv_events` + `kv_index`) makes a Python int
of every token id a busy fleet's engines store. And it holds the events' view of which member
holds which key (`NativeIndex`, `PrefixIndex`'s behaviour), which every stored and removed
block updates: in Python that view's dicts cost more per block than the rest together. It takes the shapes current engines send
(map-form events, integer block hashes); `decode` answers None for anything else and the
caller reads that payload in Python, which stays the definition of the format (and names
what is wrong with a malformed payload). Both readers give the same changes, checked by
tests/routing/test_kv_native.py over random batches.

`PREFIXROUTE_NATIVE_KV=0` turns it off (the benches compare both); without the module, the
Python reader does everything, as before it existed.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prefixroute_native import NativeBatch, NativeIndex, NativeKeys

_module: Any = None
if os.environ.get("PREFIXROUTE_NATIVE_KV", "1") != "0":
    try:
        import prefixroute_native as _module
    except ImportError:  # not built here: the Python reader does the whole job
        _module = None

AVAILABLE: bool = _module is not None

U64_MAX = (1 << 64) - 1


def decode(payload: bytes) -> NativeBatch | None:
    """The payload's batch read natively, or None: read it in Python (or no native reader)."""
    return _module.decode(payload) if _module is not None else None


def new_keys(model: str, block_size: int, capacity: int) -> NativeKeys | None:
    """A native engine-hash -> key map, or None without the module."""
    return _module.NativeKeys(model, block_size, capacity) if _module is not None else None


def new_index(capacity_per_member: int) -> NativeIndex | None:
    """A native events' view (`PrefixIndex`'s interface for what precise mode asks), or None."""
    return _module.NativeIndex(capacity_per_member) if _module is not None else None


def is_u64(value: object) -> bool:
    """A block hash the native map can hold (vLLM's default: an unsigned 64-bit integer)."""
    return type(value) is int and 0 <= value <= U64_MAX
