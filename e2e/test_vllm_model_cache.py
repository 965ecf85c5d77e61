"""A hub model through the model cache on the real vLLM (issue #25): the download Job fetches
the tiny model from the stand-in hub into the claim, vLLM loads it from there (read-only,
offline), the router keys requests in precise mode with the tokenizer from the same files,
and nothing asks the hub again.

One engine: two vLLM processes in the local cluster's one network namespace cannot both bind
vLLM's wildcard KV event port (e2e/test_vllm_precise.py says the same). The claim binds to a
folder of this machine (e2e/cache_volume.py).

Runs alone: ``PREFIXROUTE_E2E_VLLM=1 .venv/bin/python -m pytest e2e/test_vllm_model_cache.py``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import product, vllmenv
from e2e.cache_volume import STORAGE_CLASS, bound_volume, cache_folder
from e2e.kube import Kube
from e2e.stand_in_hub import tiny_hub
from tests.hub_server import Hub

pytestmark = pytest.mark.vllm

NAME = "tiny-cached"
REPO = "acme/tiny-llama"
SNAPSHOT = "/model-cache/models/acme--tiny-llama@main"
BLOCK = 32  # vLLM's CPU attention takes multiples of 32 (e2e/vllmcpu.py)
ENGINE_ARGS = [
    "--max-model-len", "2048", "--max-num-seqs", "4", "--block-size", str(BLOCK), "--enable-prompt-tokens-details",
]  # fmt: skip


def _model(hub: Hub) -> dict[str, Any]:
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 1,
            "model": {"hub": {"id": REPO}, "cache": {"size": "1Gi", "storageClassName": STORAGE_CLASS}},
            "engine": {"kind": "vllm", "args": ENGINE_ARGS, "env": [{"name": "HF_ENDPOINT", "value": hub.url}]},
            "router": {"replicas": 1},
        },
    }


def _downloads(hub: Hub) -> list[str]:
    return [p for p in hub.asked if "/resolve/" in p]


@pytest.fixture(scope="module")
def served(cluster: Any, kube: Kube, operator: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The model served from the cache: {ns, prm, hub, folder, downloads, seconds}."""
    paths = vllmenv.paths()
    if not (paths.installed() and paths.generated()):
        pytest.fail(f"the real vLLM is not installed ({paths.env}, {paths.model}): run bash scripts/setup.sh --vllm")
    with (
        tiny_hub({REPO: None}, model=paths.model) as hub,
        cache_folder() as folder,
        product.model_namespace(kube, "e2e-vllm-cache", NAME) as ns,
        bound_volume(kube, ns, f"{NAME}-model-cache", folder),
    ):
        started = time.monotonic()
        product.create_model(kube, ns, _model(hub))
        prm = product.wait_serving(kube, ns, NAME, 1, timeout=600)
        yield {
            "ns": ns,
            "prm": prm,
            "hub": hub,
            "folder": folder,
            "downloads": _downloads(hub),
            "seconds": time.monotonic() - started,
        }


def test_vllm_loads_the_hub_model_from_the_cache(
    served: dict[str, Any], kube: Kube, say: Callable[[str], None]
) -> None:
    ns, prm, folder = served["ns"], served["prm"], served["folder"]
    cache = prm["status"]["modelCache"]
    assert (cache["phase"], cache["source"]) == ("Ready", f"hub:{REPO}@main")
    assert (folder / "models" / "acme--tiny-llama@main" / "model.safetensors").is_file()
    assert served["downloads"], "the Job fetched nothing from the hub"
    assert not any(p.endswith(".bin") for p in served["downloads"])

    engine = product.pods(kube, ns, NAME, "engine")[0]["spec"]["containers"][0]
    assert SNAPSHOT in engine["args"]
    assert {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True} in engine["volumeMounts"]
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in engine["env"]
    ((pod, url),) = product.engine_urls(prm).items()
    status, _, body = product.http("GET", url + "/v1/models", timeout=10)
    assert status == 200
    (listed,) = json.loads(body)["data"]
    assert (listed["id"], listed["root"]) == (REPO, SNAPSHOT)  # vLLM serves the hub id from the cache's path
    say(f"vLLM on {pod} serving {REPO} from {SNAPSHOT}, {served['seconds']:.0f}s after create")


def test_the_precise_router_reads_the_same_files_and_nobody_asks_the_hub_again(
    served: dict[str, Any], kube: Kube, say: Callable[[str], None]
) -> None:
    ns = served["ns"]
    router_args = product.pods(kube, ns, NAME, "router")[0]["spec"]["containers"][0]["args"]
    assert router_args[router_args.index("--mode") + 1] == "precise"
    assert any(SNAPSHOT in arg for arg in router_args), router_args  # its tokenizer: the cached folder
    router = product.router_url(kube, ns, NAME)
    system = "you answer from the cache: " + " ".join(f"block {i} token {i * 7}" for i in range(120))
    usages = []
    for question in ("first question", "second question"):
        body = {
            "model": REPO,
            "max_tokens": 2,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
        }
        status, _, answer = product.http("POST", router + "/v1/chat/completions", body, timeout=60)
        assert status == 200, answer
        usages.append(json.loads(answer)["usage"])
    cached = usages[1]["prompt_tokens_details"]["cached_tokens"]
    assert cached >= BLOCK, usages  # vLLM itself reports the shared system prompt reused
    assert _downloads(served["hub"]) == served["downloads"]  # engine and router read only the claim
    say(
        f"through the precise router: {usages[1]['prompt_tokens']} prompt tokens, {cached} cached by vLLM; "
        f"the hub asked {len(served['downloads'])} files, once"
    )


def test_the_cache_outlives_the_model(served: dict[str, Any], kube: Kube) -> None:
    ns = served["ns"]
    kube.delete(product.prm_path(ns, NAME))
    product.wait_until(lambda: not product.pods(kube, ns, NAME, "engine"), 120, 0.5, what="engine pods gone")
    claim = kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{NAME}-model-cache")
    assert not claim["metadata"].get("ownerReferences")  # onDelete Keep by default
    assert Path(served["folder"], "models", "acme--tiny-llama@main", "config.json").is_file()
