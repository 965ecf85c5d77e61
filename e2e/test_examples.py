"""Every manifest under manifests/examples/ is applied by the suite, so examples never rot:
all of them pass a server-side dry run, and each is applied for real — engine-sim ones
serve (engine-sim-demo.yaml in test_install.py), and the vLLM ones schedule onto KWOK's
GPU nodes (their engine pods only show Running there; the routers are real).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import ApiError, Kube

EXAMPLES = sorted(product.EXAMPLES.glob("*.yaml"))
COVERED = {  # example -> where it is applied for real
    "api-keys.yaml": "test_front_door.py::test_api_keys_from_a_secret_decide_the_tenant_and_rotate_under_load",
    "engine-sim-demo.yaml": "test_install.py::test_engine_sim_example_serves",
    "hpa.yaml": "test_hpa.py::test_an_hpa_scales_the_model_through_its_scale_subresource_from_custom_metrics",
    "multi-tenant.yaml": "test_multi_tenant_example_isolates_tenants",
    "vllm-llama-3.1-8b.yaml": "test_gpu_examples_schedule_onto_gpu_nodes",
    "vllm-llama-3.1-70b-tp8.yaml": "test_gpu_examples_schedule_onto_gpu_nodes",
}
GPU_EXAMPLES = ("vllm-llama-3.1-8b.yaml", "vllm-llama-3.1-70b-tp8.yaml")


def test_every_example_is_applied_by_a_test() -> None:
    assert sorted(p.name for p in EXAMPLES) == sorted(COVERED), "a new example needs a test that applies it"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_passes_server_side_dry_run(
    cluster: Cluster, namespace: str, operator: dict[str, Any], example: Path
) -> None:
    out = cluster.kubectl("apply", "--server-side", "--dry-run=server", "-n", namespace, "-f", str(example))
    kinds = [d["kind"] for d in yaml.safe_load_all(example.read_text()) if d]
    assert out.stdout.count("serverside-applied (server dry run)") == len(kinds), out.stdout
    assert "PrefixRoutedModel" in kinds


def _models(example: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(example.read_text()) if d and d["kind"] == "PrefixRoutedModel"]


def test_multi_tenant_example_isolates_tenants(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    (doc,) = _models(product.EXAMPLES / "multi-tenant.yaml")
    name, replicas = doc["metadata"]["name"], doc["spec"]["replicas"]
    cluster.kubectl("apply", "-n", namespace, "-f", str(product.EXAMPLES / "multi-tenant.yaml"))
    product.wait_serving(kube, namespace, name, replicas)
    product.wait_until(
        lambda: (
            sum(product.pod_ready(p) for p in product.pods(kube, namespace, name, "router"))
            == doc["spec"]["router"]["replicas"]
        ),
        60,
        what="both router pods Ready",
    )
    router = product.router_url(kube, namespace, name)
    prompt = "You are the shared assistant. " + "policy " * 300

    def cached(tenant: str) -> tuple[int, str]:
        status, headers, body = product.http(
            "POST",
            router + "/v1/completions",
            {"model": doc["spec"]["engine"]["model"], "prompt": prompt, "max_tokens": 2},
            headers={"X-Tenant": tenant},
        )
        assert status == 200, body
        return json.loads(body)["usage"]["prompt_tokens_details"]["cached_tokens"], headers["X-Prefixroute-Member"]

    first_a, member_a = cached("acme")
    again_a, member_a2 = cached("acme")
    first_b, member_b = cached("globex")
    again_b, _ = cached("globex")
    say(
        f"multi-tenant example: acme cached {first_a} then {again_a} tokens on {member_a}; "
        f"globex, same prompt, cached {first_b} then {again_b} on {member_b}"
    )
    assert first_a == 0
    assert again_a > 0
    assert member_a2 == member_a  # a tenant's own prefix is cached and kept warm
    assert first_b == 0
    assert again_b > 0  # another tenant never reads it, yet has its own


def _free_gpus(kube: Kube) -> int:
    nodes = [n for n in kube.get("/api/v1/nodes")["items"] if n["metadata"]["name"].startswith("kwok-gpu-")]
    used = sum(
        int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
        for p in kube.get("/api/v1/pods")["items"]
        if p["spec"].get("nodeName", "").startswith("kwok-gpu-")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
        for c in p["spec"]["containers"]
    )
    return sum(int(n["status"]["allocatable"]["nvidia.com/gpu"]) for n in nodes) - used


def test_gpu_examples_schedule_onto_gpu_nodes(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any], say: Callable[[str], None]
) -> None:
    docs = [d for e in GPU_EXAMPLES for d in _models(product.EXAMPLES / e)]
    needed = sum(
        d["spec"]["replicas"] * int(d["spec"]["engine"]["resources"]["limits"]["nvidia.com/gpu"]) for d in docs
    )
    product.wait_until(lambda: _free_gpus(kube) >= needed, 60, 0.5, what=f"{needed} free GPUs")
    # What the examples' comments ask users to create first: the Hugging Face token Secrets,
    # and (no storage provisioner here) a volume for the 70B model cache claim to bind.
    cluster.kubectl("create", "secret", "generic", "hf-token", "-n", namespace, "--from-literal=token=hf_e2e")
    cluster.kubectl("create", "secret", "generic", "hf-token-env", "-n", namespace, "--from-literal=HF_TOKEN=hf_e2e")
    pv = f"{namespace}-model-cache"
    kube.post(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": pv},
            "spec": {
                "capacity": {"storage": "300Gi"},
                "accessModes": ["ReadWriteMany"],
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": f"/tmp/{pv}"},
                "claimRef": {"namespace": namespace, "name": "llama-70b-model-cache"},
            },
        },
    )
    try:
        for example in GPU_EXAMPLES:
            cluster.kubectl("apply", "-n", namespace, "-f", str(product.EXAMPLES / example))
        for doc in docs:
            name, replicas = doc["metadata"]["name"], doc["spec"]["replicas"]
            prm = product.wait_serving(kube, namespace, name, replicas, timeout=180)
            gpus = doc["spec"]["engine"]["resources"]["limits"]["nvidia.com/gpu"]
            engines = product.pods(kube, namespace, name, "engine")
            for pod in engines:
                assert pod["spec"]["nodeName"].startswith("kwok-gpu-"), pod["spec"]["nodeName"]
                container = pod["spec"]["containers"][0]
                assert container["image"].startswith("vllm/vllm-openai:")
                assert container["resources"]["limits"]["nvidia.com/gpu"] == str(gpus)
                assert pod["status"]["phase"] == "Running"
            if gpus == 8:  # a whole node each
                assert len({p["spec"]["nodeName"] for p in engines}) == replicas
            assert {m["pod"] for m in product.ring_members(prm)} == {p["metadata"]["name"] for p in engines}
            routers = product.live(product.pods(kube, namespace, name, "router"))
            assert len(routers) == doc["spec"].get("router", {}).get("replicas", 2)  # the CRD default: 2
            assert all(p["spec"]["nodeName"].startswith("kwok-cpu-") for p in routers)  # no toleration, no GPU
            say(
                f"{name}: {replicas} engine pods on {sorted(p['spec']['nodeName'] for p in engines)}, "
                f"{gpus} GPU(s) each, in the ring; {len(routers)} routers"
            )
        claim = kube.get(f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/llama-70b-model-cache")
        assert claim["status"]["phase"] == "Bound"
    finally:
        for doc in docs:  # free the GPU nodes now rather than when the namespace goes
            try:
                kube.delete(product.prm_path(namespace, doc["metadata"]["name"]))
            except ApiError:
                pass
        try:
            kube.delete(f"/api/v1/persistentvolumes/{pv}")
        except ApiError:
            pass
