"""A model cache's live download progress (issue #25, docs/models.md "Live progress") on the
local cluster: the stand-in hub serves each file at a set rate, so the operator's download Job
runs for about 25 s; while status.modelCache is Downloading, the operator reads the progress
lines of the Job's pod log through the API server (the pod runner's kubelet endpoint,
e2e/kubeletserver.py) and status.modelCache.bytes rises against bytesTotal, the files' real
total; Ready then says all of it.

Five weight shards of 1 to 5 MiB, each at 1 MiB per 5 s: the hub client fetches them at once,
so one more is whole every 5 s (a partial file shows nothing: the client writes 10 MiB
chunks). The downloader prints its progress every 5 s, the operator reads it every 5 s.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import product
from e2e.cache_volume import bound_volume, cache_folder
from e2e.kube import Kube
from e2e.stand_in_hub import tiny_hub
from tests import chat_models
from tests.hub_server import Hub

REPO = "acme/slow-tiny"
MIB = 2**20
SHARDS = 5
RATE = MIB / 5  # bytes a second, per file
PROGRESS = re.compile(r"^the Job \S+ downloads it: (\d+\.\d) MiB of (\d+\.\d) MiB \((\d+)%\)$")


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model with five weight shards of 1..5 MiB (bytes that never compress)."""
    folder = chat_models.model_folder(tmp_path_factory.mktemp("slow") / "model", "chatml")
    for i in range(1, SHARDS + 1):
        (folder / f"model-{i:05d}-of-{SHARDS:05d}.safetensors").write_bytes(os.urandom(i * MIB))
    return folder


@pytest.fixture(scope="module")
def hub(cluster: Any, model: Path) -> Iterator[Hub]:
    with tiny_hub({REPO: None}, model=model, bytes_per_second=RATE) as running:
        yield running


def _model(name: str, hub: Hub) -> dict[str, Any]:
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "model": {"hub": {"id": REPO}, "cache": {"size": "1Gi", "storageClassName": "model-cache"}},
            "engine": {
                "kind": "sim",
                "env": [{"name": "HF_ENDPOINT", "value": hub.url}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            },
            "router": {"replicas": 1},
        },
    }


def _cache(kube: Kube, namespace: str, name: str) -> dict[str, Any]:
    return (product.get_model(kube, namespace, name).get("status") or {}).get("modelCache") or {}


def _watch_download(
    kube: Kube, namespace: str, name: str, timeout: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every distinct status.modelCache seen while Downloading, and the one that ended it."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        cache = _cache(kube, namespace, name)
        if cache.get("phase") in ("Ready", "Failed"):
            return seen, cache
        if cache.get("phase") == "Downloading" and (not seen or cache != seen[-1]):
            seen.append(cache)
        time.sleep(0.5)
    raise AssertionError(f"the model cache did not end within {timeout:.0f}s: {seen[-1:] or 'never Downloading'}")


def test_the_download_progress_rises_in_status_while_the_cache_downloads(
    cluster: Any,
    kube: Kube,
    operator: dict[str, Any],
    namespace: str,
    hub: Hub,
    model: Path,
    say: Callable[[str], None],
) -> None:
    name = "slow"
    total = sum(p.stat().st_size for p in model.iterdir())
    with cache_folder() as volume_dir, bound_volume(kube, namespace, f"{name}-model-cache", volume_dir):
        started = time.monotonic()
        product.create_model(kube, namespace, _model(name, hub))
        seen, ended = _watch_download(kube, namespace, name, 240)
        took = time.monotonic() - started
        assert ended["phase"] == "Ready", ended

        arrived = volume_dir / "models" / "acme--slow-tiny@main"
        fetched = sum(p.stat().st_size for p in arrived.iterdir())
        assert fetched == total  # every file of the repository is one the download wants
        figures = [c for c in seen if "bytes" in c]
        assert figures, f"no progress while Downloading: {seen}"
        assert all(c["bytesTotal"] == total for c in figures), figures
        done = [c["bytes"] for c in figures]
        assert done == sorted(done), done
        assert len([d for d in done if 0 < d < total]) >= 2, done  # it rose while under way, seen twice
        for c in figures:
            shown = PROGRESS.match(c["message"])
            assert shown, c["message"]
            assert shown.groups() == (f"{c['bytes'] / MIB:.1f}", f"{total / MIB:.1f}", str(100 * c["bytes"] // total))
        assert ended["bytes"] == total
        say(
            f"Downloading {took:.1f}s, {len(figures)} progress figures in status: "
            + ", ".join(c["message"].split(": ", 1)[1] for c in figures)
        )
