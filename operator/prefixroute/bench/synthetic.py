"""Synthetic shared-prefix workloads, each the shape of a real serving pattern.

- `tenants`: many tenants, each with its own long system prompt, picked with
  Zipf popularity (a few tenants send most traffic — the hot-spot case); every
  request adds a unique user question. Chat completions.
- `multiturn`: chats that grow their own context: turn k resends turns 1..k-1
  (questions and answers) plus a new question, after a think time.
- `longdoc`: long-document Q&A: a popular set of long documents (Zipf), each
  request one document plus a short question. Completions.
- `sessions`: one long prefix that every request starts with (a product's
  system prompt), then each session's own growing conversation — the shape
  that defeats hashing a fixed number of leading blocks (KubeAI issue 519):
  every key is the shared prefix's. Chat completions.
- `conversations`: several applications' system prompts, each with its own
  conversations growing turn by turn, sized to a fleet: together they need
  more KV cache than one engine has, but fit the fleet when each conversation
  stays on one engine (the README demo's default workload).

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


def sessions(
    requests: int,
    rate: float = 4.0,
    seed: int = 0,
    *,
    sessions: int | None = None,
    prefix_tokens: int = 2048,
    min_turns: int = 4,
    max_turns: int = 8,
    min_turn_tokens: int = 800,
    max_turn_tokens: int = 1800,
    output_tokens: int = 200,
    answer_s: float = 2.0,
    think_s: float = 5.0,
) -> list[BenchRequest]:
    """`sessions` conversations (default: enough for `requests` turns), all behind one shared
    `prefix_tokens` system prompt. Each has a number of turns drawn uniformly from
    min_turns..max_turns; turn k sends the prefix, every earlier question and answer, and a
    new question of min_turn_tokens..max_turn_tokens, so each turn adds the question plus
    an `output_tokens` answer (1.0-2.0k tokens with the defaults). Sessions start as a
    Poisson process at rate / mean turns, so requests arrive at about `rate` per second;
    a session's next turn comes `answer_s` (the answer being written) plus an exponential
    think time of mean `think_s` after the previous one. At most `requests` requests, the
    earliest."""
    if min_turns < 1 or max_turns < min_turns:
        raise ValueError("turns must satisfy 1 <= min_turns <= max_turns")
    if min_turn_tokens < 1 or max_turn_tokens < min_turn_tokens:
        raise ValueError("turn tokens must satisfy 1 <= min_turn_tokens <= max_turn_tokens")
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = np.random.default_rng(seed)
    mean_turns = (min_turns + max_turns) / 2
    count = sessions if sessions is not None else -(-requests // int(mean_turns))
    shared = random_text(f"shared-{seed}", 0, prefix_tokens)
    out: list[BenchRequest] = []
    start = 0.0
    for session in range(count):
        start += float(rng.exponential(mean_turns / rate))
        turns = int(rng.integers(min_turns, max_turns + 1))
        asked = [int(n) for n in rng.integers(min_turn_tokens, max_turn_tokens + 1, turns)]
        at = start
        for turn in range(turns):

            def build(s: int = session, t: int = turn, asked: list[int] = asked) -> Body:
                messages: list[dict[str, Any]] = [{"role": "system", "content": shared}]
                for k in range(t + 1):
                    ident = s * 64 + k
                    messages.append({"role": "user", "content": random_text(f"ask-{seed}", ident, asked[k])})
                    if k < t:
                        answer = random_text(f"answer-{seed}", ident, output_tokens)
                        messages.append({"role": "assistant", "content": answer})
                return {"messages": messages}

            out.append(BenchRequest(at, "chat", build, output_tokens))
            at += answer_s + float(rng.exponential(think_s))
    out.sort(key=lambda r: r.at)
    return out[:requests]


def conversations(
    requests: int,
    rate: float = 4.0,
    seed: int = 0,
    *,
    replicas: int = 4,
    cache_tokens: int = 131_072,
    apps: int = 8,
    app_tokens: int = 2048,
    min_turns: int = 4,
    max_turns: int = 8,
    min_question_tokens: int = 400,
    max_question_tokens: int = 900,
    output_tokens: int = 200,
    answer_s: float = 2.0,
    think_s: float = 4.0,
) -> list[BenchRequest]:
    """Multi-turn chats of `apps` applications, each app's conversations behind its own
    `app_tokens` system prompt; turn k resends the system prompt, every earlier question
    and answer and a new question. Sized to a fleet of `replicas` engines holding
    `cache_tokens` each: the conversations' final contexts add up to 60% of the fleet's
    cache (at least `requests` turns' worth of conversations) — with two or more engines,
    more than any one engine holds, which a router that spreads every conversation over
    the fleet makes each engine try to hold, while a router that keeps every conversation
    on one engine keeps its cache warm. Conversations start as a Poisson process (about `rate`
    requests per second in all); a next turn comes `answer_s` plus an exponential think
    time of mean `think_s` later. At most `requests` requests, the earliest."""
    if replicas < 1 or cache_tokens < 1 or apps < 1:
        raise ValueError("replicas, cache_tokens and apps must be positive")
    if min_turns < 1 or max_turns < min_turns or max_question_tokens < min_question_tokens < 1:
        raise ValueError("turns and question sizes must be ordered and positive")
    if rate <= 0:
        raise ValueError("rate must be positive")
    rng = np.random.default_rng(seed)
    mean_turns = (min_turns + max_turns) / 2
    mean_final = app_tokens + mean_turns * ((min_question_tokens + max_question_tokens) / 2 + output_tokens)
    wanted = max(-(-requests // int(mean_turns)), round(0.6 * replicas * cache_tokens / mean_final))
    systems = [random_text(f"app-{seed}", a, app_tokens) for a in range(apps)]
    out: list[BenchRequest] = []
    start = 0.0
    for session in range(wanted):
        start += float(rng.exponential(mean_turns / rate))
        app = session % apps
        turns = int(rng.integers(min_turns, max_turns + 1))
        asked = [int(n) for n in rng.integers(min_question_tokens, max_question_tokens + 1, turns)]
        at = start
        for turn in range(turns):

            def build(s: int = session, t: int = turn, asked: list[int] = asked, app: int = app) -> Body:
                messages: list[dict[str, Any]] = [{"role": "system", "content": systems[app]}]
                for k in range(t + 1):
                    ident = s * 64 + k
                    messages.append({"role": "user", "content": random_text(f"chat-{seed}", ident, asked[k])})
                    if k < t:
                        answer = random_text(f"reply-{seed}", ident, output_tokens)
                        messages.append({"role": "assistant", "content": answer})
                return {"messages": messages}

            out.append(BenchRequest(at, "chat", build, output_tokens, tenant=f"app-{app}"))
            at += answer_s + float(rng.exponential(think_s))
    out.sort(key=lambda r: r.at)
    return out[:requests]


GENERATORS: dict[str, Callable[..., list[BenchRequest]]] = {
    "tenants": tenants,
    "multiturn": multiturn,
    "longdoc": longdoc,
    "sessions": sessions,
    "conversations": conversations,
}
