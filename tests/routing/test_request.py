from hypothesis import given, settings
from hypothesis import strategies as st

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.request import request_from_tokens, routing_request

CONFIG = RoutingConfig(block_size=8, prefix_blocks=2)


def test_whole_tells_apart_prompts_whose_full_blocks_are_equal():
    a = routing_request("same full blocks tail a", CONFIG)
    b = routing_request("same full blocks tail b", CONFIG)
    assert a.blocks == b.blocks
    assert a.key == b.key
    assert a.whole != b.whole
    assert routing_request("same full blocks tail a", CONFIG).whole == a.whole


def test_whole_of_a_prompt_shorter_than_a_block_is_its_key():
    short = routing_request("tiny", CONFIG)
    assert short.blocks == ()
    assert short.whole == short.key


def test_whole_covers_the_prefix_too():
    # Equal tails after different full blocks are different prompts.
    assert routing_request("AAAAAAAA tail", CONFIG).whole != routing_request("BBBBBBBB tail", CONFIG).whole


def test_token_requests_have_a_whole_prompt_key_too():
    config = RoutingConfig(block_size=4, prefix_blocks=1)
    a = request_from_tokens([1, 2, 3, 4, 5, 6], config, "m")
    b = request_from_tokens([1, 2, 3, 4, 5, 7], config, "m")
    assert a.blocks == b.blocks
    assert a.whole != b.whole
    short = request_from_tokens([1, 2], config, "m")
    assert short.whole == short.key


ADAPTER_NAMES = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)


@settings(max_examples=200, deadline=None)
@given(
    prompt=st.text(min_size=0, max_size=80),
    a=ADAPTER_NAMES,
    b=ADAPTER_NAMES,
    tenant=st.none() | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6),
    isolate=st.booleans(),
)
def test_an_adapters_keys_never_match_the_base_models_or_another_adapters(
    prompt: str, a: str, b: str, tenant: str | None, isolate: bool
) -> None:
    config = RoutingConfig(block_size=8, prefix_blocks=2, isolate_tenants=isolate)
    base = routing_request(prompt, config, tenant)
    for_a = routing_request(prompt, config, tenant, adapter=a)
    assert for_a.adapter == a
    assert base.adapter is None
    keys_a = {*for_a.blocks, for_a.key, for_a.whole}
    assert keys_a.isdisjoint({*base.blocks, base.key, base.whole})
    if b != a:
        for_b = routing_request(prompt, config, tenant, adapter=b)
        assert keys_a.isdisjoint({*for_b.blocks, for_b.key, for_b.whole})
    # The same adapter, tenant and prompt: the same keys, so A's conversations find A's cache.
    assert routing_request(prompt, config, tenant, adapter=a) == for_a


def test_an_adapter_never_shares_a_key_with_a_tenant_salt() -> None:
    """Isolated tenant "x" on the base model and adapter "x" for no tenant salt differently."""
    prompt = "a prompt of several blocks, long enough to have a few" * 2
    isolated = RoutingConfig(block_size=8, prefix_blocks=2, isolate_tenants=True)
    tenant_x = routing_request(prompt, isolated, "x")
    adapter_x = routing_request(prompt, isolated, None, adapter="x")
    assert set(tenant_x.blocks).isdisjoint(adapter_x.blocks)


def test_precise_keys_carry_the_adapter_they_were_made_for() -> None:
    tokens = list(range(40))
    for_a = request_from_tokens(tokens, CONFIG, "base-model", adapter="a")
    base = request_from_tokens(tokens, CONFIG, "base-model")
    assert for_a.adapter == "a"
    assert base.adapter is None
    assert set(for_a.blocks).isdisjoint(base.blocks)
