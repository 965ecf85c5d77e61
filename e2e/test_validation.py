"""The API server itself rejects invalid PrefixRoutedModels, with the CRD's schema and CEL
messages, on create and on update; nothing reaches the operator."""

from __future__ import annotations

from typing import Any

import pytest

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import ApiError, Kube


def _valid(name: str = "valid") -> dict[str, Any]:
    return product.sim_model(name, replicas=1)


def _with(path: str, value: Any, name: str = "invalid") -> dict[str, Any]:
    doc = _valid(name)
    *parents, leaf = path.split(".")
    node = doc
    for key in parents:
        node = node.setdefault(key, {})
    if value is _DELETE:
        node.pop(leaf)
    else:
        node[leaf] = value
    return doc


_DELETE = object()

CASES = [
    # (id, path, value, text the API server's message must hold)
    (
        "autoscaling-min-above-max",
        "spec.autoscaling",
        {"minReplicas": 5, "maxReplicas": 2},
        "autoscaling.minReplicas must be less than or equal to autoscaling.maxReplicas",
    ),
    (
        "unknown-strategy",
        "spec.routing.strategy",
        "random",
        'spec.routing.strategy: Unsupported value: "random": supported values: "prefix-cache", "prefix-hash", '
        '"least-load", "round-robin"',
    ),
    (
        "negative-block-size",
        "spec.routing.blockSize",
        -256,
        "spec.routing.blockSize: Invalid value: -256: spec.routing.blockSize in body should be greater than or equal to 1",
    ),
    (
        "load-factor-below-1",
        "spec.routing.loadFactor",
        0.5,
        "routing.loadFactor must be at least 1.0: a replica may take up to loadFactor times the mean load",
    ),
    (
        "isolation-without-tenant-header",
        "spec.routing.isolateTenants",
        True,
        "routing.isolateTenants needs routing.tenantHeader or auth.apiKeysSecret: something must name the tenant",
    ),
    (
        "negative-replicas",
        "spec.replicas",
        -1,
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
    ),
    (
        "too-many-replicas",
        "spec.replicas",
        513,
        "spec.replicas: Invalid value: 513: spec.replicas in body should be less than or equal to 512",
    ),
    (
        "no-router",
        "spec.router",
        {"replicas": 0},
        "spec.router.replicas: Invalid value: 0: spec.router.replicas in body should be greater than or equal to 1",
    ),
    (
        "unknown-engine-kind",
        "spec.engine.kind",
        "tgi",
        'spec.engine.kind: Unsupported value: "tgi": supported values: "vllm", "sglang", "sim", "custom"',
    ),
    (
        "sim-without-model",
        "spec.engine.model",
        _DELETE,
        "engine.model is required for engine kinds vllm, sglang and sim",
    ),
    (
        "command-outside-custom",
        "spec.engine.command",
        ["python3", "-m", "server"],
        "engine.command is only used with engine kind custom; the other kinds take extra flags in engine.args",
    ),
    (
        "node-port-on-cluster-ip",
        "spec.router",
        {"nodePort": 30080},
        "router.nodePort needs router.serviceType NodePort or LoadBalancer",
    ),
    (
        "engine-port-zero",
        "spec.engine.port",
        0,
        "spec.engine.port: Invalid value: 0: spec.engine.port in body should be greater than or equal to 1",
    ),
    ("no-spec", "spec", _DELETE, "spec: Required value"),
]


@pytest.mark.parametrize(("path", "value", "message"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_resource_is_rejected_with_its_message(
    kube: Kube, namespace: str, operator: dict[str, Any], path: str, value: Any, message: str
) -> None:
    with pytest.raises(ApiError) as rejected:
        product.create_model(kube, namespace, _with(path, value))
    assert rejected.value.status == 422, rejected.value.message
    assert message in rejected.value.message
    assert product.absent(kube, product.prm_path(namespace, "invalid"))


@pytest.mark.parametrize(
    ("name", "message"),
    [
        (
            "1st-model",
            "metadata.name must start with a letter and hold only lowercase letters, digits and '-': it names Services",
        ),
        ("m" * 51, "metadata.name must be at most 50 characters, so child names such as NAME-router fit"),
    ],
    ids=["digit-first", "51-characters"],
)
def test_names_that_cannot_name_services_are_rejected(
    kube: Kube, namespace: str, operator: dict[str, Any], name: str, message: str
) -> None:
    with pytest.raises(ApiError) as rejected:
        product.create_model(kube, namespace, _valid(name))
    assert rejected.value.status == 422
    assert message in rejected.value.message


def test_kubectl_shows_every_violation_and_an_update_is_checked_too(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    import yaml

    schema = _valid("schema")
    schema["spec"]["routing"].update(strategy="random", blockSize=-1, loadFactor=0.5)
    cel = _valid("cel")
    cel["spec"]["routing"]["loadFactor"] = 0.5
    cel["spec"]["autoscaling"] = {"minReplicas": 3, "maxReplicas": 1}
    out = cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump_all([schema, cel]), check=False)
    assert out.returncode != 0
    # Every violation of an object is listed; CEL rules run once the schema's own checks pass.
    for text in (
        '"schema" is invalid',
        'spec.routing.strategy: Unsupported value: "random"',
        "spec.routing.blockSize: Invalid value: -1",
        "some validation rules were not checked because the object was invalid",
        '"cel" is invalid',
        "routing.loadFactor must be at least 1.0",
        "autoscaling.minReplicas must be less than or equal to autoscaling.maxReplicas",
    ):
        assert text in out.stderr, out.stderr
    assert kube.get(product.prm_path(namespace))["items"] == []

    good = product.create_model(kube, namespace, _valid("good"))
    # Defaults come from the schema, filled in by the API server.
    assert {
        "strategy": "prefix-cache",
        "blockSize": 256,
        "prefixBlocks": 4,
        "loadFactor": 1.25,
        "virtualNodes": 256,
        "isolateTenants": False,
    }.items() <= good["spec"]["routing"].items()
    assert good["spec"]["router"]["port"] == 80
    assert good["spec"]["engine"]["port"] == 8000
    with pytest.raises(ApiError) as rejected:
        kube.patch(product.prm_path(namespace, "good"), {"spec": {"routing": {"loadFactor": 0.9}}}, kind="merge")
    assert rejected.value.status == 422
    assert "routing.loadFactor must be at least 1.0" in rejected.value.message
    with pytest.raises(ApiError) as scaled:
        kube.patch(product.prm_path(namespace, "good") + "/scale", {"spec": {"replicas": -2}}, kind="merge")
    assert scaled.value.status == 422
    assert product.get_model(kube, namespace, "good")["metadata"]["generation"] == 1  # nothing got through
