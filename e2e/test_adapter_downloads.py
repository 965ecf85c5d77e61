"""Hub LoRA adapters' downloads in status (issue #25): a model with a model cache and two hub
adapters, one the stand-in hub serves and one it does not have. Each adapter's Job shows in
status.adapters[*].download; the one that came is loaded on every engine (engine-sim's own
`GET /v1/models` lists it, and a request for it through the router is answered), the missing
one is Failed with NotFound and never asked of the engines (no AdapterLoadFailed), the
AdaptersLoaded condition is False DownloadFailed naming it, and the Events of each
transition are there. Removing the missing adapter from the spec turns the condition True.

The hub is tests/hub_server.py on the cluster's host address, holding the tiny model and a
folder with a PEFT adapter config (all engine-sim reads of an adapter); the claim binds to a
folder of this machine (e2e/cache_volume.py), as in e2e/test_model_cache.py.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import layout, product
from e2e.cache_volume import bound_volume, cache_folder
from e2e.kube import Kube
from tests import chat_models
from tests.hub_server import Hub, Repo, serving

MODEL, ADAPTER, MISSING = "acme/base-tiny", "acme/sql-lora", "acme/no-such-lora"
NAME = "adapted"


def _adapter_folder(folder: Path) -> Path:
    """A LoRA adapter as PEFT lays one out: its config (what engine-sim checks) and a weights file."""
    folder.mkdir(parents=True)
    config = {
        "peft_type": "LORA",
        "r": 8,
        "lora_alpha": 16,
        "target_modules": ["q_proj"],
        "base_model_name_or_path": MODEL,
    }
    (folder / "adapter_config.json").write_text(json.dumps(config))
    (folder / "adapter_model.safetensors").write_bytes(b"\0" * 4096)
    return folder


@pytest.fixture(scope="module")
def hub(cluster: Any) -> Iterator[Hub]:
    root = Path(tempfile.mkdtemp(prefix="e2e-hub-"))
    try:
        repos = {
            MODEL: Repo(chat_models.model_folder(root / "tiny", "chatml")),
            ADAPTER: Repo(_adapter_folder(root / "sql-lora")),
        }
        with serving(Hub(repos), layout.HOST_IP) as running:
            yield running
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def volume_dir() -> Iterator[Path]:
    with cache_folder() as folder:
        yield folder


def _adapters(*names: str) -> list[dict[str, Any]]:
    repos = {"sql": ADAPTER, "missing": MISSING}
    return [{"name": n, "source": {"hub": {"id": repos[n]}}} for n in names]


def _model(hub: Hub) -> dict[str, Any]:
    return {
        "apiVersion": f"{product.GROUP}/{product.VERSION}",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": NAME},
        "spec": {
            "replicas": 2,
            "model": {"hub": {"id": MODEL}, "cache": {"size": "1Gi", "storageClassName": "model-cache"}},
            "engine": {
                "kind": "sim",
                "lora": {"maxLoras": 2},
                "env": [{"name": "HF_ENDPOINT", "value": hub.url}],
                "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
            },
            "adapters": _adapters("sql", "missing"),
            "router": {"replicas": 1},
        },
    }


def _status(kube: Kube, namespace: str) -> dict[str, Any]:
    return product.get_model(kube, namespace, NAME).get("status") or {}


def _entries(kube: Kube, namespace: str) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in _status(kube, namespace).get("adapters") or ()}


def _events(kube: Kube, namespace: str) -> list[tuple[str, str, str]]:
    return [(e["type"], e["reason"], e.get("message") or "") for e in product.model_events(kube, namespace, NAME)]


def _settled(kube: Kube, namespace: str) -> dict[str, dict[str, Any]] | None:
    """status.adapters once sql is Ready and loaded on both engines and missing has failed."""
    found = _entries(kube, namespace)
    sql, missing = found.get("sql", {}), found.get("missing", {})
    done = (
        (sql.get("download") or {}).get("phase") == "Ready"
        and sql.get("replicas") == 2
        and (missing.get("download") or {}).get("phase") == "Failed"
    )
    return found if done else None


def _adapters_loaded(kube: Kube, namespace: str) -> dict[str, Any]:
    return product.condition(product.get_model(kube, namespace, NAME), "AdaptersLoaded")


def test_a_missing_hub_adapter_fails_readably_while_the_other_is_loaded(
    cluster: Any,
    kube: Kube,
    operator: dict[str, Any],
    namespace: str,
    hub: Hub,
    volume_dir: Path,
    say: Callable[[str], None],
) -> None:
    with bound_volume(kube, namespace, f"{NAME}-model-cache", volume_dir):
        started = time.monotonic()
        product.create_model(kube, namespace, _model(hub))
        entries = product.wait_until(lambda: _settled(kube, namespace), 240, 0.5, what="sql loaded, missing failed")
        say(f"sql Ready and loaded on 2 engines, missing Failed, after {time.monotonic() - started:.1f}s")
        sql, missing = entries["sql"], entries["missing"]
        assert sql["download"]["source"] == f"hub:{ADAPTER}@main"
        assert sql["desiredReplicas"] == 2
        assert (missing["download"]["reason"], missing["replicas"]) == ("NotFound", 0)
        assert "source.hub" in missing["download"]["message"]
        assert (volume_dir / "adapters" / "sql@main" / "adapter_config.json").is_file()

        prm = product.get_model(kube, namespace, NAME)
        for url in product.engine_urls(prm).values():
            status, _, body = product.http("GET", url + "/v1/models", None, timeout=10)
            assert status == 200
            listed = {m["id"] for m in json.loads(body)["data"] if m.get("parent")}
            assert listed == {"sql"}, listed  # the missing adapter was never loaded
        router = product.router_url(kube, namespace, NAME)
        request = {"model": "sql", "prompt": "select a row", "max_tokens": 4}
        status, _, answer = product.http("POST", router + "/v1/completions", request, timeout=30)
        assert status == 200, answer

        condition = product.wait_until(
            lambda: (c := _adapters_loaded(kube, namespace)).get("reason") == "DownloadFailed" and c,
            30,
            0.5,
            what="AdaptersLoaded False DownloadFailed",
        )
        assert condition["status"] == "False"
        assert condition["message"] == "download failed: missing (NotFound)"
        say(f"AdaptersLoaded: {condition['status']} {condition['reason']}: {condition['message']}")
        assert product.condition(prm, "Ready")["status"] == "True"  # the base model serves all the same

        events = _events(kube, namespace)
        reasons = [reason for _, reason, _ in events]
        assert {"AdapterDownloading", "AdapterCached", "AdapterDownloadFailed", "AdapterLoaded"} <= set(reasons)
        assert "AdapterLoadFailed" not in reasons
        failed = [(kind, message) for kind, reason, message in events if reason == "AdapterDownloadFailed"]
        assert len(failed) == 1  # once per transition
        assert failed[0][0] == "Warning"
        assert failed[0][1].startswith("adapter missing: NotFound: no such repository")
        say(f"Warning AdapterDownloadFailed: {failed[0][1]}")

        kube.patch(product.prm_path(namespace, NAME), {"spec": {"adapters": _adapters("sql")}}, kind="merge")
        removed = time.monotonic()
        condition = product.wait_until(
            lambda: (c := _adapters_loaded(kube, namespace)).get("status") == "True" and c,
            60,
            0.5,
            what="AdaptersLoaded True",
        )
        assert condition["reason"] == "Loaded"
        assert list(_entries(kube, namespace)) == ["sql"]
        say(f"missing removed from the spec: AdaptersLoaded True after {time.monotonic() - removed:.1f}s")
