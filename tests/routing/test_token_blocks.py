"""Token block keys: chained, continuable from any block, and seeded by model, adapter and salt."""

import pytest

from prefixroute.routing.token_blocks import chain, first_seed, tail_key


def test_a_chain_continues_from_the_last_key_of_its_prefix():
    tokens = list(range(100))
    seed = first_seed("m")
    whole = chain(tokens, 16, seed)
    head = chain(tokens[:48], 16, seed)
    assert len(whole) == 6  # 100 tokens: six full blocks, the tail is not keyed
    assert whole == head + chain(tokens[48:], 16, head[-1])


def test_model_adapter_and_salt_each_change_every_key():
    tokens = list(range(32))
    keys = {
        tuple(chain(tokens, 16, first_seed(*parts)))
        for parts in [
            ("m", None, None),
            ("m2", None, None),
            ("m", "lora", None),
            ("m", None, "salt"),
            ("m", "lora", "salt"),
        ]
    }
    assert len(keys) == 5
    assert first_seed("m", None, None) == first_seed("m", "", "")


def test_equal_prefixes_share_keys_and_a_different_token_breaks_the_chain():
    a = list(range(64))
    b = [*a[:20], 999, *a[21:]]
    ka, kb = chain(a, 16, 1), chain(b, 16, 1)
    assert ka[0] == kb[0]
    assert ka[1] != kb[1]
    assert ka[3] != kb[3]
    assert tail_key(a[:5], 1) != tail_key(a[:6], 1)
    with pytest.raises(ValueError, match="block_size must be positive"):
        chain(a, 0, 1)


def test_packed_ids_chain_to_the_same_keys():
    from array import array

    from prefixroute.routing.token_blocks import chain_packed

    tokens = list(range(1000, 1042))  # 10 full blocks of 4 and a partial one
    assert chain_packed(array("q", tokens).tobytes(), 4, 7) == chain(tokens, 4, 7)
