"""Engines' own view of their load, scraped from their /metrics off the request path.

The router's in-flight count sees only its own traffic; with several router
replicas each engine's queue is the truth. Every `--scrape-interval` seconds the
router reads each member's Prometheus text and reports waiting and running
requests and KV cache usage to the load view. vLLM renamed its KV gauge
(`vllm:gpu_cache_usage_perc` became `vllm:kv_cache_usage_perc`); both are read.
Values are summed over label sets (one per served model name).

A tiny line parser is enough and much cheaper than a full one: only three
families matter and everything else — histograms with hundreds of buckets — is
skipped by a prefix test. A member that cannot be scraped reports zero engine
load, so a stale queue never repels traffic from it; its own failures reach the
ejection logic through real requests.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from dataclasses import dataclass

import aiohttp

from prefixroute.router.state import RouterState
from prefixroute.routing.fleet import Member

log = logging.getLogger("prefixroute.router.scrape")

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_USAGE = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
_WANTED = (WAITING, RUNNING, *KV_USAGE)


@dataclass(frozen=True)
class EngineLoad:
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0


def parse_engine_metrics(text: str) -> EngineLoad:
    """Waiting, running and KV usage from Prometheus text exposition."""
    sums = dict.fromkeys(_WANTED, 0.0)
    for line in text.splitlines():
        if not line.startswith(_WANTED):
            continue
        name_end = len(line)
        for i, ch in enumerate(line):
            if ch in "{ \t":
                name_end = i
                break
        name = line[:name_end]
        if name not in sums:
            continue  # a longer name sharing the prefix
        rest = line[name_end:]
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0:
                continue
            rest = rest[close + 1 :]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if math.isfinite(value):
            sums[name] += value
    kv = max(sums[name] for name in KV_USAGE)
    return EngineLoad(waiting=sums[WAITING], running=sums[RUNNING], kv_usage=kv)


class Scraper:
    def __init__(self, state: RouterState, session: aiohttp.ClientSession, interval: float) -> None:
        self.state = state
        self.session = session
        self.interval = interval
        self.timeout = aiohttp.ClientTimeout(total=max(0.5, min(interval, 5.0)))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.interval > 0:
            self._task = asyncio.create_task(self._run(), name="engine-scrape")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await self.scrape_once()
            except Exception:  # never let one bad round end scraping for good
                log.exception("scraping engines failed")
            await asyncio.sleep(self.interval)

    async def scrape_once(self) -> None:
        members = list(self.state.fleet.members)
        results = await asyncio.gather(*(self._scrape(m) for m in members))
        for member, result in zip(members, results):
            if self.state.member_left(member.name):
                continue
            self.state.load.report_engine(member.name, result.waiting, result.running, result.kv_usage)

    async def _scrape(self, member: Member) -> EngineLoad:
        try:
            async with self.session.get(member.url + "/metrics", timeout=self.timeout) as response:
                if response.status != 200:
                    return EngineLoad()
                text = await response.text(errors="replace")
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.debug("scraping %s failed: %s", member.name, exc)
            return EngineLoad()
        return parse_engine_metrics(text)
