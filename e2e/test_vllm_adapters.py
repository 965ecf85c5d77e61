"""LoRA adapters on real vLLM, placed, loaded, routed to and unloaded by the operator.

One PrefixRoutedModel of kind ``vllm``: the tiny model of e2e/test_vllm.py on two replicas,
``spec.engine.lora`` with one slot each, and two adapters given as folders (generated here
by e2e/tinylora.py with the vLLM environment's own numpy and safetensors, seeded, with
weights large enough to change what the model says). With two adapters and one slot, each
adapter is placed on one engine (adapter_placement: ceil(2 x 1 / 2) = 1 of them).

The tests prove on vLLM itself: each adapter is registered exactly where status.adapters
and the ring say (the engine's own ``GET /v1/models``), requests through the router for
each adapter are answered by the engine that holds it (the router's member header) and
greedy answers differ from the base model's and from the other adapter's (vLLM applied the
adapter asked for), and removing an adapter from the spec unloads it from the running
engine: the same pods, uids and restart counts, its ``/v1/models`` without the adapter.

Runs alone, on a machine with the vLLM environment:
``bash scripts/test.sh --e2e e2e/test_vllm_adapters.py``. Two vLLM servers take about
4 GB of memory each.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import pins, product, vllmenv
from e2e.conftest import Cluster
from e2e.kube import Kube
from prefixroute.bench import prom

pytestmark = pytest.mark.vllm

NAME = "tinylora"
SERVED = "tiny-llama"
MODEL_DIR = "/models/tiny-llama"
ADAPTERS = {"sql": 1, "poet": 2}  # name -> the generator's seed
REPLICAS = 2
ENGINE_ARGS = ["--served-model-name", SERVED, "--max-model-len", "2048", "--max-num-seqs", "8"]
PROMPT = "the model cache prefix block token request reply route"


def _model(model_dir: str, adapter_dirs: dict[str, Path], adapters: list[str]) -> dict[str, Any]:
    volumes = [{"name": "model", "hostPath": {"path": model_dir, "type": "Directory"}}]
    mounts = [{"name": "model", "mountPath": MODEL_DIR, "readOnly": True}]
    for name, folder in adapter_dirs.items():
        volumes.append({"name": f"lora-{name}", "hostPath": {"path": str(folder), "type": "Directory"}})
        mounts.append({"name": f"lora-{name}", "mountPath": f"/adapters/{name}", "readOnly": True})
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": REPLICAS,
            "engine": {
                "kind": "vllm",
                "model": MODEL_DIR,
                "args": ENGINE_ARGS,
                "lora": {"maxLoras": 1, "maxRank": 8},
                "volumes": volumes,
                "volumeMounts": mounts,
            },
            "adapters": [{"name": n, "source": {"folder": {"path": f"/adapters/{n}"}}} for n in adapters],
            # approximate: two vLLM processes here share one network namespace (e2e/test_vllm.py)
            "routing": {"strategy": "prefix-cache", "mode": "approximate"},
            "router": {"replicas": 1, "retries": 1},
        },
    }


@pytest.fixture(scope="module")
def vllm_paths() -> vllmenv.Paths:
    p = vllmenv.paths()
    if not (p.installed() and p.generated()):
        pytest.fail(f"the real vLLM is not installed ({p.env}, {p.model}): run bash scripts/setup.sh --vllm")
    return p


@pytest.fixture(scope="module")
def adapter_dirs(vllm_paths: vllmenv.Paths) -> dict[str, Path]:
    """The two adapters, made once by the vLLM environment's interpreter (it has safetensors)
    beside the tiny model, keyed by the generator and the seed, so a second run reuses them.
    Not under /tmp: the pods' hostPath volumes see the machine's folders, not this process's
    private /tmp."""
    generator = pins.E2E_DIR / "tinylora.py"
    digest = hashlib.sha256(generator.read_bytes()).hexdigest()[:12]
    made = {}
    for name, seed in ADAPTERS.items():
        folder = vllm_paths.model.parent.parent / "adapters" / f"{name}-{seed}-{digest}"
        if not (folder / "adapter_model.safetensors").is_file():
            partial = folder.with_name(folder.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            subprocess.run(
                [str(vllm_paths.python), str(generator), str(partial), str(seed), SERVED],
                check=True,
                capture_output=True,
                env={"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"},
            )
            partial.rename(folder)  # an adapter folder is complete or absent
        made[name] = folder
    return made


@pytest.fixture(scope="module")
def ns(kube: Kube) -> Iterator[str]:
    with product.model_namespace(kube, "e2e-vllm-lora", NAME) as name:
        yield name


def _placed(kube: Kube, ns: str, adapters: list[str], replicas: int) -> dict[str, Any] | None:
    """The model once the sync has recorded every ring member (each carries ``adapters``),
    status.adapters lists exactly ``adapters``, each on ``replicas`` pods, and the ring's
    members carry the same placement. (While an engine has just joined, the ring may still
    show the placement made without it.)"""
    prm = product.get_model(kube, ns, NAME)
    entries = prm.get("status", {}).get("adapters") or []
    if [e["name"] for e in entries] != adapters or any(e.get("replicas") != replicas for e in entries):
        return None
    members = product.ring_members(prm)
    if len(members) != REPLICAS or not all("adapters" in m for m in members):
        return None
    by_ring = {a: sorted(m["pod"] for m in members if a in (m.get("adapters") or ())) for a in adapters}
    if any(by_ring[e["name"]] != e["pods"] for e in entries):
        return None
    return prm


@pytest.fixture(scope="module")
def served(
    cluster: Cluster,
    kube: Kube,
    operator: dict[str, Any],
    ns: str,
    vllm_paths: vllmenv.Paths,
    adapter_dirs: dict[str, Path],
) -> dict[str, Any]:
    """The model on two real vLLM engines with both adapters placed: {prm, router, engines, seconds}."""
    started = time.monotonic()
    doc = _model(str(vllm_paths.model), adapter_dirs, list(ADAPTERS))
    cluster.kubectl("apply", "--server-side", "-n", ns, "-f", "-", input=yaml.safe_dump(doc))
    try:
        product.wait_serving(kube, ns, NAME, REPLICAS, timeout=600)
        prm = product.wait_until(lambda: _placed(kube, ns, list(ADAPTERS), 1), 180, 1.0, what="adapters placed")
    except AssertionError:
        for pod in product.pods(kube, ns, NAME, "engine"):
            log = cluster.pod_log_dir(ns, pod) / "engine.log"
            tail = log.read_text()[-3000:] if log.exists() else "(no log)"
            print(f"--- {pod['metadata']['name']}: {json.dumps(pod['status'].get('containerStatuses'))}\n{tail}")
        print(json.dumps(product.get_model(kube, ns, NAME).get("status"), indent=1)[:4000])
        raise
    return {
        "prm": prm,
        "router": product.router_url(kube, ns, NAME),
        "engines": product.engine_urls(prm),
        "seconds": time.monotonic() - started,
    }


def _registered(url: str) -> set[str]:
    status, _, body = product.http("GET", url + "/v1/models")
    assert status == 200, body
    return {m["id"] for m in json.loads(body)["data"] if m.get("parent")}


def _complete(url: str, model: str) -> tuple[int, str, str]:
    """(status, greedy text, answering member) of a completion for ``model``."""
    body = {"model": model, "prompt": PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    status, headers, raw = product.http("POST", url + "/v1/completions", body, timeout=120)
    text = json.loads(raw)["choices"][0]["text"] if status == 200 else raw.decode()[:300]
    return status, text, headers.get("X-Prefixroute-Member", "")


def _lora_info_exported(url: str) -> bool:
    metrics = product.http("GET", url + "/metrics")[2].decode()
    return "vllm:lora_requests_info" in {sample.name for sample in prom.samples(metrics)}


def _holders(prm: dict[str, Any]) -> dict[str, list[str]]:
    return {e["name"]: e["pods"] for e in prm["status"]["adapters"]}


# --------------------------------------------------------------------------------------------


def test_each_adapter_is_registered_on_the_engines_status_and_the_ring_name(
    kube: Kube, ns: str, served: dict[str, Any], say: Callable[[str], None]
) -> None:
    prm, engines = served["prm"], served["engines"]
    holders = _holders(prm)
    assert all(len(pods) == 1 for pods in holders.values()), holders  # one slot each, two adapters
    for pod, url in engines.items():
        expected = {a for a, pods in holders.items() if pod in pods}
        assert _registered(url) == expected, (pod, holders)  # vLLM's own list
        annotations = kube.get(f"/api/v1/namespaces/{ns}/pods/{pod}")["metadata"]["annotations"]
        assert set(filter(None, annotations["prefixroute.io/adapters"].split(","))) == expected
    spec = prm["spec"]["engine"]
    assert spec["lora"] == {"maxLoras": 1, "maxRank": 8}
    for pod in product.live(product.pods(kube, ns, NAME, "engine")):
        args = pod["spec"]["containers"][0]["args"]
        assert args[args.index("--max-loras") + 1] == "1"
        assert "--enable-lora" in args
    say(f"2 adapters on 2 real vLLM engines with 1 slot each: {holders}, placed {served['seconds']:.0f}s after apply")


def test_the_router_sends_each_adapter_to_its_engine_and_vllm_applies_it(
    served: dict[str, Any], say: Callable[[str], None]
) -> None:
    router, holders = served["router"], _holders(served["prm"])
    status, base, _ = _complete(router, SERVED)
    assert status == 200, base
    texts = {}
    for adapter, pods in holders.items():
        for _ in range(3):
            status, text, member = _complete(router, adapter)
            assert status == 200, text
            assert member in pods, (adapter, member, holders)  # only the engine that holds it can answer
            texts.setdefault(adapter, set()).add(text)
        assert len(texts[adapter]) == 1, texts  # greedy: the same answer every time
    answers = {a: next(iter(t)) for a, t in texts.items()}
    assert len({base, *answers.values()}) == 3, (base, answers)  # each adapter changed what the model says
    # What the router reads of each engine's adapters (front/scrape.py), exported by a LoRA vLLM.
    # vLLM sets the gauge when its stat logger records an engine step, which may come after the
    # answer, and never on an engine that has served nothing: rendezvous placement puts both
    # adapters on one engine about half the time, and then all these requests went there.
    holding = {pod for pods in holders.values() for pod in pods}
    for pod, url in served["engines"].items():
        if pod in holding:
            product.wait_until(lambda url=url: _lora_info_exported(url), 30, 0.5, what=f"lora_requests_info at {url}")
    say(f"greedy answers: base {base!r}; " + "; ".join(f"{a} {t!r}" for a, t in answers.items()))


def test_removing_an_adapter_unloads_it_from_the_running_engines(
    kube: Kube, ns: str, served: dict[str, Any], say: Callable[[str], None]
) -> None:
    kept, removed = list(ADAPTERS)
    before = {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["status"]["containerStatuses"][0].get("restartCount", 0))
        for p in product.live(product.pods(kube, ns, NAME, "engine"))
    }
    holder = _holders(served["prm"])[removed][0]
    started = time.monotonic()
    spec = {"adapters": [{"name": kept, "source": {"folder": {"path": f"/adapters/{kept}"}}}]}
    kube.patch(product.prm_path(ns, NAME), {"spec": spec}, kind="merge")
    prm = product.wait_until(lambda: _placed(kube, ns, [kept], REPLICAS), 120, 1.0, what=f"{removed} gone from status")
    seconds = time.monotonic() - started
    engines = product.engine_urls(prm)
    assert removed not in _registered(engines[holder])
    # one adapter now fits in one slot: it is placed on every engine
    assert all(_registered(url) == {kept} for url in engines.values()), {p: _registered(u) for p, u in engines.items()}
    after = {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["status"]["containerStatuses"][0].get("restartCount", 0))
        for p in product.live(product.pods(kube, ns, NAME, "engine"))
    }
    assert after == before  # the same pods, never restarted
    status, text, _ = _complete(served["router"], removed)
    assert status == 404, (status, text)
    say(
        f"{removed} unloaded from {holder} and {kept} loaded everywhere {seconds:.0f}s after the spec change; pods {sorted(after)} kept"
    )
