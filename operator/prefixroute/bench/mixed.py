"""A mixed-priority workload: interactive, standard and sheddable batch tenants on one fleet.

Three tenant classes, each a tenant of its own with its API key's priority and TTFT objective:

- **interactive** (priority 10, TTFT objective 500 ms): chat assistants — a few long system
  prompts that every request repeats, a short question, a short answer;
- **standard** (priority 0, no objective): chat with a shared system prompt and a longer
  question and answer;
- **batch** (priority -1: sheddable): long documents, each read once, summarised — the work
  that should absorb an overload, and the prompts that hold an engine's prefill longest.

Arrivals are Poisson per class at its share of the total rate. The fleet's capacity is derived
from the engine model (`capacity`): an engine prefills one prompt at a time at
`prefill_tokens_per_s` and decodes every running sequence at `decode_tokens_per_s`, so it
serves at most 1 / (mean prefill seconds) requests per second and at most `max_running` /
(mean seconds a sequence holds a running slot); a shared prefix counts as cached (prefix
routing keeps it warm), the rest of each prompt as computed. `bench priorities` states its
loads as multiples of that figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prefixroute.bench.texts import random_text
from prefixroute.bench.workload import BenchRequest, Body
from prefixroute.engine_model.config import EngineConfig

CHAT_OVERHEAD_TOKENS = 6  # engine-sim's chat template: the role markers around two messages


@dataclass(frozen=True)
class TenantClass:
    """One tenant of the mix: its API key's priority and TTFT objective, and its requests' shape."""

    name: str
    priority: int
    objective_ms: int | None  # its TTFT objective (None: answered at all is good enough)
    share: float  # its part of the arrivals
    prefixes: int  # distinct shared system prompts (0: every prompt is its own)
    prefix_tokens: int
    question_tokens: int
    output_tokens: int

    @property
    def objective(self) -> float | None:
        """The objective in seconds, as the routing core takes it."""
        return None if self.objective_ms is None else self.objective_ms / 1000.0

    def uncached_tokens(self) -> int:
        """Prompt tokens an engine computes when the shared prefix is cached (or all, without one)."""
        shared = self.prefix_tokens if self.prefixes else 0
        return self.prefix_tokens + self.question_tokens + CHAT_OVERHEAD_TOKENS - shared


INTERACTIVE = TenantClass("interactive", 10, 500, 0.4, 8, 1536, 96, 48)
STANDARD = TenantClass("standard", 0, None, 0.3, 4, 1024, 256, 128)
BATCH = TenantClass("batch", -1, None, 0.3, 0, 6144, 64, 192)
CLASSES = (INTERACTIVE, STANDARD, BATCH)


def by_name(classes: Sequence[TenantClass] = CLASSES) -> dict[str, TenantClass]:
    return {c.name: c for c in classes}


def capacity(engine: EngineConfig, replicas: int, classes: Sequence[TenantClass] = CLASSES) -> float:
    """Requests per second `replicas` engines sustain on this mix: the lesser of what serial
    prefill and the running slots allow (module docstring)."""
    total = sum(c.share for c in classes)
    latency = engine.latency
    prefill = sum(c.share / total * latency.prefill_seconds(c.uncached_tokens()) for c in classes)
    held = sum(
        c.share / total * (latency.prefill_seconds(c.uncached_tokens()) + latency.decode_seconds(c.output_tokens - 1))
        for c in classes
    )
    return replicas * min(1.0 / prefill, engine.max_running / held)


def _body(seed: int, c: TenantClass, prefix: int, i: int) -> Body:
    system = random_text(f"mix-{seed}-{c.name}", prefix, c.prefix_tokens)
    question = random_text(f"mix-q-{seed}-{c.name}", i, c.question_tokens)
    return {"messages": [{"role": "system", "content": system}, {"role": "user", "content": question}]}


def workload(
    rate: float, seconds: float, seed: int = 0, classes: Sequence[TenantClass] = CLASSES
) -> list[BenchRequest]:
    """Poisson arrivals over `seconds` at `rate` requests/s in all, split by the classes' shares;
    each request's tenant is its class's name. A class without shared prefixes gets a prompt of
    its own each time (prefix index = the request's number)."""
    if rate <= 0 or seconds <= 0:
        raise ValueError("rate and seconds must be positive")
    rng = np.random.default_rng(seed)
    total = sum(c.share for c in classes)
    out: list[BenchRequest] = []
    for c in classes:
        at, i = 0.0, 0
        while True:
            at += float(rng.exponential(total / (rate * c.share)))
            if at >= seconds:
                break
            prefix = int(rng.integers(c.prefixes)) if c.prefixes else i

            def build(c: TenantClass = c, prefix: int = prefix, i: int = i) -> Body:
                return _body(seed, c, prefix, i)

            out.append(BenchRequest(at, "chat", build, c.output_tokens, tenant=c.name))
            i += 1
    out.sort(key=lambda r: r.at)
    return out
