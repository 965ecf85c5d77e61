"""Engines failing under a real router: real `prefixroute engine-sim` and `prefixroute router`
processes on 127.0.0.1, faults made with signals, observed over HTTP and /metrics.

What tests/router/test_proxy.py already proves in-process with scripted fake engines (a
backend refused before the request, a 5xx, a connection dropped before the answer, a
stream cut after some chunks, a hanging engine → 504, ejection and re-admission on a fake
clock) is not repeated; these tests add what only real processes show:

- SIGKILL of an engine while it holds non-streamed requests → every one is retried on
  another engine and answered in full; none lost;
- SIGKILL while streams are in flight → those streams end with an SSE error event, the
  others finish; the engine is ejected, and re-admitted once it is back on its address;
- SIGSTOP (the kernel still accepts connections, nobody answers) → 504 for what was sent
  there, streams end with an SSE timeout event, the router keeps serving everything else,
  and the engine serves again after SIGCONT.

Both upstream clients (aiohttp, native) face every fault. Nothing asserts a duration.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from prefixroute.bench import prom
from tests.faults.procs import Fleet, engine_running, metrics, sse_events

MEMBER = "X-Prefixroute-Member"
PROMPT = "a prompt long enough to be worth caching " * 8
SLOW = ("--decode-tokens-per-s", "20")  # 40 tokens take two seconds: requests stay in flight


async def until(check: Callable[[], Awaitable[Any]], timeout: float = 60.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = await check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: last {value!r}")
        await asyncio.sleep(0.05)


def client(timeout: float = 120.0) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout))


async def complete(session: aiohttp.ClientSession, router: str, i: int, max_tokens: int = 40) -> tuple[int, str, bytes]:
    body = {"model": "sim", "prompt": f"request {i} {PROMPT}", "max_tokens": max_tokens}
    async with session.post(router + "/v1/completions", json=body) as r:
        return r.status, r.headers.get(MEMBER, ""), await r.read()


async def test_engine_killed_with_requests_in_flight_loses_none_and_is_readmitted(
    fleet: Fleet, upstream_client: str
) -> None:
    engines = await fleet.engines(3, *SLOW)
    victim = engines[0]
    router = await fleet.router(
        "--strategy",
        "round-robin",
        "--upstream-client",
        upstream_client,
        "--eject-seconds",
        "1",
        "--eject-max-seconds",
        "2",
        backends=engines,
    )
    async with client() as session:
        tasks = [asyncio.create_task(complete(session, router.url, i)) for i in range(30)]
        held = await until(lambda: engine_running(victim.url), what="requests in flight on the victim")
        victim.kill()
        results = await asyncio.gather(*tasks)
        lost = [(status, body[:100]) for status, _, body in results if status != 200]
        assert lost == [], lost
        for _, member, body in results:  # every answer is whole, and none came from the dead engine
            assert json.loads(body)["usage"]["completion_tokens"] == 40
            assert member != victim.url
        m = await metrics(router.url)
        retries = prom.by_label(m, "prefixroute_router_retries_total", "reason")
        assert retries.get("connection", 0) + retries.get("body", 0) >= held
        assert prom.total(m, "prefixroute_router_ejections_total", member=victim.url) >= 1

        # Back on the same address: re-admitted once its ejection is over, and served again.
        victim.start()
        await until(lambda: _answers(victim.url), what="the engine back")

        async def served_by_victim() -> bool:
            status, member, _ = await complete(session, router.url, 1000, max_tokens=1)
            assert status == 200
            return member == victim.url

        await until(served_by_victim, what="a request answered by the re-admitted engine")
        ready = await until(lambda: _ready(router.url, 3), what="/ready counting 3 members")
    print(
        f"\n    faults: {upstream_client}: {held:.0f} requests in flight on the killed engine; "
        f"30/30 answered in full; re-admitted ({ready})"
    )


async def _answers(url: str) -> bool:
    try:
        async with client(2) as s, s.get(url + "/health") as r:
            return r.status == 200
    except (TimeoutError, aiohttp.ClientError):
        return False


async def _ready(router: str, members: int) -> dict[str, Any] | None:
    async with client(5) as s, s.get(router + "/ready") as r:
        body = await r.json()
        return body if r.status == 200 and body["members"] == members else None


async def _open_streams(
    session: aiohttp.ClientSession, router: str, count: int, max_tokens: int
) -> list[tuple[aiohttp.ClientResponse, bytes]]:
    """Streams that have each relayed their first event."""

    async def one(i: int) -> tuple[aiohttp.ClientResponse, bytes]:
        body = {"model": "sim", "prompt": f"stream {i} {PROMPT}", "max_tokens": max_tokens, "stream": True}
        response = await session.post(router + "/v1/completions", json=body)
        assert response.status == 200
        first = await response.content.readuntil(b"\n\n")
        return response, first

    return list(await asyncio.gather(*(one(i) for i in range(count))))


async def test_engine_killed_mid_stream_ends_its_streams_with_an_sse_error(fleet: Fleet, upstream_client: str) -> None:
    engines = await fleet.engines(3, *SLOW)
    victim = engines[1]
    router = await fleet.router("--strategy", "round-robin", "--upstream-client", upstream_client, backends=engines)
    async with client() as session:
        streams = await _open_streams(session, router.url, 9, max_tokens=60)
        victim.kill()
        ends: Counter[str] = Counter()
        for response, first in streams:
            events = sse_events(first + await response.read())
            response.release()
            assert all(isinstance(e, (dict, str)) for e in events)  # every event whole: nothing glued
            if response.headers[MEMBER] == victim.url:
                last = events[-1]
                assert "[DONE]" not in events, events[-2:]
                assert set(last) == {"error"}, events[-2:]
                assert last["error"]["type"] == "upstream_error"
                assert last["error"]["message"]
                ends["error event"] += 1
            else:
                assert events[-1] == "[DONE]"
                text = "".join(e["choices"][0]["text"] for e in events if isinstance(e, dict) and e["choices"])
                assert len(text) == 60 * 4  # engine-sim: 4 characters per token
                ends["finished"] += 1
    assert ends["error event"] >= 1, ends
    assert ends["finished"] >= 1, ends
    print(f"\n    faults: {upstream_client}: streams at the kill: {dict(ends)}")


async def test_a_stalled_engine_times_out_and_the_router_keeps_serving(fleet: Fleet, upstream_client: str) -> None:
    """SIGSTOP: the kernel still completes TCP handshakes for the frozen engine, which
    never answers — the worst kind of dead. Requests sent there get 504 after the read
    timeout (not retried: the engine may yet act on them); the rest are served meanwhile."""
    engines = await fleet.engines(3)
    victim = engines[2]
    router = await fleet.router(
        "--strategy",
        "round-robin",
        "--upstream-client",
        upstream_client,
        "--read-timeout",
        "2",
        "--connect-timeout",
        "1",
        backends=engines,
    )
    async with client() as session:
        victim.signal(signal.SIGSTOP)
        try:
            results = await asyncio.gather(*(complete(session, router.url, i, max_tokens=4) for i in range(12)))
            async with session.get(router.url + "/health") as r:
                assert r.status == 200
        finally:
            victim.signal(signal.SIGCONT)
        statuses = Counter(status for status, _, _ in results)
        assert set(statuses) <= {200, 504}, statuses
        assert statuses[504] >= 1, statuses
        assert statuses[200] >= 1, statuses
        for status, member, body in results:
            if status == 504:
                assert member == ""
                assert json.loads(body)["error"]["type"] == "upstream_timeout"
            else:
                assert member != victim.url
        # A timeout does not eject (the engine may be slow, not dead): thawed, it serves again.
        again = await asyncio.gather(*(complete(session, router.url, i, max_tokens=4) for i in range(12)))
        assert [s for s, _, _ in again] == [200] * 12
        assert victim.url in {m for _, m, _ in again}
    print(f"\n    faults: {upstream_client}: frozen engine: {dict(statuses)}; after SIGCONT 12/12 answered")


async def test_a_stream_from_a_stalled_engine_ends_with_a_timeout_event(fleet: Fleet) -> None:
    engines = await fleet.engines(2, *SLOW)
    victim = engines[0]
    router = await fleet.router("--strategy", "round-robin", "--read-timeout", "2", backends=engines)
    async with client() as session:
        streams = await _open_streams(session, router.url, 4, max_tokens=60)
        victim.signal(signal.SIGSTOP)
        try:
            endings = []
            for response, first in streams:
                events = sse_events(first + await response.read())
                response.release()
                endings.append((response.headers[MEMBER] == victim.url, events[-1]))
        finally:
            victim.signal(signal.SIGCONT)
    stalled = [last for on_victim, last in endings if on_victim]
    assert stalled, endings
    assert all(last["error"]["type"] == "upstream_timeout" for last in stalled), endings
    assert all(last == "[DONE]" for on_victim, last in endings if not on_victim)
