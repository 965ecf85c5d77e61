import pytest

from prefixroute.engine_model import tokenizer
from prefixroute.engine_model.kv_cache import KVCache, block_hashes
from prefixroute.routing.blocks import chained_hashes


def blocks_of(n_blocks: int, start: int = 0, salt: str | None = None, block: int = 16) -> list[int]:
    return block_hashes(list(range(start, start + n_blocks * block)), block, salt)


def test_block_hashes_are_the_routing_cores_chained_hashes():
    tokens = list(tokenizer.encode("x" * 4 * 40))
    assert block_hashes(tokens, 16, "s") == chained_hashes(tokens, 16, "s")
    assert len(block_hashes(tokens, 16)) == 2  # 40 tokens: two full blocks, the tail is not cached


def test_lru_never_exceeds_capacity_and_evicts_least_recent():
    cache = KVCache(capacity_blocks=4, block_tokens=16)
    a, b = blocks_of(3, 0), blocks_of(3, 10_000)
    cache.insert(a)
    cache.insert(a[:1])  # a[0] is now the most recent
    cache.insert(b)
    assert len(cache) == 4
    assert a[0] in cache and a[1] not in cache and a[2] not in cache
    assert all(x in cache for x in b)
    for i in range(50):
        cache.insert(blocks_of(2, 100_000 + i * 1000))
        assert len(cache) <= 4


@pytest.mark.parametrize(
    ("prompt_tokens", "stored_blocks", "expected_cached"),
    [
        (64, 4, 48),  # fully cached: the block holding the last token is recomputed
        (65, 4, 64),  # four full blocks cached, the 65th token computed
        (70, 2, 32),  # two of four blocks held
        (15, 0, 0),  # shorter than a block: nothing to cache
    ],
)
def test_hit_accounting_is_matched_full_blocks_times_block_tokens(prompt_tokens, stored_blocks, expected_cached):
    cache = KVCache(capacity_blocks=1000, block_tokens=16)
    tokens = list(range(prompt_tokens))
    blocks = block_hashes(tokens, 16)
    cache.insert(blocks[:stored_blocks])
    assert cache.serve(blocks, prompt_tokens) == expected_cached
    assert (cache.queries, cache.hits) == (prompt_tokens, expected_cached)


def test_a_miss_in_the_middle_stops_the_match():
    cache = KVCache(capacity_blocks=100, block_tokens=16)
    blocks = blocks_of(6)
    cache.insert(blocks[:2] + blocks[3:])
    assert cache.matched(blocks) == 2


def test_second_identical_prompt_hits_and_counters_add_up():
    cache = KVCache(capacity_blocks=100, block_tokens=16)
    tokens = list(range(100))
    blocks = block_hashes(tokens, 16)
    assert cache.serve(blocks, 100) == 0
    assert cache.serve(blocks, 100) == 96
    assert (cache.queries, cache.hits) == (200, 96)


def test_salt_isolates_blocks():
    cache = KVCache(capacity_blocks=100, block_tokens=16)
    tokens = list(range(64))
    cache.serve(block_hashes(tokens, 16, "tenant-a"), 64)
    assert cache.serve(block_hashes(tokens, 16, "tenant-b"), 64) == 0
    assert cache.serve(block_hashes(tokens, 16), 64) == 0
    assert cache.serve(block_hashes(tokens, 16, "tenant-a"), 64) == 48


def test_reset_empties_but_keeps_counting():
    cache = KVCache(capacity_blocks=10, block_tokens=16)
    blocks = blocks_of(2)
    cache.serve(blocks, 33)
    cache.reset()
    assert len(cache) == 0 and cache.serve(blocks, 33) == 0 and cache.queries == 66


def test_rejects_bad_sizes():
    with pytest.raises(ValueError):
        KVCache(0)
    with pytest.raises(ValueError):
        KVCache(10, 0)
