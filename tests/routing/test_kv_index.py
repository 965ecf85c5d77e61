"""From an engine's events to our keys: engine-sim's real cache is the event source."""

from prefixroute.engine_model.kv_cache import KVCache, block_hashes
from prefixroute.routing.kv_events import BlockRemoved, BlockStored, EventBatch, KVEvent
from prefixroute.routing.kv_index import EngineKeys, IndexChanges
from prefixroute.routing.token_blocks import chain, first_seed

MODEL = "m"


def engine(capacity: int = 100) -> tuple[KVCache, list[KVEvent]]:
    events: list[KVEvent] = []
    return KVCache(capacity, 4, events.append), events


def serve(cache: KVCache, tokens: list[int], salt: str | None = None) -> None:
    cache.serve(block_hashes(tokens, 4, salt), len(tokens), tokens, salt)


def apply(keys: EngineKeys, events: list[KVEvent]) -> IndexChanges:
    out = keys.apply(EventBatch(0.0, tuple(events)))
    events.clear()
    return out


def test_stored_blocks_get_the_keys_a_request_for_the_same_tokens_has():
    cache, events = engine()
    keys = EngineKeys(MODEL, 4, 1000)
    prompt = list(range(30))  # 7 full blocks
    serve(cache, prompt, "salt")
    out = apply(keys, events)
    assert out.steps == [("stored", chain(prompt, 4, first_seed(MODEL, None, "salt")))]


def test_a_continuation_is_keyed_from_its_parent_and_reused_blocks_are_not_announced():
    cache, events = engine()
    keys = EngineKeys(MODEL, 4, 1000)
    first, longer = list(range(16)), list(range(16)) + [100 + i for i in range(8)]
    serve(cache, first)
    apply(keys, events)
    serve(cache, longer)
    stored = [e for e in events if isinstance(e, BlockStored)]
    assert len(stored) == 1
    assert stored[0].parent_block_hash is not None
    assert len(stored[0].block_hashes) == 2
    out = apply(keys, events)
    assert out.steps == [("stored", chain(longer, 4, first_seed(MODEL))[4:])]


def test_evictions_translate_to_the_keys_that_were_stored():
    cache, events = engine(capacity=4)
    keys = EngineKeys(MODEL, 4, 1000)
    a, b = list(range(16)), list(range(1000, 1016))
    serve(cache, a)
    cache.release(block_hashes(a, 4))
    apply(keys, events)
    serve(cache, b)
    out = apply(keys, events)
    # vLLM evicts while allocating (removal first) and a finished prompt's tail first
    assert out.steps == [("removed", chain(a, 4, first_seed(MODEL))[::-1]), ("stored", chain(b, 4, first_seed(MODEL)))]
    assert len(keys) == 4


def test_unknown_parents_are_orphans_and_other_block_sizes_or_tiers_are_skipped():
    keys = EngineKeys(MODEL, 4, 1000)
    out = apply(
        keys,
        [
            BlockStored((1, 2), 999, tuple(range(8)), 4),
            BlockStored((3,), None, tuple(range(16)), 16),
            BlockStored((4,), None, tuple(range(4)), 4, medium="CPU"),
            BlockRemoved((5,)),
        ],
    )
    assert (out.orphaned, out.skipped, out.unknown_removed, out.steps) == (2, 2, 1, [])


def test_the_map_is_capped_oldest_first():
    cache, events = engine(capacity=1000)
    keys = EngineKeys(MODEL, 4, 3)
    serve(cache, list(range(20)))  # 5 blocks
    apply(keys, events)
    assert len(keys) == 3
    hashes = block_hashes(list(range(20)), 4)
    assert keys.key_of(hashes[0]) is None
    assert keys.key_of(hashes[4]) is not None


def test_a_reset_clears_the_map():
    cache, events = engine()
    keys = EngineKeys(MODEL, 4, 1000)
    serve(cache, list(range(8)))
    cache.reset()
    out = apply(keys, events)
    assert [kind for kind, _ in out.steps] == ["stored", "cleared"]
    assert len(keys) == 0


def test_replicas_sharing_chains_translate_each_stored_run_once_and_alike():
    from prefixroute.routing.kv_index import SharedChains

    cache, events = engine()
    chains = SharedChains()
    alone, one, other = (
        EngineKeys(MODEL, 4, 1000),
        EngineKeys(MODEL, 4, 1000, chains),
        EngineKeys(MODEL, 4, 1000, chains),
    )
    for prompt in (list(range(16)), list(range(16)) + [100 + i for i in range(8)], list(range(500, 520))):
        serve(cache, prompt, "salt")
        batch = EventBatch(0.0, tuple(events))
        events.clear()
        expected = alone.apply(batch).steps
        assert one.apply(batch).steps == other.apply(batch).steps == expected
    assert chains.hits == 3  # the second replica never hashed a token


def test_changes_of_one_kind_in_a_row_are_one_step_and_shared_runs_stay_intact():
    from prefixroute.routing.kv_index import SharedChains

    chains = SharedChains()
    keys = EngineKeys(MODEL, 4, 1000, chains)
    a, b = tuple(range(8)), tuple(range(100, 108))
    out = keys.apply(
        EventBatch(
            0.0,
            (BlockStored((1, 2), None, a, 4), BlockStored((3, 4), None, b, 4), BlockRemoved((1,)), BlockRemoved((9,))),
        )
    )
    first, second = chain(a, 4, first_seed(MODEL)), chain(b, 4, first_seed(MODEL))
    assert out.steps == [("stored", first + second), ("removed", first[:1])]
    assert out.unknown_removed == 1
    # the lists SharedChains keeps for the other replicas were not extended in place
    again = EngineKeys(MODEL, 4, 1000, chains).apply(EventBatch(0.0, (BlockStored((1, 2), None, a, 4),)))
    assert again.steps == [("stored", first)]


def test_a_hash_stored_again_is_the_newest_and_the_cap_drops_the_oldest():
    keys = EngineKeys(MODEL, 4, 3)
    keys.apply(EventBatch(0.0, (BlockStored((1, 2, 3), None, tuple(range(12)), 4),)))
    keys.apply(EventBatch(0.0, (BlockStored((1,), None, tuple(range(4)), 4),)))  # 1 again: now the newest
    keys.apply(EventBatch(0.0, (BlockStored((4,), None, tuple(range(50, 54)), 4),)))
    assert keys.key_of(2) is None  # the oldest went
    assert all(keys.key_of(h) is not None for h in (1, 3, 4))
