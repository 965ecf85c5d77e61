"""Synthetic shared-prefix workloads, each the shape of a real serving pattern.

- `tenants`: many tenants, each with its own long system prompt, picked with
  Zipf popularity (a few tenants send most traffic — the hot-spot case); every
  request adds a unique user question. Chat completions.
- `multiturn`: chats that grow their own context: turn k resends turns 1..k-1
  (questions and answers) plus a new question, after a think time.
- `longdoc`: long-document Q&A: a popular set of long documents (Zipf), each
  request one document plus a short question. Completions.

Arrivals are Poisson at `rate` requests/s; everything is fixed by `seed`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from prefixroute.bench.texts import random_text
from prefixroute.bench.workload import BenchRequest, Body


def _zipf_choice(rng: np.random.Generator, items: int, exponent: float, size: int) -> np.ndarray:
    weights = 1.0 / np.arange(1, items + 1) ** exponent
    return rng.choice(items, size=size, p=weights / weights.sum())


def _arrivals(rng: np.random.Generator, rate: float, size: int) -> np.ndarray:
    if rate <= 0:
        raise ValueError("rate must be positive")
    return np.cumsum(rng.exponential(1.0 / rate, size))


def tenants(
    requests: int,
    rate: float = 4.0,
    seed: int = 0,
    *,
    tenants: int = 40,
    system_tokens: int = 2048,
    question_tokens: int = 128,
    output_tokens: int = 128,
    zipf: float = 1.1,
) -> list[BenchRequest]:
    rng = np.random.default_rng(seed)
    who = _zipf_choice(rng, tenants, zipf, requests)
    times = _arrivals(rng, rate, requests)
    out: list[BenchRequest] = []
    for i in range(requests):
        tenant = int(who[i])

        def build(tenant: int = tenant, i: int = i) -> Body:
            return {
                "messages": [
                    {"role": "system", "content": random_text(f"tenant-{seed}", tenant, system_tokens)},
                    {"role": "user", "content": random_text(f"question-{seed}", i, question_tokens)},
                ]
            }

        out.append(BenchRequest(float(times[i]), "chat", build, output_tokens, tenant=f"tenant-{tenant}"))
    return out


def multiturn(
    requests: int,
    rate: float = 4.0,
    seed: int = 0,
    *,
    turn_tokens: int = 256,
    output_tokens: int = 128,
    mean_turns: float = 6.0,
    think_s: float = 8.0,
) -> list[BenchRequest]:
    rng = np.random.default_rng(seed)
    out: list[BenchRequest] = []
    conversation = 0
    start = 0.0
    while len(out) < requests:
        start += float(rng.exponential(mean_turns / rate))  # conversations arrive at rate / mean_turns
        turns = int(rng.geometric(1.0 / mean_turns)) if mean_turns > 1 else 1
        at = start
        for turn in range(turns):
            if len(out) == requests:
                break

            def build(c: int = conversation, t: int = turn) -> Body:
                messages: list[dict[str, Any]] = []
                for k in range(t + 1):
                    messages.append({"role": "user", "content": random_text(f"turn-{seed}", c * 1000 + k, turn_tokens)})
                    if k < t:
                        messages.append(
                            {"role": "assistant", "content": random_text(f"answer-{seed}", c * 1000 + k, output_tokens)}
                        )
                return {"messages": messages}

            out.append(BenchRequest(at, "chat", build, output_tokens))
            at += float(rng.exponential(think_s))
        conversation += 1
    out.sort(key=lambda r: r.at)
    return out


def longdoc(
    requests: int,
    rate: float = 2.0,
    seed: int = 0,
    *,
    documents: int = 48,
    document_tokens: int = 8192,
    question_tokens: int = 64,
    output_tokens: int = 64,
    zipf: float = 1.0,
) -> list[BenchRequest]:
    rng = np.random.default_rng(seed)
    which = _zipf_choice(rng, documents, zipf, requests)
    times = _arrivals(rng, rate, requests)
    out: list[BenchRequest] = []
    for i in range(requests):

        def build(doc: int = int(which[i]), i: int = i) -> Body:
            document = random_text(f"document-{seed}", doc, document_tokens)
            return {"prompt": document + " question " + random_text(f"ask-{seed}", i, question_tokens)}

        out.append(BenchRequest(float(times[i]), "completion", build, output_tokens))
    return out


GENERATORS: dict[str, Callable[..., list[BenchRequest]]] = {
    "tenants": tenants,
    "multiturn": multiturn,
    "longdoc": longdoc,
}
