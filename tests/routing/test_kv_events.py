"""vLLM's KV event format: both event forms, what msgpack carries, and what is refused."""

import msgpack
import pytest

from prefixroute.routing.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    EventFormatError,
    batch_to_wire,
    block_tokens,
    decode_batch,
    decode_event,
    decode_sequence,
    encode_sequence,
    event_to_positional,
    first_block_salt,
)

STORED = BlockStored(
    block_hashes=(2**64 - 1, 7),
    parent_block_hash=None,
    token_ids=tuple(range(8)),
    block_size=4,
    extra_keys=(("tenant-salt",), None),
)


def wire_roundtrip(batch: EventBatch) -> EventBatch:
    return decode_batch(msgpack.unpackb(msgpack.packb(batch_to_wire(batch), use_bin_type=True), raw=False))


def test_map_form_survives_msgpack_with_unsigned_64_bit_hashes():
    batch = EventBatch(1.5, (STORED, BlockRemoved((7,)), AllBlocksCleared()))
    assert wire_roundtrip(batch) == batch


def test_data_parallel_rank_is_the_optional_third_field():
    assert wire_roundtrip(EventBatch(2.0, (), 3)) == EventBatch(2.0, (), 3)
    assert len(batch_to_wire(EventBatch(2.0, ()))) == 2


def test_a_payload_as_vllm_0_32_writes_it_decodes():
    # The fields current vLLM writes for a store of one block by a LoRA request with a
    # cache_salt (sha256 bytes hashes when VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0), plus
    # fields this reader does not use; field order is msgspec's, which a map does not need.
    raw = [
        1700000000.25,
        [
            {
                "type": "BlockStored",
                "block_hashes": [b"\x01" * 32],
                "parent_block_hash": None,
                "token_ids": [5, 6, 7, 8],
                "block_size": 4,
                "lora_id": 1,
                "medium": "GPU",
                "lora_name": "sql-adapter",
                "extra_keys": [["sql-adapter", "salt-1"]],
                "group_idx": 0,
                "session_id": None,
            },
            {"type": "BlockRemoved", "block_hashes": [b"\x02" * 32], "medium": "GPU", "group_idx": 0},
            {"type": "AllBlocksCleared"},
            {"type": "SomethingNewer", "x": 1},
        ],
        0,
    ]
    batch = decode_batch(msgpack.unpackb(msgpack.packb(raw, use_bin_type=True), raw=False))
    stored, removed, cleared = batch.events
    assert isinstance(stored, BlockStored)
    assert stored.block_hashes == (b"\x01" * 32,)
    assert stored.lora_name == "sql-adapter"
    assert first_block_salt(stored) == "salt-1"
    assert removed == BlockRemoved((b"\x02" * 32,), "GPU")
    assert cleared == AllBlocksCleared()
    assert batch.data_parallel_rank == 0


def test_older_positional_form_decodes_to_the_same_events():
    assert decode_event(event_to_positional(STORED)) == BlockStored(
        STORED.block_hashes, None, STORED.token_ids, 4, medium="GPU"
    )
    # the oldest form: no medium at all (every block was on the GPU)
    assert decode_event(["BlockStored", [1], 9, [1, 2], 2, None]) == BlockStored((1,), 9, (1, 2), 2)
    assert decode_event(["BlockRemoved", [1, 2]]) == BlockRemoved((1, 2))
    assert decode_event(["AllBlocksCleared"]) == AllBlocksCleared()
    assert decode_event(["Unknown", 1]) is None


@pytest.mark.parametrize(
    "raw",
    [
        {
            "type": "BlockStored",
            "block_hashes": [1],
            "parent_block_hash": None,
            "token_ids": [1, 2, 3],
            "block_size": 2,
        },
        {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": [1, 2], "block_size": 0},
        {"type": "BlockStored", "block_hashes": [1.5], "parent_block_hash": None, "token_ids": [1], "block_size": 1},
        {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": "x", "token_ids": [1], "block_size": 1},
        {"type": "BlockStored", "block_hashes": [1], "parent_block_hash": None, "token_ids": ["a"], "block_size": 1},
        {
            "type": "BlockStored",
            "block_hashes": [1],
            "parent_block_hash": None,
            "token_ids": [1],
            "block_size": 1,
            "extra_keys": [None, None],
        },
        {"type": "BlockRemoved", "block_hashes": 5},
        {"type": 3},
        "BlockStored",
    ],
)
def test_malformed_events_are_refused_with_a_reason(raw):
    with pytest.raises(EventFormatError):
        decode_event(raw)


@pytest.mark.parametrize("raw", [None, [], [1.0], [1.0, [], 0, 9], ["t", []], [1.0, {}], [1.0, [], "rank"]])
def test_malformed_batches_are_refused(raw):
    with pytest.raises(EventFormatError):
        decode_batch(raw)


def test_sequence_numbers_are_8_byte_big_endian():
    assert encode_sequence(1) == b"\x00" * 7 + b"\x01"
    assert decode_sequence(encode_sequence(2**40 + 3)) == 2**40 + 3
    assert decode_sequence(encode_sequence(-1)) == -1
    with pytest.raises(EventFormatError):
        decode_sequence(b"\x01")


def test_salt_is_read_from_the_first_block_only_and_after_the_lora_name():
    assert first_block_salt(STORED) == "tenant-salt"
    assert first_block_salt(BlockStored((1,), None, (1,), 1)) is None
    lora_only = BlockStored((1,), None, (1,), 1, lora_name="a", extra_keys=(("a",),))
    assert first_block_salt(lora_only) is None
    assert [list(b) for b in block_tokens(STORED)] == [[0, 1, 2, 3], [4, 5, 6, 7]]


def test_removals_in_a_row_become_one_event_per_tier():
    # vLLM sends one BlockRemoved per evicted block; a run of them is one event, split where
    # the tier changes, and a store between two runs keeps its place.
    raw = [
        3.0,
        [
            {"type": "BlockRemoved", "block_hashes": [1], "medium": "GPU"},
            {"type": "BlockRemoved", "block_hashes": [2], "medium": "GPU"},
            {"type": "BlockRemoved", "block_hashes": [3], "medium": "CPU"},
            {
                "type": "BlockStored",
                "block_hashes": [4],
                "parent_block_hash": None,
                "token_ids": [1],
                "block_size": 1,
                "medium": "GPU",
            },
            {"type": "BlockRemoved", "block_hashes": [5, 6], "medium": "GPU"},
            {"type": "BlockRemoved", "block_hashes": [], "medium": "GPU"},
        ],
    ]
    batch = decode_batch(msgpack.unpackb(msgpack.packb(raw, use_bin_type=True), raw=False))
    assert batch.events == (
        BlockRemoved((1, 2), "GPU"),
        BlockRemoved((3,), "CPU"),
        BlockStored((4,), None, (1,), 1),
        BlockRemoved((5, 6), "GPU"),
    )


@pytest.mark.parametrize(
    "removal",
    [
        {"type": "BlockRemoved", "block_hashes": [True], "medium": "GPU"},
        {"type": "BlockRemoved", "block_hashes": 7},
        {"type": "BlockRemoved", "block_hashes": [7], "medium": 3},
    ],
)
def test_a_malformed_removal_in_a_run_is_refused(removal):
    with pytest.raises(EventFormatError):
        decode_batch([1.0, [{"type": "BlockRemoved", "block_hashes": [1]}, removal]])


def test_decoded_token_ids_are_packed_once_as_hashing_reads_them():
    from array import array

    (stored,) = wire_roundtrip(EventBatch(1.0, (STORED,))).events
    assert isinstance(stored, BlockStored)
    assert stored.packed_tokens == array("q", range(8)).tobytes()
    assert stored == STORED  # derived: not compared
    with pytest.raises(EventFormatError):  # beyond 64 bits
        decode_event(
            {
                "type": "BlockStored",
                "block_hashes": [1],
                "parent_block_hash": None,
                "token_ids": [2**64],
                "block_size": 1,
            }
        )
