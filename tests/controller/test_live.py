"""The operator against a real API server, when one is given (skipped otherwise).

    python -m e2e.cluster up
    python -m e2e.cluster exec -- env PREFIXROUTE_LIVE_KUBECONFIG=$KUBECONFIG \\
        .venv/bin/python -m pytest tests/controller/test_live.py

kopf runs in a thread, programmatically (what kopf.testing.KopfRunner does, but with our
own registry), watching one fresh namespace. The e2e suite (e2e/) is the full proof; this
is the operator's own check that its handlers work unchanged against the real thing.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

KUBECONFIG = os.environ.get("PREFIXROUTE_LIVE_KUBECONFIG")
pytestmark = pytest.mark.skipif(
    not KUBECONFIG, reason="set PREFIXROUTE_LIVE_KUBECONFIG to run against a real API server"
)


def wait(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except Exception as exc:  # not there yet
            last = exc
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}: {last!r}")


@pytest.fixture(scope="module")
def api() -> Any:
    import yaml
    from kubernetes import client, config

    from tests.controller.schema import CRD_PATH

    config.load_kube_config(KUBECONFIG)
    extensions = client.ApiextensionsV1Api()
    crd = yaml.safe_load(CRD_PATH.read_text())
    extensions.patch_custom_resource_definition(
        crd["metadata"]["name"],
        crd,
        field_manager="prefixroute-tests",
        force=True,
        _content_type="application/apply-patch+yaml",
    )
    wait(
        "the CRD to be established",
        lambda: any(
            c.type == "Established" and c.status == "True"
            for c in extensions.read_custom_resource_definition(crd["metadata"]["name"]).status.conditions or []
        ),
    )
    return client


@pytest.fixture(scope="module")
def namespace(api: Any) -> Iterator[str]:
    name = f"prm-live-{uuid.uuid4().hex[:6]}"
    api.CoreV1Api().create_namespace({"metadata": {"name": name}})
    yield name
    api.CoreV1Api().delete_namespace(name)


@pytest.fixture(scope="module")
def operator(api: Any, namespace: str) -> Iterator[None]:
    import kopf

    from prefixroute.controller.edge import kube_edge
    from prefixroute.controller.handlers import build_registry, post_event
    from prefixroute.controller.reconcile import Controller

    os.environ["KUBECONFIG"] = KUBECONFIG or ""
    stop, ready = threading.Event(), threading.Event()
    registry = build_registry(lambda: Controller(edge=kube_edge(), events=post_event))
    thread = threading.Thread(
        target=kopf.run,
        kwargs=dict(
            registry=registry,
            standalone=True,
            namespaces=[namespace],
            clusterwide=False,
            stop_flag=stop,
            ready_flag=ready,
        ),
        daemon=True,
    )
    thread.start()
    assert ready.wait(30), "kopf did not start"
    yield
    stop.set()
    thread.join(30)


def model(api: Any, namespace: str, name: str) -> dict[str, Any]:
    result: dict[str, Any] = api.CustomObjectsApi().get_namespaced_custom_object(
        "prefixroute.io", "v1alpha1", namespace, "prefixroutedmodels", name
    )
    return result


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def test_children_status_and_degraded_on_a_real_api_server(api: Any, namespace: str, operator: None) -> None:
    objects = api.CustomObjectsApi()
    body = {
        "apiVersion": "prefixroute.io/v1alpha1",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": "live"},
        "spec": {"replicas": 2, "engine": {"kind": "sim", "model": "live-llm"}, "router": {"replicas": 1}},
    }
    objects.create_namespaced_custom_object("prefixroute.io", "v1alpha1", namespace, "prefixroutedmodels", body)
    apps = api.AppsV1Api()
    wait(
        "the engine and router Deployments",
        lambda: (
            apps.read_namespaced_deployment("live-engine", namespace)
            and apps.read_namespaced_deployment("live-router", namespace)
        ),
    )
    stored = wait(
        "observedGeneration",
        lambda: (m := model(api, namespace, "live")).get("status", {}).get("observedGeneration") == 1 and m,
    )
    assert condition(stored, "Degraded")["status"] == "False"
    assert stored["status"]["selector"].startswith("app.kubernetes.io/component=engine")
    assert not stored["metadata"].get("finalizers")
    assert not stored["metadata"].get("annotations")
    assert stored["spec"]["routing"]["strategy"] == "prefix-cache"  # the schema's default, not the operator's

    objects.patch_namespaced_custom_object(
        "prefixroute.io", "v1alpha1", namespace, "prefixroutedmodels", "live", {"spec": {"engine": {"kind": "custom"}}}
    )
    degraded = wait(
        "Degraded=True",
        lambda: (
            condition(model(api, namespace, "live"), "Degraded").get("status") == "True"
            and condition(model(api, namespace, "live"), "Degraded")
        ),
    )
    assert degraded["reason"] == "InvalidSpec"
    assert "image is required" in degraded["message"]
    engine = apps.read_namespaced_deployment("live-engine", namespace)
    assert engine.spec.template.spec.containers[0].args[0] == "engine-sim"  # the previous children stand


def test_the_ring_follows_ready_pods_when_pods_run(api: Any, namespace: str, operator: None) -> None:
    """Needs pods that become Ready (KWOK with the e2e pod runner, or a real cluster with the image)."""
    objects = api.CustomObjectsApi()
    body = {
        "apiVersion": "prefixroute.io/v1alpha1",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": "ring"},
        "spec": {"replicas": 2, "engine": {"kind": "sim", "model": "ring-llm"}, "router": {"replicas": 1}},
    }
    objects.create_namespaced_custom_object("prefixroute.io", "v1alpha1", namespace, "prefixroutedmodels", body)
    try:
        stored = wait(
            "two ring members",
            lambda: (
                len(((m := model(api, namespace, "ring")).get("status") or {}).get("ring", {}).get("members", [])) == 2
                and m
            ),
            90,
        )
    except AssertionError:
        pytest.skip("engine pods never became ready here (no pod runner)")
    assert stored["status"]["readyText"] == "2/2"
    victim = stored["status"]["ring"]["members"][0]["pod"]
    api.CoreV1Api().delete_namespaced_pod(victim, namespace)
    wait(
        "the deleted pod to leave the ring",
        lambda: victim not in [m["pod"] for m in model(api, namespace, "ring")["status"]["ring"]["members"]],
        10,
    )
