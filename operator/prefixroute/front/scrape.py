"""Engines' own view of their load, scraped from their /metrics off the request path.

A front's in-flight count sees only its own traffic; with several router or
picker replicas each engine's queue is the truth. Every `--scrape-interval` seconds
a front (the router, the EPP) reads each member's Prometheus text and reports waiting and running
requests and KV cache usage to the load view, under vLLM's names or SGLang's
(`prefixroute.engine_metrics`; an engine exports one family, so the two are
summed). vLLM renamed its KV gauge (`vllm:gpu_cache_usage_perc` became
`vllm:kv_cache_usage_perc`); both are read. Values are summed over label sets
(one per served model name), except SGLang's per-priority breakdown of its queue
gauges (`priority="0"`, ...), which repeats the total it reports under
`priority=""`.

A tiny line parser is enough and much cheaper than a full one: only a few
families matter and everything else — histograms with hundreds of buckets — is
skipped by a prefix test. Measured with scripts/scrape_parser_cost.py (same text,
same run, three runs on the shared 2-core machine): 0.07-0.16 ms per scrape of
engine-sim's /metrics (134 lines) against 2.8-5.2 ms with prometheus_client's parser
(x33-41), and 0.08-0.25 ms against 12-18 ms (x73-151) for a vLLM-sized text (482
lines) — time taken from the loop that serves requests, for every engine, every
interval. It also skips a malformed line where the library rejects the whole text.
Everything else that reads Prometheus text (benches, e2e, tests) uses the library,
through `bench.prom`.

vLLM's `vllm:lora_requests_info` names the LoRA adapters running and waiting in its
labels (`running_lora_adapters="a,b"`), its value the time it was set; old label sets
stay in the text, so the newest series is the engine's present. Those adapters are in
its slots (or about to be): the dispatcher hands them to the strategy
(`Dispatcher.engine_adapters`), whose residency belief they join.

A member that cannot be scraped reports zero engine load, so a stale queue never
repels traffic from it; its own failures reach the ejection logic through real requests.
"""

from __future__ import annotations

import asyncio
import logging
import math
from dataclasses import dataclass

import aiohttp

from prefixroute.engine_metrics import FAMILIES, PRIORITY_LABEL
from prefixroute.front.background import cancel_and_wait
from prefixroute.front.state import FrontState
from prefixroute.routing.fleet import Member

log = logging.getLogger("prefixroute.front.scrape")

WAITING = tuple(f.waiting for f in FAMILIES)
RUNNING = tuple(f.running for f in FAMILIES)
KV_USAGE = tuple(name for f in FAMILIES for name in f.kv_usage)
HITS = tuple(f.hit_tokens for f in FAMILIES)
QUERIES = tuple(f.query_tokens for f in FAMILIES)
LORA_INFO = "vllm:lora_requests_info"
_LORA_LABELS = ("running_lora_adapters", "waiting_lora_adapters")
_WANTED = (*WAITING, *RUNNING, *KV_USAGE, *HITS, *QUERIES, LORA_INFO)
_BREAKDOWN = f'{PRIORITY_LABEL}="'  # a label whose non-empty value marks a breakdown series


@dataclass(frozen=True)
class EngineLoad:
    waiting: float = 0.0
    running: float = 0.0
    kv_usage: float = 0.0
    hit_tokens: float = 0.0  # cumulative: prompt tokens found in the prefix cache
    query_tokens: float = 0.0  # cumulative: prompt tokens looked up
    scraped: bool = False  # False: the scrape failed, the counters mean nothing
    adapters: frozenset[str] | None = None  # LoRA adapters running or waiting (None: not reported)


def _breakdown(labels: str) -> bool:
    """Whether a series' labels (the text between braces) carry a non-empty priority."""
    start = labels.find(_BREAKDOWN)
    while start >= 0:
        if start == 0 or labels[start - 1] in ", ":
            return labels[start + len(_BREAKDOWN) : start + len(_BREAKDOWN) + 1] != '"'
        start = labels.find(_BREAKDOWN, start + 1)
    return False


def _label_values(labels: str, names: tuple[str, ...]) -> list[str]:
    """The values of `names` among a series' labels (the text between braces; vLLM's adapter
    names hold no quote or comma of their own)."""
    out = []
    for name in names:
        start = labels.find(f'{name}="')
        if start >= 0:
            start += len(name) + 2
            out.append(labels[start : labels.find('"', start)])
    return out


def parse_engine_metrics(text: str) -> EngineLoad:
    """Waiting, running, KV usage, the prefix cache's counters and the LoRA adapters in use
    from Prometheus text exposition."""
    sums = dict.fromkeys(_WANTED, 0.0)
    lora: tuple[float, frozenset[str]] | None = None  # the newest adapters series: (set at, names)
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
        labels = ""
        if rest.startswith("{"):
            close = rest.rfind("}")
            if close < 0 or _breakdown(rest[1:close]):
                continue
            labels, rest = rest[1:close], rest[close + 1 :]
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        if not math.isfinite(value):
            continue
        if name == LORA_INFO:
            if lora is None or value >= lora[0]:
                names = (a.strip() for v in _label_values(labels, _LORA_LABELS) for a in v.split(","))
                lora = (value, frozenset(a for a in names if a))
            continue
        sums[name] += value
    kv = max(sums[name] for name in KV_USAGE)
    return EngineLoad(
        waiting=sum(sums[n] for n in WAITING),
        running=sum(sums[n] for n in RUNNING),
        kv_usage=kv,
        hit_tokens=sum(sums[n] for n in HITS),
        query_tokens=sum(sums[n] for n in QUERIES),
        scraped=True,
        adapters=lora[1] if lora is not None else None,
    )


class Scraper:
    def __init__(self, state: FrontState, session: aiohttp.ClientSession, interval: float) -> None:
        self.state = state
        self.session = session
        self.interval = interval
        self.timeout = aiohttp.ClientTimeout(total=max(0.5, min(interval, 5.0)))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.interval > 0:
            self._task = asyncio.create_task(self._run(), name="engine-scrape")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
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
            if result.scraped:  # the engines' own hit rate, for the status column (front.recent)
                self.state.metrics.recent_engines.report(member.name, result.hit_tokens, result.query_tokens)
            if result.adapters is not None:
                self.state.dispatcher.engine_adapters(member.name, result.adapters)

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
