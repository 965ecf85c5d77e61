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
