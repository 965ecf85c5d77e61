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


def test_never_exceeds_capacity_and_evicts_least_recently_freed():
    cache = KVCache(capacity_blocks=4, block_tokens=16)
    a, b = blocks_of(3, 0), blocks_of(3, 10_000)
    cache.insert(a)
    cache.insert(a[:1])  # a[0] is now the most recently freed
    cache.insert(b)
    assert len(cache) == 4
    assert a[0] in cache
    assert a[1] not in cache
    assert a[2] not in cache
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
    assert len(cache) == 0
    assert cache.serve(blocks, 33) == 0
    assert cache.queries == 66


def test_rejects_bad_sizes():
    with pytest.raises(ValueError, match="the cache needs at least one block"):
        KVCache(0)
    with pytest.raises(ValueError, match="block_tokens must be positive"):
        KVCache(10, 0)


# -- KV cache events, as vLLM publishes them -----------------------------------------


def events_of(cache_blocks: int = 8):
    from prefixroute.routing.kv_events import KVEvent

    got: list[KVEvent] = []
    return KVCache(cache_blocks, 4, got.append), got


def test_stored_blocks_carry_hashes_parent_tokens_and_the_salt_on_the_first_block():
    from prefixroute.routing.kv_events import BlockStored

    cache, got = events_of()
    tokens = list(range(10))  # two full blocks, two tokens of tail
    blocks = block_hashes(tokens, 4, "salt")
    cache.serve(blocks, len(tokens), tokens, "salt")
    assert got == [BlockStored(tuple(blocks), None, tuple(range(8)), 4, extra_keys=(("salt",), None))]
    got.clear()
    longer = [*tokens[:8], 50, 51, 52, 53]
    more = block_hashes(longer, 4, "salt")
    cache.serve(more, len(longer), longer, "salt")
    assert got == [BlockStored((more[2],), more[1], (50, 51, 52, 53), 4)]  # the reused prefix is not announced again


def test_an_adapter_keys_every_block_and_is_announced_as_vllm_announces_it():
    from prefixroute.routing.kv_events import BlockStored, first_block_salt

    tokens = list(range(12))
    base, lora_a, lora_b = (
        block_hashes(tokens, 4),
        block_hashes(tokens, 4, adapter="a"),
        block_hashes(tokens, 4, adapter="b"),
    )
    # no block is shared across adapters
    assert not set(base) & set(lora_a)
    assert not set(lora_a) & set(lora_b)
    assert block_hashes(tokens, 4, "s", "a") != lora_a  # the salt still separates tenants of one adapter
    cache, got = events_of()
    salted = block_hashes(tokens, 4, "s2", "a")
    cache.serve(salted, len(tokens), tokens, "s2", "a")
    assert cache.matched(salted) == 3
    assert cache.matched(lora_a) == 0
    assert cache.matched(base) == 0
    (stored,) = got
    assert stored.lora_name == "a"
    assert stored.extra_keys == (("a", "s2"), ("a",), ("a",))
    assert first_block_salt(stored) == "s2"  # the router reads the salt past the adapter's name
    got.clear()
    longer = [*tokens, 7, 7, 7, 7]
    more = block_hashes(longer, 4, "s2", "a")
    cache.serve(more, len(longer), longer, "s2", "a")
    assert got == [BlockStored((more[3],), more[2], (7, 7, 7, 7), 4, lora_name="a", extra_keys=(("a",),))]


def test_evictions_and_resets_are_reported():
    from prefixroute.routing.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

    cache, got = events_of(cache_blocks=3)
    a, b = list(range(8)), list(range(100, 108))
    cache.serve(block_hashes(a, 4), 8, a)
    cache.release(block_hashes(a, 4))
    got.clear()
    cache.serve(block_hashes(b, 4), 8, b)
    # vLLM evicts while it allocates, so the removal comes first; a's tail goes, its first block stays
    assert [type(e) for e in got] == [BlockRemoved, BlockStored]
    assert got[0] == BlockRemoved((block_hashes(a, 4)[1],))
    cache.reset()
    assert got[-1] == AllBlocksCleared()
    assert len(cache) == 0


# -- which block goes first: vLLM's free queue -----------------------------------------


def test_a_finished_request_frees_its_tail_first_so_its_leading_blocks_stay_usable():
    cache = KVCache(capacity_blocks=6, block_tokens=16)
    a, b = blocks_of(4, 0), blocks_of(4, 10_000)
    cache.insert(a)
    assert cache.eviction_order() == list(reversed(a))
    cache.insert(b)  # needs 2 more blocks than there is room for: a's last two go
    assert a[2] not in cache
    assert a[3] not in cache
    assert cache.matched(a) == 2  # what is left of a is its prefix, still a hit


def test_blocks_of_running_requests_are_never_evicted():
    cache = KVCache(capacity_blocks=4, block_tokens=16)
    running = blocks_of(3, 0)
    cache.serve(running, 3 * 16 + 1)
    for i in range(5):
        cache.insert(blocks_of(2, 100_000 + i * 1000))
        assert all(block in cache for block in running)
    cache.release(running)
    cache.insert(blocks_of(4, 500_000))
    assert not any(block in cache for block in running)
    assert len(cache) == 4


def test_while_running_requests_need_more_than_the_capacity_the_cache_holds_them_then_shrinks():
    cache = KVCache(capacity_blocks=4, block_tokens=16)
    a, b = blocks_of(3, 0), blocks_of(3, 10_000)
    cache.serve(a, 49)
    cache.serve(b, 49)
    assert len(cache) == 6  # both in use: nothing can go
    cache.release(a)
    assert len(cache) == 4
    assert cache.matched(a) == 1  # a's tail went first
    cache.release(b)
    assert len(cache) == 4
    assert cache.matched(b) == 3


def test_a_hit_takes_blocks_out_of_the_free_queue_until_its_request_ends():
    cache = KVCache(capacity_blocks=5, block_tokens=16)
    a = blocks_of(3, 0)
    cache.insert(a)
    cache.serve(a[:2], 2 * 16 + 1)  # a later request reuses a's first two blocks
    assert cache.eviction_order() == [a[2]]
    cache.release(a[:2])
    assert cache.eviction_order() == [a[2], a[1], a[0]]


def test_a_reset_while_running_forgets_the_running_blocks_and_their_release_is_harmless():
    cache = KVCache(capacity_blocks=4, block_tokens=16)
    a = blocks_of(2, 0)
    cache.serve(a, 33)
    cache.reset()
    cache.release(a)
    assert len(cache) == 0
    assert cache.eviction_order() == []


def test_no_tokens_or_no_listener_means_no_events():
    cache, got = events_of()
    cache.serve(blocks_of(2, block=4), 8)
    assert got == []
    assert len(cache) == 2
