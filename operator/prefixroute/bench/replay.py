"""`bench replay`: send a workload over HTTP to a router, as clients would, and measure.

Requests leave at their arrival times (already compressed by --speed), stream
their answers, and TTFT is measured at the client: from sending to the first
chunk carrying text. The hit rate and the per-replica request counts come from
the engines themselves — deltas of vllm:prefix_cache_hits_total /
vllm:prefix_cache_queries_total and vllm:request_success_total across the run —
so a router (ours or a peer's) is judged by what the engines actually did.
Times are multiplied by the engines' --time-scale to report engine seconds,
comparable with `bench simulate`.

Several targets (router replicas) take the requests in turn, one after another, as a
Service spreads clients over a router Deployment's pods.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from prefixroute.bench import prom
from prefixroute.bench.errors import TargetError
from prefixroute.bench.progress import Progress
from prefixroute.bench.results import RunResult
from prefixroute.bench.workload import BenchRequest
from prefixroute.front.errors import SHED_REASON_HEADER

PATHS = {"completion": "/v1/completions", "chat": "/v1/chat/completions"}


async def scrape(session: aiohttp.ClientSession, engines: Sequence[str]) -> dict[str, dict[str, float]]:
    async def one(url: str) -> dict[str, float]:
        try:
            async with session.get(url.rstrip("/") + "/metrics", timeout=aiohttp.ClientTimeout(total=30)) as resp:
                if resp.status != 200:
                    raise TargetError(f"{url}/metrics answered HTTP {resp.status}")
                return prom.parse_sums(await resp.text())
        except (TimeoutError, aiohttp.ClientError) as exc:
            raise TargetError(f"cannot read {url}/metrics: {exc!r}") from None

    results = await asyncio.gather(*(one(u) for u in engines))
    return dict(zip(engines, results))


async def reset_engines(session: aiohttp.ClientSession, engines: Sequence[str]) -> None:
    """Empty every engine's prefix cache (vLLM's /reset_prefix_cache), so each run starts cold."""
    for url in engines:
        try:
            async with session.post(url.rstrip("/") + "/reset_prefix_cache") as resp:
                if resp.status >= 400:
                    raise TargetError(f"{url}/reset_prefix_cache answered HTTP {resp.status}")
        except aiohttp.ClientError as exc:
            raise TargetError(f"cannot reset {url}: {exc!r}") from None


async def engine_tokenizers(engines: Sequence[str]) -> list[str | None]:
    """What each engine says it tokenizes with (engine-sim's /get_server_info `tokenizer`: its byte
    tokenizer or a model folder), None where it does not say: a figure names its tokenizer."""

    async def one(session: aiohttp.ClientSession, url: str) -> str | None:
        try:
            async with session.get(url.rstrip("/") + "/get_server_info") as resp:
                found = (await resp.json(content_type=None)).get("tokenizer") if resp.status == 200 else None
        except (TimeoutError, aiohttp.ClientError, ValueError, AttributeError):
            return None
        return found if isinstance(found, str) else None

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        return list(await asyncio.gather(*(one(session, url) for url in engines)))


def _has_text(chunk: dict[str, Any]) -> bool:
    for choice in chunk.get("choices") or ():
        if choice.get("text") or (choice.get("delta") or {}).get("content"):
            return True
    return False


@dataclass(frozen=True)
class Outcome:
    """What one request got, as its client saw it (wall seconds)."""

    status: int | None = None  # the HTTP status (None: no answer, or the client gave up first)
    ttft: float | None = None  # seconds from sending to the first chunk carrying text
    done: bool = False  # the stream ended with [DONE]
    shed_reason: str | None = None  # an overloaded router's X-Prefixroute-Shed-Reason
    gave_up: bool = False  # no first text within the client's patience: it hung up

    @property
    def ok(self) -> bool:
        return self.done and self.ttft is not None


async def _read_stream(resp: aiohttp.ClientResponse, sent: float, first_text: Callable[[], None]) -> Outcome:
    """Read an SSE stream to its end; `first_text` is called when the first text arrives."""
    first: float | None = None
    async for raw in resp.content:
        line = raw.strip()
        if not line.startswith(b"data:"):
            continue
        data = line[5:].strip()
        if data == b"[DONE]":
            return Outcome(resp.status, first, done=True)
        if first is None:
            try:
                chunk = json.loads(data)
            except ValueError:
                continue
            if _has_text(chunk):
                first = time.monotonic() - sent
                first_text()
    return Outcome(resp.status, first)


async def _one(
    session: aiohttp.ClientSession,
    target: str,
    req: BenchRequest,
    model: str,
    headers: dict[str, str],
    patience: float | None = None,
) -> Outcome:
    """Send one request and read its stream. With `patience`, the client hangs up (closing its
    connection, so the router aborts the request) when no text came within that many seconds."""
    body = json.dumps(req.body(model, stream=True))
    sent = time.monotonic()
    try:
        async with asyncio.timeout(patience) as deadline:
            async with session.post(target + PATHS[req.kind], data=body, headers=headers) as resp:
                if resp.status != 200:
                    await resp.read()
                    return Outcome(resp.status, shed_reason=resp.headers.get(SHED_REASON_HEADER))
                return await _read_stream(resp, sent, lambda: deadline.reschedule(None))
    except TimeoutError:
        return Outcome(gave_up=deadline.expired())
    except aiohttp.ClientError:
        return Outcome()


async def replay(
    requests: Sequence[BenchRequest],
    target: str | Sequence[str],
    engines: Sequence[str],
    *,
    label: str,
    model: str,
    time_scale: float = 1.0,
    reset: bool = True,
    tenant_header: str | None = None,
    show_progress: bool = True,
    tenant_keys: Mapping[str, str] | None = None,
    patience: float | None = None,
    on_outcome: Callable[[BenchRequest, Outcome], None] | None = None,
) -> RunResult:
    """Replay `requests` against `target` (several: in turn). `tenant_keys`: each tenant's API key,
    sent as a bearer token; `patience`: wall seconds a client waits for its first text before it
    hangs up; `on_outcome`: told what each request got."""
    targets = [t.rstrip("/") for t in ([target] if isinstance(target, str) else target)]
    if not targets:
        raise TargetError("no target to replay against")
    result = RunResult(strategy=label, mode="replay")
    load_start = os.getloadavg()[0]
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        if reset:
            await reset_engines(session, engines)
        before = await scrape(session, engines)
        progress = Progress(len(requests), label, enabled=show_progress)
        done = errors = 0
        last_end = 0.0

        async def run(req: BenchRequest, target: str) -> None:
            nonlocal done, errors, last_end
            headers = {"Content-Type": "application/json"}
            if tenant_header and req.tenant:
                headers[tenant_header] = req.tenant
            key = tenant_keys.get(req.tenant) if tenant_keys and req.tenant else None
            if key is not None:
                headers["Authorization"] = f"Bearer {key}"
            outcome = await _one(session, target, req, model, headers, patience)
            if on_outcome is not None:
                on_outcome(req, outcome)
            ttft = outcome.ttft
            if outcome.ok and ttft is not None:
                result.ttfts.append(ttft * time_scale)
                if req.tenant:
                    result.tenant_ttfts.setdefault(req.tenant, []).append(ttft * time_scale)
                result.output_tokens += req.output_tokens
            else:
                errors += 1
            done += 1
            last_end = time.monotonic()
            progress.update(done=done, errors=errors)

        loop = asyncio.get_running_loop()
        tasks: list[asyncio.Task[None]] = []
        start = loop.time()
        wall_start = time.monotonic()
        for i, req in enumerate(requests):
            delay = start + req.at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(loop.create_task(run(req, targets[i % len(targets)])))
            progress.update(sent=i + 1)
        await asyncio.gather(*tasks)
        progress.close()
        after = await scrape(session, engines)
    # Other work on the machine slows every process of a live run: keep the evidence with the numbers.
    result.host_load = (round(load_start, 2), round(os.getloadavg()[0], 2))
    result.errors = errors
    result.requests = len(requests) - errors
    result.duration_s = max(0.0, last_end - wall_start) * time_scale
    for i, url in enumerate(engines):
        delta = {k: after[url][k] - before[url][k] for k in prom.WANTED}
        result.prompt_tokens += int(delta[prom.QUERIES])
        result.cached_tokens += int(delta[prom.HITS])
        result.per_replica[f"engine-{i}"] = int(delta[prom.SUCCESS])
    return result
