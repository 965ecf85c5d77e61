"""A hub model through a model cache (issue #25): a Job downloads it once into the claim the
operator made, engines start only after it and serve with the downloaded tokenizer, routers
read the same files; a gated repository without a token fails with a readable condition, no
engines and no marker; deleting the model keeps the claim by default. And a model shipped as
an OCI image: an image volume the API server keeps, engines and routers reading its files
(the pod runner unpacks it from the local OCI store, e2e/oci_store.py).

The hub is the stand-in of e2e/stand_in_hub.py on the cluster's host address; the claim binds
to a folder of this machine (e2e/cache_volume.py). Engines are engine-sim (kind sim): spec.model makes
them serve the hub id and tokenize with the cached folder; the routers are precise and read
the tokenizer from the same claim, mounted read-only.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import oci_store, product
from e2e.cache_volume import bound_volume, cache_folder
from e2e.kube import Kube
from e2e.stand_in_hub import tiny_hub
from tests import chat_models
from tests.hub_server import Hub

OPEN, GATED = "acme/open-tiny", "acme/gated-tiny"
TOKEN = "hf_granted"


@pytest.fixture(scope="module")
def hub(cluster: Any) -> Iterator[Hub]:
    with tiny_hub({OPEN: None, GATED: TOKEN}) as running:
        yield running


@pytest.fixture
def volume_dir() -> Iterator[Path]:
    with cache_folder() as folder:
        yield folder


def _sim_model(name: str, model: dict[str, Any], env: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "model": model,
            "engine": {"kind": "sim", "env": env, "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}},
            "router": {"replicas": 1},
        },
    }


def _model(name: str, hub: Hub, repo: str, env: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    cached = {"hub": {"id": repo}, "cache": {"size": "1Gi", "storageClassName": "model-cache"}}
    return _sim_model(name, cached, [{"name": "HF_ENDPOINT", "value": hub.url}, *(env or [])])


def _cache(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return (product.get_model(kube, namespace, name).get("status") or {}).get("modelCache") or {}


def _events(kube: Kube, namespace: str, name: str) -> list[str]:
    return [e["reason"] for e in product.model_events(kube, namespace, name)]


def test_a_hub_model_downloads_once_and_engines_serve_from_the_cache(
    cluster: Any,
    kube: Kube,
    operator: dict[str, Any],
    namespace: str,
    hub: Hub,
    volume_dir: Path,
    say: Callable[[str], None],
) -> None:
    name = "cached"
    with bound_volume(kube, namespace, f"{name}-model-cache", volume_dir):
        started = time.monotonic()
        product.create_model(kube, namespace, _model(name, hub, OPEN))
        cache = product.wait_until(
            lambda: (c := _cache(kube, namespace, name)).get("phase") in ("Ready", "Failed") and c,
            180,
            0.5,
            what="the model cache Ready",
        )
        assert cache["phase"] == "Ready", cache
        assert cache["source"] == f"hub:{OPEN}@main"
        say(f"model cache Ready after {time.monotonic() - started:.1f}s ({cache.get('bytes')} bytes)")
        link = volume_dir / "models" / "acme--open-tiny@main"
        assert link.is_symlink()
        assert (link / "tokenizer.json").is_file()
        downloads = [p for p in hub.asked if "/resolve/" in p]
        assert downloads, hub.asked

        prm = product.wait_serving(kube, namespace, name, 2, timeout=180)
        assert product.condition(prm, "ModelCached")["status"] == "True"
        engine = product.pods(kube, namespace, name, "engine")[0]
        args = engine["spec"]["containers"][0]["args"]
        assert args[args.index("--tokenizer") + 1] == "/model-cache/models/acme--open-tiny@main"
        mounts = engine["spec"]["containers"][0]["volumeMounts"]
        assert {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True} in mounts
        router = product.router_url(kube, namespace, name)
        status, _, _ = product.http(
            "POST", router + "/v1/completions", {"model": OPEN, "prompt": "hello cache", "max_tokens": 4}, timeout=30
        )
        assert status == 200
        assert {"ModelDownloading", "ModelCached"} <= set(_events(kube, namespace, name))
        assert len([p for p in hub.asked if "/resolve/" in p]) == len(downloads)  # engines and routers asked nothing
        say(
            f"serving from the cache after {time.monotonic() - started:.1f}s, the hub asked {len(downloads)} files once"
        )

        kube.delete(product.prm_path(namespace, name))
        product.wait_until(lambda: not product.pods(kube, namespace, name, "engine"), 120, 0.5, what="engine pods gone")
        claim = kube.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}-model-cache")
        assert not claim["metadata"].get("ownerReferences")  # onDelete Keep: the claim outlives the model
        assert (link / "tokenizer.json").is_file()


def test_a_gated_repository_without_a_token_fails_readably_with_no_engines(
    cluster: Any,
    kube: Kube,
    operator: dict[str, Any],
    namespace: str,
    hub: Hub,
    volume_dir: Path,
    say: Callable[[str], None],
) -> None:
    name = "gated"
    with bound_volume(kube, namespace, f"{name}-model-cache", volume_dir):
        product.create_model(kube, namespace, _model(name, hub, GATED))
        cache = product.wait_until(
            lambda: (c := _cache(kube, namespace, name)).get("phase") == "Failed" and c,
            180,
            0.5,
            what="the model cache Failed",
        )
        assert cache["reason"] == "Gated", cache
        assert "HF_TOKEN" in cache["message"]
        condition = product.condition(product.get_model(kube, namespace, name), "ModelCached")
        assert (condition["status"], condition["reason"]) == ("False", "Gated")
        assert "ModelDownloadFailed" in _events(kube, namespace, name)
        say(f"gated without a token: {condition['message']}")
        assert not product.pods(kube, namespace, name, "engine")
        engines = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}-engine")
        assert engines["spec"]["replicas"] == 0
        assert not (volume_dir / "models").exists() or not any((volume_dir / "models").iterdir())  # no marker


def test_a_claim_that_cannot_bind_is_named_in_the_status(
    kube: Kube, operator: dict[str, Any], namespace: str, hub: Hub, say: Callable[[str], None]
) -> None:
    """A storage class that does not exist: the claim stays Pending, the scheduler cannot place
    the download pod, and status.modelCache says so instead of a bare "downloads it"."""
    name = "unbound"
    doc = _model(name, hub, OPEN)
    doc["spec"]["model"]["cache"]["storageClassName"] = "no-such-class"
    product.create_model(kube, namespace, doc)
    try:
        cache = product.wait_until(
            lambda: "cannot download it yet" in (c := _cache(kube, namespace, name)).get("message", "") and c,
            120,
            0.5,
            what="the model cache saying why its download waits",
        )
        assert cache["phase"] == "Downloading", cache
        assert "is not scheduled" in cache["message"], cache
        assert "unbound immediate PersistentVolumeClaims" in cache["message"], cache
        condition = product.condition(product.get_model(kube, namespace, name), "ModelCached")
        assert condition["status"] == "False", condition
        assert not product.pods(kube, namespace, name, "engine")
        say(f"a claim of a class that does not exist: {cache['message']}")
    finally:
        kube.delete(product.prm_path(namespace, name))


def test_a_model_shipped_as_an_oci_image_is_served_from_an_image_volume(
    cluster: Any, kube: Kube, operator: dict[str, Any], namespace: str, say: Callable[[str], None]
) -> None:
    reference = f"registry.local/acme/tiny-model:{namespace[-5:]}"
    with tempfile.TemporaryDirectory() as root:
        chat_models.model_folder(Path(root, "image", "model"), "chatml")
        layout = oci_store.push(reference, Path(root, "image"))
    try:
        image = {"image": {"reference": reference, "path": "model"}, "servedName": "acme/tiny"}
        product.create_model(kube, namespace, _sim_model("imaged", image, []))
        product.wait_serving(kube, namespace, "imaged", 2, timeout=180)
        engine = product.pods(kube, namespace, "imaged", "engine")[0]["spec"]
        # The API server kept the image volume (ImageVolume is on in 1.35; with the gate off it drops the field).
        (volume,) = [v for v in engine["volumes"] if v["name"] == "model-source"]
        assert volume["image"]["reference"] == reference
        args = engine["containers"][0]["args"]
        assert args[args.index("--tokenizer") + 1] == "/model-source/model"
        router_pod = product.pods(kube, namespace, "imaged", "router")[0]["spec"]
        assert any(v.get("image", {}).get("reference") == reference for v in router_pod["volumes"])
        router = product.router_url(kube, namespace, "imaged")
        body = {"model": "acme/tiny", "messages": [{"role": "user", "content": "hello image"}], "max_tokens": 4}
        status, _, answer = product.http("POST", router + "/v1/chat/completions", body, timeout=30)
        assert status == 200, answer
        say(f"served from the image volume {reference}, tokenized by the precise router from the same files")
    finally:
        shutil.rmtree(layout, ignore_errors=True)
