"""The compiled reader against the Python one: the same payloads, the same changes and maps.

The Python reader (`kv_events.decode_batch` + `kv_index.EngineKeys` without a native map) is
the definition. Random sequences of vLLM-shaped payloads go through both; every batch must
give equal steps and counters, and the maps must hold the same entries in the same order
(the cap drops the oldest, so order is behaviour). Shapes the native reader leaves to Python
must come back as None, never as a different reading.
"""

from __future__ import annotations

import msgpack  # type: ignore[import-untyped]
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.routing import kv_native
from prefixroute.routing.kv_events import EventBatch, EventFormatError, decode_batch
from prefixroute.routing.kv_index import EngineKeys, IndexChanges
from prefixroute.routing.prefix_index import PrefixIndex

pytestmark = pytest.mark.skipif(
    not kv_native.AVAILABLE, reason="prefixroute_native not built (native/) or PREFIXROUTE_NATIVE_KV=0"
)

BLOCK = 4
MODEL = "acme/model"
HASHES = st.integers(0, 40)  # a small pool: parents are found, stores repeat, removals hit
MEDIA = st.sampled_from(["GPU", None, "CPU"])


@st.composite
def stored(draw: st.DrawFn) -> dict[str, object]:
    blocks = draw(st.integers(0, 4))
    size = draw(st.sampled_from([BLOCK, BLOCK, BLOCK, 8]))
    lora = draw(st.sampled_from([None, None, "sql", ""]))
    event: dict[str, object] = {
        "type": "BlockStored",
        "block_hashes": draw(st.lists(HASHES, min_size=blocks, max_size=blocks, unique=True)),
        "parent_block_hash": draw(st.one_of(st.none(), HASHES)),
        "token_ids": draw(st.lists(st.integers(0, 2**40), min_size=blocks * size, max_size=blocks * size)),
        "block_size": size,
        "lora_id": None if lora is None else 1,
        "medium": draw(MEDIA),
        "lora_name": lora,
    }
    if blocks and draw(st.booleans()):
        first = draw(
            st.lists(st.one_of(st.sampled_from(["sql", "tenant-a", "tenant-b"]), st.integers(0, 9)), max_size=3)
        )
        event["extra_keys"] = [first, *([None] * (blocks - 1))]
    if draw(st.booleans()):
        event["unknown_field"] = {"nested": [1, "x", None, 2.5]}  # a newer engine's field: ignored
    return event


removed = st.builds(
    lambda hashes, medium: {"type": "BlockRemoved", "block_hashes": hashes, "medium": medium},
    st.lists(HASHES, min_size=1, max_size=4),
    MEDIA,
)
cleared = st.just({"type": "AllBlocksCleared"})
events = st.lists(st.one_of(stored(), stored(), removed, removed, cleared), max_size=6)
batches = st.lists(st.tuples(events, st.sampled_from([None, 0, 2])), min_size=1, max_size=8)


def _payload(raw_events: list[dict[str, object]], rank: int | None) -> bytes:
    batch: list[object] = [1700000000.25, raw_events]
    if rank is not None:
        batch.append(rank)
    return msgpack.packb(batch, use_bin_type=True)  # type: ignore[no-any-return]


def _python_keys(capacity: int) -> EngineKeys:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kv_native, "new_keys", lambda *args: None)
        return EngineKeys(MODEL, BLOCK, capacity)


def _python_entries(keys: EngineKeys) -> list[tuple[object, int]]:
    return list(keys._keys.items())


def _native_entries(keys: EngineKeys) -> list[tuple[int, int]]:
    assert keys._native is not None
    assert not keys._keys
    return keys._native.items()


def _same(a: IndexChanges, b: IndexChanges) -> None:
    assert a.steps == b.steps
    fields = ("orphaned", "skipped", "unknown_removed", "clears", "stored_blocks", "removed_blocks")
    assert [getattr(a, f) for f in fields] == [getattr(b, f) for f in fields]


@settings(max_examples=300, deadline=None)
@given(batches=batches, capacity=st.sampled_from([3, 1000]))
def test_both_readers_make_the_same_changes_and_maps(batches, capacity):
    python, native = _python_keys(capacity), EngineKeys(MODEL, BLOCK, capacity)
    for raw_events, rank in batches:
        payload = _payload(raw_events, rank)
        by_python = decode_batch(msgpack.unpackb(payload, raw=False, strict_map_key=False))
        read = kv_native.decode(payload)
        assert read is not None  # every shape drawn here is one the native reader takes
        assert (read.ts, read.data_parallel_rank, read.event_count) == (
            by_python.ts,
            by_python.data_parallel_rank,
            len(by_python.events),
        )
        _same(python.apply(by_python), native.apply(EventBatch(read.ts, (), rank, read)))
        assert _python_entries(python) == _native_entries(native)
        assert len(python) == len(native)


def test_a_python_read_batch_uses_the_same_native_map():
    """An older engine's positional form is read in Python, onto the map the native reader fills."""
    keys = EngineKeys(MODEL, BLOCK, 100)
    stored_first = {"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None, "token_ids": [1, 2, 3, 4]}
    first = _payload([{**stored_first, "block_size": BLOCK}], None)
    read = kv_native.decode(first)
    assert read is not None
    out = keys.apply(EventBatch(read.ts, (), None, read))
    positional = [1.0, [["BlockStored", [8], 7, [5, 6, 7, 8], BLOCK, None, "GPU"], ["BlockRemoved", [7], "GPU"]]]
    assert kv_native.decode(msgpack.packb(positional)) is None  # positional: Python's
    later = keys.apply(decode_batch(positional))
    assert later.orphaned == 0
    assert [kind for kind, _ in later.steps] == ["stored", "removed"]
    assert later.steps[1][1] == out.steps[0][1]  # the parent's key, found in the native map
    assert keys.key_of(8) == later.steps[0][1][0]
    assert keys.key_of(7) is None


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        msgpack.packb([1.0, [{"type": "BlockRemoved", "block_hashes": [b"\x01" * 32]}]]),  # raw digests
        msgpack.packb([1.0, [{"type": "BlockRemoved", "block_hashes": [-1]}]]),
        msgpack.packb([1.0, [{"type": "Mystery"}]]),  # a kind it does not know
        msgpack.packb([True, []]),  # a bool is no timestamp
        msgpack.packb([1.0, [{"type": "BlockStored", "block_hashes": [1], "token_ids": [1, 2], "block_size": BLOCK}]]),
        msgpack.packb([1.0, []]) + b"\x00",  # trailing bytes
        msgpack.packb([1.0, [], 0, 0]),
    ],
)
def test_shapes_it_does_not_take_are_left_to_python(payload):
    assert kv_native.decode(payload) is None


def test_malformed_payloads_still_get_pythons_error():
    event = {"type": "BlockStored", "block_hashes": [1], "token_ids": [1, 2], "parent_block_hash": None}
    payload = msgpack.packb([1.0, [{**event, "block_size": BLOCK}]])
    assert kv_native.decode(payload) is None
    with pytest.raises(EventFormatError, match="2 token ids for 1 blocks"):
        decode_batch(msgpack.unpackb(payload))


def test_raw_digest_hashes_live_beside_the_native_map():
    """vLLM told to publish SHA-256 digests sends bytes: the dict holds those, the rest stays native."""
    keys = EngineKeys(MODEL, BLOCK, 100)
    digest = b"\x01" * 32
    stored = [1.0, [{"type": "BlockStored", "block_hashes": [digest, 5], "parent_block_hash": None,
                     "token_ids": list(range(8)), "block_size": BLOCK}]]  # fmt: skip
    assert kv_native.decode(msgpack.packb(stored)) is None
    out = keys.apply(decode_batch(stored))
    assert len(keys) == 2
    assert keys.key_of(digest) == out.steps[0][1][0]
    assert keys.key_of(5) == out.steps[0][1][1]
    removed = keys.apply(decode_batch([2.0, [{"type": "BlockRemoved", "block_hashes": [digest, 5, 6]}]]))
    assert removed.steps == [("removed", out.steps[0][1])]
    assert removed.unknown_removed == 1
    assert len(keys) == 0


# -- the events' view ------------------------------------------------------------------

MEMBERS = st.sampled_from(["a", "b", "c", "d"])
CHAINS = [[1000 * c + i for i in range(12)] for c in range(3)]  # three prompts' keys


@st.composite
def view_changes(draw: st.DrawFn) -> tuple[str, str, list[int]]:
    """What engines' events do to a member's view: store a prefix of a prompt, evict a tail of
    one (an engine evicts a prompt's last blocks first), clear."""
    kind = draw(st.sampled_from(["record", "record", "remove", "forget"]))
    chain = draw(st.sampled_from(CHAINS))
    cut = draw(st.integers(0, len(chain)))
    blocks = chain[:cut] if kind == "record" else chain[cut:]
    return kind, draw(MEMBERS), blocks


def _same_view(python: PrefixIndex, native: object, limit: int | None) -> None:
    for chain in CHAINS:
        for end in (1, 5, 12):
            blocks = chain[:end]
            assert native.matches(blocks, limit) == python.matches(blocks, limit)  # type: ignore[attr-defined]
            for member in "abcde":
                assert native.matched(member, blocks) == python.matched(member, blocks)  # type: ignore[attr-defined]
        assert native.holders(chain[3]) == python.holders(chain[3])  # type: ignore[attr-defined]
    assert native.sizes() == python.sizes()  # type: ignore[attr-defined]
    assert native.members() == python.members()  # type: ignore[attr-defined]
    assert native.size() == python.size()  # type: ignore[attr-defined]
    assert native.distinct_blocks() == python.distinct_blocks()  # type: ignore[attr-defined]


@settings(max_examples=300, deadline=None)
@given(changes=st.lists(view_changes(), max_size=30), limit=st.sampled_from([None, 1, 2, 3]))
def test_the_native_view_answers_as_the_python_index(changes, limit):
    python, native = PrefixIndex(1000), kv_native.new_index(1000)
    assert native is not None
    for kind, member, blocks in changes:
        if kind == "forget":
            python.forget(member)
            native.forget(member)
        else:
            getattr(python, kind)(member, blocks)
            getattr(native, kind)(member, blocks)
        native.check()
        _same_view(python, native, limit)


@settings(max_examples=200, deadline=None)
@given(
    changes=st.lists(st.tuples(MEMBERS, st.lists(st.integers(0, 30), max_size=8, unique=True)), max_size=25),
    removals=st.lists(st.tuples(MEMBERS, st.lists(st.integers(0, 30), max_size=6)), max_size=10),
)
def test_the_native_view_keeps_the_cap_and_lru_order_as_the_python_index(changes, removals):
    """Any keys at all, a cap of 5: the LRU decides what each member keeps (matches' walk is
    only compared on prompts, above)."""
    python, native = PrefixIndex(5), kv_native.new_index(5)
    assert native is not None
    for member, blocks in changes:
        python.record(member, blocks)
        native.record(member, blocks)
    for member, blocks in removals:
        python.remove(member, blocks)
        native.remove(member, blocks)
    native.check()
    python.check()
    assert native.sizes() == python.sizes()
    assert native.members() == python.members()
    for key in range(31):
        assert native.holders(key) == python.holders(key)
    for member in "abcd":
        assert [native.matched(member, [k]) for k in range(31)] == [python.matched(member, [k]) for k in range(31)]


def test_a_check_catches_a_wrong_view():
    native = kv_native.new_index(2)
    assert native is not None
    native.record("a", [1, 2, 3])
    assert native.size("a") == 2  # the oldest went
    native.check()
    with pytest.raises(ValueError, match="positive"):
        kv_native.new_index(0)


def test_members_that_leave_give_their_names_back():
    """Engine pods come and go under new names: the view keeps no name of a member gone."""
    native = kv_native.new_index(100)
    assert native is not None
    for generation in range(50):
        native.record(f"engine-{generation}", [generation, 1000])
        if generation:
            native.remove(f"engine-{generation - 1}", [generation - 1, 1000])  # evicted all it held
        native.check()  # no id left for a member holding nothing
    assert native.members() == ["engine-49"]
    assert native.holders(1000) == frozenset({"engine-49"})
    native.forget("engine-49")
    native.check()
    native.record("engine-new", [7])
    assert native.sizes() == {"engine-new": 1}
