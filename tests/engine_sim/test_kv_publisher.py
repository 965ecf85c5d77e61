"""engine-sim publishes its KV cache events over real ZMQ sockets, as vLLM does."""

import asyncio

import msgpack
import pytest
import zmq
import zmq.asyncio
from aiohttp.test_utils import TestClient, TestServer

from prefixroute.engine_model import tokenizer
from prefixroute.engine_sim.kv_publisher import KVEventsConfig, binds, parse_config
from prefixroute.engine_sim.server import create_app
from prefixroute.processes import free_port
from prefixroute.routing.kv_events import (
    END_SEQUENCE,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    decode_batch,
    decode_sequence,
    encode_sequence,
)
from tests.engine_sim.conftest import FAST

PROMPT = "You are a helpful assistant. " * 20  # 145 tokens: 9 full blocks of 16


def test_config_reads_vllms_json_and_refuses_mistakes():
    config = parse_config('{"enable_kv_cache_events": true, "endpoint": "tcp://*:6000", "topic": "kv@pod-0"}')
    assert config.enabled
    assert config.publisher == "zmq"
    assert config.topic == "kv@pod-0"
    assert not parse_config('{"enable_kv_cache_events": false}').enabled
    assert not parse_config('{"enable_kv_cache_events": true, "publisher": "null"}').enabled
    for bad, message in (
        ("[]", "must be a JSON object"),
        ("{", "is not valid JSON"),
        ('{"endpoint": 5}', "field 'endpoint' has the wrong type"),
        ('{"typo": 1}', r"has unknown field\(s\) typo"),
        ('{"publisher": "kafka"}', "publisher must be 'zmq' or 'null', got 'kafka'"),
        ('{"hwm": 0}', "hwm must be positive"),
    ):
        with pytest.raises(ValueError, match="^--kv-events-config " + message):
            parse_config(bad)
    assert binds("tcp://*:5557")
    assert binds("ipc:///tmp/x")
    assert not binds("tcp://10.0.0.1:5557")


async def receive(sub: zmq.asyncio.Socket, count: int) -> list[tuple[bytes, int, object]]:
    out = []
    for _ in range(count):
        topic, seq, payload = await asyncio.wait_for(sub.recv_multipart(), 10.0)
        out.append((topic, decode_sequence(seq), decode_batch(msgpack.unpackb(payload, raw=False))))
    return out


async def test_stores_evictions_and_resets_reach_a_subscriber_and_the_replay_endpoint():
    port, replay_port = free_port(), free_port()
    config = KVEventsConfig(
        enable_kv_cache_events=True,
        publisher="zmq",
        endpoint=f"tcp://*:{port}",
        replay_endpoint=f"tcp://*:{replay_port}",
        topic="kv@sim-0",
    )
    small = FAST.__class__(**{**FAST.__dict__, "kv_blocks": 12})
    ctx = zmq.asyncio.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.LINGER, 0)
        async with TestClient(TestServer(create_app(small, kv_events=config))) as client:
            sub.connect(f"tcp://127.0.0.1:{port}")
            await asyncio.sleep(0.3)  # PUB/SUB: a subscription takes a moment to reach the publisher
            body = {"model": "sim-model", "prompt": PROMPT, "max_tokens": 1, "cache_salt": "tenant-a"}
            assert (await client.post("/v1/completions", json=body)).status == 200
            ((topic, seq, batch),) = await receive(sub, 1)
            tokens = list(tokenizer.encode(PROMPT))
            assert topic == b"kv@sim-0"
            assert seq == 0
            (stored,) = batch.events
            assert isinstance(stored, BlockStored)
            assert len(stored.block_hashes) == 9
            assert stored.token_ids == tuple(tokens[: 9 * 16])
            assert stored.parent_block_hash is None
            assert stored.extra_keys is not None
            assert stored.extra_keys[0] == ("tenant-a",)
            assert all(0 <= h < 2**64 for h in stored.block_hashes)
            other = {"model": "sim-model", "prompt": "x" * 4 * 16 * 5, "max_tokens": 1}
            assert (await client.post("/v1/completions", json=other)).status == 200
            ((_, seq1, evicting),) = await receive(sub, 1)
            # vLLM evicts while it allocates: the removal comes first, and it takes the first prompt's tail
            assert seq1 == 1
            assert [type(e) for e in evicting.events] == [BlockRemoved, BlockStored]
            assert evicting.events[0].block_hashes == stored.block_hashes[:-3:-1]  # 9 + 5 blocks in a 12-block cache
            assert (await client.post("/reset_prefix_cache")).status == 200
            ((_, seq2, cleared),) = await receive(sub, 1)
            assert seq2 == 2
            assert cleared.events == (AllBlocksCleared(),)

            dealer = ctx.socket(zmq.DEALER)
            dealer.setsockopt(zmq.LINGER, 0)
            dealer.connect(f"tcp://127.0.0.1:{replay_port}")
            await dealer.send_multipart((b"", encode_sequence(1)))
            replayed = []
            while True:
                frames = await asyncio.wait_for(dealer.recv_multipart(), 10.0)
                _, topic, seq_raw, payload = frames
                if decode_sequence(seq_raw) == END_SEQUENCE:
                    break
                replayed.append((decode_sequence(seq_raw), decode_batch(msgpack.unpackb(payload, raw=False))))
            assert [(s, b.events) for s, b in replayed] == [(1, evicting.events), (2, cleared.events)]
            dealer.close()
    finally:
        ctx.destroy(linger=0)  # a failed assertion must not leave a context for the GC to hang on


def test_without_the_flag_nothing_is_published():
    from prefixroute.engine_sim.server import DRIVER

    assert create_app(FAST)[DRIVER].cache.on_event is None
    disabled = KVEventsConfig(enable_kv_cache_events=False)
    assert create_app(FAST, kv_events=disabled)[DRIVER].cache.on_event is None


def test_a_wildcard_endpoint_binds_the_servers_own_address_as_every_server_of_ours():
    from prefixroute.engine_sim.kv_publisher import on_host

    assert on_host("tcp://*:5557", "10.1.2.3") == "tcp://10.1.2.3:5557"
    assert on_host("tcp://*:5557", "fd00::5") == "tcp://[fd00::5]:5557"
    assert on_host("tcp://*:5557", "0.0.0.0") == on_host("tcp://*:5557", None) == "tcp://*:5557"
    assert on_host("tcp://10.9.9.9:5557", "10.1.2.3") == "tcp://10.9.9.9:5557"  # a connect endpoint stays


async def test_with_a_model_folder_the_engines_blocks_are_the_ones_a_router_with_that_folder_keys():
    """engine-sim tokenizing with a BPE folder announces blocks whose hashes and tokens are what a
    router given the same folder computes from the request, and a router fed those events finds
    its whole request cached there."""
    from prefixroute import prompt_tokens
    from prefixroute.engine_model.kv_cache import block_hashes
    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.dispatch import Dispatcher
    from prefixroute.routing.fleet import Fleet, Member
    from prefixroute.routing.kv_stream import KVEventsFollower
    from prefixroute.routing.request import request_from_tokens
    from tests.small_bpe import small_bpe_folder

    folder = str(small_bpe_folder())
    port = free_port()
    config = KVEventsConfig(enable_kv_cache_events=True, publisher="zmq", endpoint=f"tcp://*:{port}", topic="t")
    engine = FAST.__class__(**{**FAST.__dict__, "tokenizer": folder})
    body = {
        "model": "sim-model",
        "messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": "and the weather?"}],
        "max_tokens": 1,
        "cache_salt": "tenant-a",
    }
    ctx = zmq.asyncio.Context()
    try:
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.setsockopt(zmq.LINGER, 0)
        async with TestClient(TestServer(create_app(engine, kv_events=config))) as client:
            sub.connect(f"tcp://127.0.0.1:{port}")
            await asyncio.sleep(0.3)
            answer = await client.post("/v1/chat/completions", json=body)
            assert answer.status == 200
            usage = (await answer.json())["usage"]
            ((_, seq, batch),) = await receive(sub, 1)
            info = await (await client.get("/get_server_info")).json()
    finally:
        ctx.destroy(linger=0)
    tokens = list(prompt_tokens.load(folder)("chat", body))  # the router's keying of the request
    assert usage["prompt_tokens"] == len(tokens)
    full = len(tokens) // 16
    (stored,) = batch.events
    assert stored.token_ids == tuple(tokens[: full * 16])
    assert list(stored.block_hashes) == block_hashes(tokens, 16, "tenant-a")
    assert info["tokenizer"] == folder

    routing = RoutingConfig(block_size=16, strategy="prefix-cache")
    dispatcher = Dispatcher(routing)
    dispatcher.set_fleet(Fleet((Member("a", "http://a"), Member("b", "http://b")), routing.virtual_nodes))
    follower = KVEventsFollower(dispatcher, "sim-model", 16, 1 << 16, stale_after=1e18)
    follower.follow(["a", "b"])
    follower.receive("b", seq, batch, 0.0)
    ticket = dispatcher.route(request_from_tokens(tokens, routing, "sim-model", None, "tenant-a"), (), frozenset())
    assert ticket.member.name == "b"
    assert ticket.matched == full
