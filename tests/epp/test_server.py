"""The EPP as its server assembles it. Its front door, message by message, with the gate built
as the server builds it (its key file loaded): API keys (401, the key never reaches the
engine), tenant limits (429 with Retry-After), fair admission (a wait for room, or 503 with
Retry-After), and the pass left when the request is over, however it ends. And the whole
server in precise mode with real parts: engine-sims publishing their KV events, Envoy in
front of the pickers, requests keyed by the engine's tokens and routed by what the engines
announced."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from prefixroute.epp.exchange import Exchange, gated_replies_for, replies_for
from prefixroute.epp.server import EppServer, epp_state, gate_for
from prefixroute.epp.settings import EppSettings
from prefixroute.front.gate import GateSettings
from prefixroute.front.pipeline import Pipeline
from prefixroute.front.precise import PreciseSettings
from prefixroute.front.tenant import named_tenant, tenant_scoped_salt
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.tenancy.keys import key_digest
from tests.engine_sim.conftest import publishing_engine_sims
from tests.epp.gateway import Envoy, endpoints, start_envoy, start_epp
from tests.epp.helpers import BUFFERED, body, destination, headers, immediate_error, post, response_body
from tests.polling import until

CONFIG = RoutingConfig(block_size=16, prefix_blocks=2)
PROMPT = "The quick brown fox jumps over the lazy dog. " * 4


async def gated(
    tmp_path: Path, members: int = 2, keys: list[dict[str, object]] | None = None, **gate: object
) -> Pipeline:
    """A picker built as the server builds it (the gate with its key file loaded)."""
    if keys is not None:
        path = tmp_path / "keys.yaml"
        path.write_text(json.dumps(keys))  # JSON is YAML
        gate["api_keys"] = str(path)
    settings = EppSettings(backends=("http://x",), routing=CONFIG, gate=GateSettings(**gate))  # type: ignore[arg-type]
    state = epp_state(settings)
    state.apply_fleet(Fleet(tuple(Member(f"m{i}", f"http://10.0.0.{i + 1}:8000") for i in range(members))))
    door, source = gate_for(settings, state)
    if source is not None:
        source.check()  # what start() does first: read the file
    return Pipeline(state, door, settings.max_body_bytes)


def completion(prompt: str = PROMPT, **extra: object) -> bytes:
    return json.dumps({"model": "m", "prompt": prompt, "max_tokens": 4, **extra}).encode()


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def refusal(replies: list) -> tuple[int, dict, dict[str, str]]:  # type: ignore[type-arg]
    (reply,) = replies
    status, payload = immediate_error(reply)
    set_headers = reply.immediate_response.headers.set_headers
    return status, payload, {h.header.key: h.header.raw_value.decode() for h in set_headers}


def removed(reply) -> list[str]:  # type: ignore[no-untyped-def]
    kind = reply.WhichOneof("response")
    return list(getattr(reply, kind).response.header_mutation.remove_headers)


async def test_an_open_gate_decides_without_waiting(tmp_path: Path) -> None:
    picker = await gated(tmp_path, tenant_header="X-Tenant")
    assert picker.gate.open
    exchange = Exchange(picker)
    replies = replies_for(exchange, [headers(post()), body(completion())])
    assert exchange.pending is None
    assert destination(replies[0])[0] is not None


async def test_keys_on_no_key_is_401_and_a_good_key_goes_through_without_its_key(tmp_path: Path) -> None:
    picker = await gated(tmp_path, keys=[{"sha256": key_digest("sk-acme"), "tenant": "acme"}])
    assert not picker.gate.open
    exchange = Exchange(picker)
    assert exchange.on_message(headers(post())) == []
    assert exchange.on_message(body(completion())) == []
    assert exchange.pending is not None
    status, payload, sent = refusal(await exchange.resolve())
    assert status == 401
    assert payload["error"]["code"] == "invalid_api_key"
    assert sent["www-authenticate"].startswith("Bearer")
    status, payload, _ = refusal(
        await gated_replies_for(Exchange(picker), [headers(post(**bearer("sk-wrong"))), body(completion())])
    )
    assert status == 401
    assert payload["error"]["message"] == "the API key is not valid"
    # A good key: chosen, and the key is removed before the engine (the router does not forward it either).
    raw = completion(cache_salt="mine")
    replies = await gated_replies_for(Exchange(picker), [headers(post(**bearer("sk-acme"))), body(raw)])
    assert destination(replies[0])[0] is not None
    assert removed(replies[0]) == ["authorization"]
    # Keys on without isolation: the caller's own salt is kept within its tenant, as the router does.
    sent_body = json.loads(b"".join(r.request_body.response.body_mutation.streamed_response.body for r in replies[1:]))
    assert sent_body["cache_salt"] == tenant_scoped_salt(named_tenant("acme"), "mine")
    # BUFFERED: the headers were answered already, so the removal rides on the body's answer.
    buffered = await gated_replies_for(
        Exchange(picker), [headers(post(**bearer("sk-acme")), mode=BUFFERED), body(completion())]
    )
    assert removed(buffered[1]) == ["authorization"]
    assert destination(buffered[1])[0] is not None


async def test_a_tenant_over_its_concurrency_gets_429_until_its_request_ends(tmp_path: Path) -> None:
    picker = await gated(tmp_path, keys=[{"sha256": key_digest("sk-1"), "tenant": "one", "maxConcurrent": 1}])
    first = Exchange(picker)
    await gated_replies_for(first, [headers(post(**bearer("sk-1"))), body(completion())])
    status, payload, sent = refusal(
        await gated_replies_for(Exchange(picker), [headers(post(**bearer("sk-1"))), body(completion())])
    )
    assert status == 429
    assert payload["error"]["code"] == "rate_limit_exceeded"
    assert payload["error"]["type"] == "requests"
    assert int(sent["retry-after"]) >= 1
    replies_for(first, [response_body(b"done", end=True)])  # the first request is over: its slot is free
    second = Exchange(picker)
    replies = await gated_replies_for(second, [headers(post(**bearer("sk-1"))), body(completion())])
    assert destination(replies[0])[0] is not None
    # A stream the gateway cancels (the client left) gives the slot back too.
    second.close(True)
    assert picker.gate.limiter.in_flight("one") == 0
    third = Exchange(picker)
    replies = await gated_replies_for(third, [headers(post(**bearer("sk-1"))), body(completion())])
    assert destination(replies[0])[0] is not None
    third.close(False)  # the gateway ended the stream without response events: over, too
    assert picker.gate.limiter.in_flight("one") == 0
    assert sum(picker.state.load.get(m.name).in_flight for m in picker.state.fleet.members) == 0


async def test_fair_admission_waits_for_room_and_refuses_past_its_waiting_room(tmp_path: Path) -> None:
    picker = await gated(tmp_path, members=1, tenant_header="X-Tenant", max_in_flight_per_member=1, max_waiting=1,
                         max_wait_seconds=5)  # fmt: skip
    state = picker.state
    first = Exchange(picker)
    await gated_replies_for(first, [headers(post(**{"x-tenant": "a"})), body(completion())])
    # The engine is full: the next request waits at the picker (the gateway holds it meanwhile) ...
    second = Exchange(picker)
    waiting = asyncio.ensure_future(gated_replies_for(second, [headers(post(**{"x-tenant": "b"})), body(completion())]))
    for _ in range(100):
        await asyncio.sleep(0.01)
        if picker.gate.admission.waiting:
            break
    assert picker.gate.admission.waiting == 1
    assert not waiting.done()
    # ... a third finds the waiting room full: 503 overloaded with Retry-After, at once.
    status, payload, sent = refusal(
        await gated_replies_for(Exchange(picker), [headers(post(**{"x-tenant": "c"})), body(completion())])
    )
    assert status == 503
    assert payload["error"]["code"] == "overloaded"
    assert int(sent["retry-after"]) >= 1
    # The first request ends: the waiting one is admitted and routed.
    replies_for(first, [response_body(b"done", end=True)])
    replies = await asyncio.wait_for(waiting, 5)
    assert destination(replies[0])[0] == "10.0.0.1:8000"
    assert state.load.get("m0").in_flight == 1
    replies_for(second, [response_body(b"done", end=True)])
    assert state.load.get("m0").in_flight == 0
    assert picker.gate.limiter.in_flight("b") == 0


async def test_a_wait_past_its_limit_is_503_with_retry_after(tmp_path: Path) -> None:
    picker = await gated(tmp_path, members=1, max_in_flight_per_member=1, max_wait_seconds=0.1)
    await gated_replies_for(Exchange(picker), [headers(post()), body(completion())])
    status, payload, sent = refusal(await gated_replies_for(Exchange(picker), [headers(post()), body(completion())]))
    assert status == 503
    assert payload["error"]["code"] == "overloaded"
    assert "0.1 s" in payload["error"]["message"]
    assert sent["retry-after"] == "1"
    assert picker.gate.admission.waiting == 0


async def test_an_inference_objective_names_the_band_and_sheddable_work_is_refused(tmp_path: Path) -> None:
    picker = await gated(tmp_path, members=1, max_in_flight_per_member=1, objective_priorities="batch=-1,chat=5")
    objective = "x-gateway-inference-objective"
    first = Exchange(picker)
    await gated_replies_for(first, [headers(post(**{objective: "chat"})), body(completion())])
    status, payload, sent = refusal(
        await gated_replies_for(Exchange(picker), [headers(post(**{objective: "batch"})), body(completion())])
    )
    assert status == 503
    assert payload["error"]["code"] == "overloaded"
    assert sent["x-prefixroute-shed-reason"] == "sheddable"
    assert picker.gate.admission.waiting == 0
    replies_for(first, [response_body(b"done", end=True)])


# -- precise mode: real engine-sims publishing their KV events, real Envoys, real pickers --------

SYSTEM = "You are a careful assistant who answers in one short sentence. " * 4


@pytest.fixture
async def sims() -> AsyncIterator[tuple[list[str], list[str]]]:
    """Three engine-sims (in this loop, on real sockets), each publishing its KV events over ZMQ."""
    async with publishing_engine_sims(3) as fleet:
        yield fleet


def precise_settings(events: list[str]) -> PreciseSettings:
    return PreciseSettings(mode="precise", tokenizer="engine-sim", served_model="sim-model", kv_events=tuple(events))


async def ask(envoy: Envoy, system: str, question: str) -> int:
    """One chat through the gateway; the engine's own count of cached prompt tokens."""
    body = {
        "model": "sim-model",
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        "max_tokens": 1,
    }
    async with aiohttp.ClientSession() as session, session.post(envoy.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        answer = await resp.json()
    return int(answer["usage"]["prompt_tokens_details"]["cached_tokens"])


def served(epp: EppServer) -> dict[str, int]:
    """Requests the picker sent to each member and heard end with a 200 (its own metrics)."""
    counts: dict[str, int] = {}
    for line in epp.state.metrics.render().decode().splitlines():
        if line.startswith("prefixroute_epp_requests_total{") and 'status="200"' in line:
            member = line.split('member="', 1)[1].split('"', 1)[0]
            counts[member] = int(float(line.split()[-1]))
    return counts


def stored(epp: EppServer, member: str) -> int:
    return int(epp.state.dispatcher.strategy.index.stored.size(member))  # type: ignore[attr-defined]


async def test_precise_a_picker_finds_a_prefix_another_picker_left_from_the_engines_events(
    sims: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    urls, events = sims
    routing = RoutingConfig(block_size=16, prefix_blocks=2)
    pickers = [await start_epp(urls, routing=routing, precise=precise_settings(events)) for _ in range(2)]
    gateways: list[Envoy] = []
    try:
        for epp in pickers:
            gateways.append(await start_envoy(tmp_path, f"127.0.0.1:{epp.port}", endpoints(urls)))
        (epp_a, epp_b), (gw_a, gw_b) = pickers, gateways
        await asyncio.sleep(0.5)  # both pickers' SUB sockets reach all three engines
        assert await ask(gw_a, SYSTEM, "first question") == 0
        ((member, _),) = served(epp_a).items()
        # picker B never saw that request: the engine's BlockStored events tell it what is there
        follower = epp_b.state.precise.follower
        assert follower is not None
        await until(lambda: follower.precise(member) and stored(epp_b, member) > 0, "picker B to learn the blocks")
        assert await ask(gw_b, SYSTEM, "second question") > 0  # the engine confirms: a hit on the system prompt
        assert served(epp_b) == {member: 1}
        metrics = epp_b.state.metrics.render().decode()
        ratio = next(
            float(x.split()[-1]) for x in metrics.splitlines() if x.startswith("prefixroute_epp_prefix_match_ratio_sum")
        )
        assert ratio > 0.5  # B chose it knowing the match, from A's request's events alone
        # the router's KV-event metrics, under the picker's prefix
        assert f'prefixroute_epp_kv_events_precise{{member="{member}"}} 1.0' in metrics
        assert f'prefixroute_epp_kv_events_total{{kind="events",member="{member}"}}' in metrics
    finally:
        for gateway in gateways:
            await gateway.stop()
        for epp in pickers:
            await epp.stop()


async def test_precise_distinct_new_prefixes_at_idle_spread_over_the_engines(
    sims: tuple[list[str], list[str]], tmp_path: Path
) -> None:
    urls, events = sims
    epp = await start_epp(urls, routing=RoutingConfig(block_size=16, prefix_blocks=2), precise=precise_settings(events))
    gateway = None
    try:
        gateway = await start_envoy(tmp_path, f"127.0.0.1:{epp.port}", endpoints(urls))
        await asyncio.sleep(0.5)
        for app in range(6):  # six applications' system prompts, one request each, one at a time
            before = served(epp)
            await ask(gateway, f"Application {app}: {SYSTEM}", "hello")
            (member,) = [m for m, n in served(epp).items() if n != before.get(m, 0)]
            await until(lambda m=member: stored(epp, m) > 0 and epp.state.precise.follower.precise(m), "its blocks")  # type: ignore[union-attr]
        counts = served(epp)
        assert sum(counts.values()) == 6, counts
        assert max(counts.values()) <= 2, counts  # least loaded, fewest blocks
    finally:
        if gateway is not None:
            await gateway.stop()
        await epp.stop()


async def test_pickers_with_peers_share_what_they_hold_in_flight_and_what_they_routed() -> None:
    """Two EPP replicas with --peer-port and --peers: a request picker A picked (its stream still
    open) counts in picker B's load view, and B knows A's prefix is on that member."""
    from prefixroute.front.peers import PeerSettings, endpoint
    from prefixroute.processes import free_port

    ports = [free_port(), free_port()]
    urls = ["http://127.0.0.1:9", "http://127.0.0.1:10"]  # never called: the gateway would carry the bytes
    pickers = []
    for mine, theirs in ((ports[0], ports[1]), (ports[1], ports[0])):
        peers = PeerSettings(port=mine, peers=(endpoint("127.0.0.1", theirs),), interval=0.0)
        pickers.append(await start_epp(urls, routing=CONFIG, peers=peers))
    a, b = pickers
    try:
        assert a.state.peers is not None
        assert b.state.peers is not None
        await until(
            lambda: a.state.peers.view.peers() == 1 and b.state.peers.view.peers() == 1, "each to hear the other"
        )
        exchange = Exchange(a.pipeline)
        replies = replies_for(exchange, [headers(post()), body(completion())])  # picked; the answer has not come
        member = next(m.name for m in a.state.fleet.members if m.endpoint == destination(replies[0])[0])
        await until(lambda: b.state.load.get(member).peer_in_flight == 1, "B to count A's request")
        # B's next request with that prompt goes to the same member, believing it all cached there
        assert exchange.flight is not None
        assert exchange.flight.request is not None
        ticket = b.state.dispatcher.route(exchange.flight.request)
        assert ticket.member.name == member
        assert ticket.matched == len(ticket.request.blocks)
        ticket.finish(True)
        exchange.close(True)  # the gateway ends the stream: A's request is over, and B hears so
        await until(lambda: b.state.load.get(member).peer_in_flight == 0, "B to see it end")
        assert "prefixroute_epp_peers 1.0" in b.state.metrics.render().decode()
    finally:
        for epp in reversed(pickers):
            await epp.stop()
