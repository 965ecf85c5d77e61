"""Precise mode on the real vLLM: the router's event index predicts what vLLM then reports cached.

One PrefixRoutedModel of kind ``vllm`` (the tiny model's folder on a hostPath volume, so the
operator makes it precise: vLLM publishes its KV events, the router follows them and keys
requests with the folder's tokenizer and chat template), one engine — two vLLM processes in
the local cluster's one network namespace cannot both bind vLLM's wildcard event port, and
one is enough to check predictions — with a small KV cache so that it evicts.

Beside the router pod, this test runs the router's own precise-mode classes
(`front.precise.PreciseMode`: the tokenizer, the ZMQ subscriber, the event follower and the
prefix-cache index behind the routing core's dispatcher) against the same engine's events.
Before each request it asks that index how many of the request's blocks the engine holds;
the request then goes through the router pod, and vLLM answers with
`usage.prompt_tokens_details.cached_tokens` (`--enable-prompt-tokens-details`). Every
prediction must equal vLLM's figure, and the router's token count vLLM's prompt_tokens:
completions, a growing chat, a cache_salt, evictions and a cache reset — but for the one
request right after the reset: vLLM publishes queued events only after a model step, so
the reset reaches the index with that request's own step (asserted as such).

Runs alone: ``PREFIXROUTE_E2E_VLLM=1 .venv/bin/python -m pytest e2e/test_vllm_precise.py``.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from e2e import product, vllmenv
from e2e.conftest import Cluster
from e2e.kube import Kube
from prefixroute.routing import kv_native

pytestmark = pytest.mark.vllm

NAME = "tiny-precise"
SERVED = "tiny-llama"
MODEL_DIR = "/models/tiny-llama"
BLOCK = 32  # vLLM's CPU attention takes multiples of 32 (e2e/vllmcpu.py); the operator reads it from the args
KV_BLOCKS = 96  # 3,072 tokens: a few prompts fill it
ENGINE_ARGS = [
    "--served-model-name", SERVED, "--max-model-len", "2048", "--max-num-seqs", "4",
    "--block-size", str(BLOCK), "--num-gpu-blocks-override", str(KV_BLOCKS), "--enable-prompt-tokens-details",
]  # fmt: skip


def _model(model_dir: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "engine": {
                "kind": "vllm",
                "model": MODEL_DIR,
                "args": ENGINE_ARGS,
                "env": [{"name": "VLLM_SERVER_DEV_MODE", "value": "1"}],  # vLLM serves /reset_prefix_cache only so
                "volumes": [{"name": "model", "hostPath": {"path": model_dir, "type": "Directory"}}],
                "volumeMounts": [{"name": "model", "mountPath": MODEL_DIR, "readOnly": True}],
            },
            # no routing.mode: a vLLM model in a folder the router can mount is precise by default
            "router": {"replicas": 1},
        },
    }


@pytest.fixture(scope="module")
def ns(kube: Kube) -> Iterator[str]:
    with product.model_namespace(kube, "e2e-vllm-precise", NAME) as name:
        yield name


def _text(seed: int, words: int) -> str:
    """Distinct filler of about ``words`` tokens (the tiny tokenizer knows these words)."""
    vocab = "model cache prefix block token request reply route replica engine tenant system user".split()
    return " ".join(f"{vocab[(seed * 7 + i * (seed + 3)) % len(vocab)]} {seed + i}" for i in range(words // 2))


async def _predict_and_check(
    router: str, engine: str, pod_ip: str, folder: str
) -> tuple[list[tuple[str, int, int, int]], tuple[int, int]]:
    """(case, prompt tokens, predicted cached, vLLM's cached) per request, in order; and how many
    of vLLM's messages the compiled reader read, of how many."""
    import aiohttp

    from prefixroute.front.precise import PreciseMode, PreciseSettings
    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.dispatch import Dispatcher
    from prefixroute.routing.fleet import Fleet, Member

    config = RoutingConfig(block_size=BLOCK)
    dispatcher = Dispatcher(config)
    settings = PreciseSettings(
        mode="precise",
        tokenizer=folder,
        served_model=SERVED,
        kv_events=(f"tcp://{pod_ip}:5557",),
        kv_events_replay=(f"tcp://{pod_ip}:5558",),
    )
    precise = PreciseMode(settings, config, dispatcher, (engine,), time.monotonic)
    fleet = Fleet((Member(engine, engine),), config.virtual_nodes)
    dispatcher.set_fleet(fleet)
    await precise.start()
    precise.fleet_changed(fleet)
    assert precise.follower is not None
    follower = precise.follower
    member = fleet.by_name[engine]
    rows: list[tuple[str, int, int, int]] = []

    def messages() -> int:
        stream = follower.streams.get(engine)
        return stream.counts["messages"] if stream is not None else 0

    async def settle(before: int) -> None:
        """Until this request's events are in: a message arrived and none for 0.5 s."""
        deadline = time.monotonic() + 20
        while messages() == before and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        last, quiet = messages(), time.monotonic()
        while time.monotonic() - quiet < 0.5 and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
            if messages() != last:
                last, quiet = messages(), time.monotonic()

    async with aiohttp.ClientSession() as http:

        async def send(case: str, kind: str, body: dict[str, Any]) -> None:
            keys = precise.request(kind, body, None, None)
            matched = dispatcher.strategy.matched_blocks(keys, member) or 0
            predicted = min(matched, (keys.units - 1) // BLOCK) * BLOCK  # vLLM computes the last token
            path = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
            before = messages()
            async with http.post(router + path, json={"model": SERVED, "max_tokens": 1, **body}) as resp:
                answer = json.loads(await resp.read())
                assert resp.status == 200, answer
            usage = answer["usage"]
            rows.append((case, usage["prompt_tokens"], predicted, usage["prompt_tokens_details"]["cached_tokens"]))
            assert usage["prompt_tokens"] == keys.units, (case, "the router's tokens are not vLLM's", usage)
            await settle(before)

        system = "you are a cache: " + _text(1, 200)
        document = "document: " + _text(2, 400)
        await send("completion, new", "completion", {"prompt": document})
        await send("completion, same prefix", "completion", {"prompt": document + " question " + _text(3, 30)})
        chat = [{"role": "system", "content": system}, {"role": "user", "content": _text(4, 40)}]
        await send("chat turn 1", "chat", {"messages": chat})
        chat += [{"role": "assistant", "content": _text(5, 20)}, {"role": "user", "content": _text(6, 40)}]
        await send("chat turn 2", "chat", {"messages": chat})
        await send("completion, another cache_salt", "completion", {"prompt": document, "cache_salt": "tenant-b"})
        await send("completion, its own salt again", "completion", {"prompt": document, "cache_salt": "tenant-b"})
        for i in range(4):  # 4 x ~700 tokens through a 3,072-token cache: the oldest go
            await send(f"filler {i}", "completion", {"prompt": f"filler {i}: " + _text(10 + i, 700)})
        await send("completion after evictions", "completion", {"prompt": document + " again"})
        await send("chat after evictions", "chat", {"messages": chat})
        async with http.post(engine + "/reset_prefix_cache") as resp:
            assert resp.status == 200
        await asyncio.sleep(1.0)
        await send("chat after a reset", "chat", {"messages": chat})
        await send("chat once more", "chat", {"messages": chat})
    counts = follower.streams[engine].counts
    natively = (counts["read_natively"], counts["messages"])
    await precise.stop()
    return rows, natively


@pytest.fixture(scope="module")
def served(cluster: Cluster, kube: Kube, operator: dict[str, Any], ns: str) -> dict[str, str]:
    """The model on one real vLLM engine: {pod, engine (URL), pod_ip, router (URL), folder (host path)}."""
    paths = vllmenv.paths()
    if not (paths.installed() and paths.generated()):
        pytest.fail(f"the real vLLM is not installed ({paths.env}, {paths.model}): run bash scripts/setup.sh --vllm")
    cluster.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=yaml.safe_dump(_model(str(paths.model))))
    prm = product.wait_serving(kube, ns, NAME, 1, timeout=600)
    ((pod, engine),) = product.engine_urls(prm).items()
    router_args = product.pods(kube, ns, NAME, "router")[0]["spec"]["containers"][0]["args"]
    assert router_args[router_args.index("--mode") + 1] == "precise"
    assert "--kv-events-port" in router_args
    assert router_args[router_args.index("--block-size") + 1] == str(BLOCK)
    return {
        "pod": pod,
        "engine": engine,
        "pod_ip": engine.split("://", 1)[1].rsplit(":", 1)[0],
        "router": product.router_url(kube, ns, NAME),
        "folder": str(paths.model),
    }


def test_the_routers_event_index_predicts_what_vllm_reports_cached(
    served: dict[str, str], say: Callable[[str], None]
) -> None:
    rows, (natively, messages) = asyncio.run(
        _predict_and_check(served["router"], served["engine"], served["pod_ip"], served["folder"])
    )
    table = "\n".join(f"      {case:32} {tokens:5} tokens  predicted {p:5}  vLLM {v:5}" for case, tokens, p, v in rows)
    say(
        f"the router's event index against vLLM's cached_tokens, {len(rows)} requests on {served['pod']}"
        f" ({natively} of vLLM's {messages} event messages read by the compiled reader):\n{table}"
    )
    if kv_native.AVAILABLE:  # setup.sh builds it: vLLM's own messages are a shape it takes, every one
        assert natively == messages > 0
    # vLLM publishes the events it queued only after a model step (Scheduler.update_from_output),
    # so a reset with no traffic after it is announced with the next request's own step: that
    # request is predicted from the old view. Every other prediction is exact.
    lagged = "chat after a reset"
    exact = [row for row in rows if row[0] != lagged]
    assert [(case, p) for case, _, p, _ in exact] == [(case, v) for case, _, _, v in exact]
    predicted = {case: p for case, _, p, _ in rows}
    cached = {case: v for case, _, _, v in rows}
    assert predicted[lagged] == predicted["chat once more"] > 0
    assert cached[lagged] == 0
    # the cases mean what they say (vLLM's own figures): a hit, a salt that isolates, evictions, a reset
    assert cached["completion, new"] == 0
    assert cached["completion, same prefix"] > 0
    assert cached["chat turn 2"] > 0
    assert cached["completion, another cache_salt"] == 0
    assert cached["completion, its own salt again"] > 0
    assert cached["chat once more"] > 0


def test_keying_a_chat_in_the_router_against_asking_vllms_tokenize(
    served: dict[str, str], say: Callable[[str], None]
) -> None:
    """The choice docs/router.md explains: the router renders and tokenizes a chat itself rather
    than ask the engine's /tokenize. Same tokens either way (checked); what each costs, measured
    here against the real vLLM (a figure printed, not asserted: the machine is shared)."""
    import statistics

    from prefixroute import prompt_tokens

    tokens_of = prompt_tokens.load(served["folder"], store_tokens=0)  # timed: the whole chat every time
    chat = [{"role": "system", "content": _text(20, 800)}, {"role": "user", "content": _text(21, 400)}]
    body = {"model": SERVED, "messages": chat}
    local = list(tokens_of("chat", body))
    status, _, raw = product.http("POST", served["engine"] + "/tokenize", body, timeout=60)
    assert status == 200, raw[:300]
    assert json.loads(raw)["tokens"] == local  # vLLM's own tokens for the chat are the router's
    stored = prompt_tokens.load(served["folder"])  # and so are the token store's, cold and warm
    assert list(stored("chat", body)) == local
    assert list(stored("chat", body)) == local
    cpu, wall = [], []
    for _ in range(30):
        started_cpu, started = time.process_time(), time.perf_counter()
        tokens_of("chat", body)
        cpu.append(time.process_time() - started_cpu)
        started = time.perf_counter()
        product.http("POST", served["engine"] + "/tokenize", body, timeout=60)
        wall.append(time.perf_counter() - started)
    say(
        f"a {len(local)}-token chat: rendered and tokenized in the router {statistics.median(cpu) * 1e3:.2f} ms CPU "
        f"(median of 30); vLLM's /tokenize round trip {statistics.median(wall) * 1e3:.2f} ms wall "
        f"(median, ratio {statistics.median(wall) / max(statistics.median(cpu), 1e-9):.1f}x)"
    )
