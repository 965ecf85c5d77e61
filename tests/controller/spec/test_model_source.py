"""spec.model: one source, a cache for hub models only, and when engines may start."""

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.model_source import (
    CacheSpec,
    ClaimSource,
    FolderSource,
    HubSource,
    ImageSource,
    ModelSource,
    NodeCache,
    cache_ready,
    parse_model_source,
)

HUB = {"hub": {"id": "acme/tiny", "revision": "v1"}}


def test_absent_is_none_and_each_source_reads_as_its_kind() -> None:
    assert parse_model_source(None) is None
    assert parse_model_source(HUB) == ModelSource(HubSource("acme/tiny", "v1"))
    claim = parse_model_source({"persistentVolumeClaim": {"claimName": "w", "path": "/llama/8b/"}})
    assert claim == ModelSource(ClaimSource("w", "llama/8b"))
    assert parse_model_source({"folder": {"path": "/models//x"}, "servedName": "x"}) == ModelSource(
        FolderSource("/models/x"), "x"
    )
    image = parse_model_source({"image": {"reference": "registry.example/m/llama:v1", "path": "weights/"}})
    assert image == ModelSource(ImageSource("registry.example/m/llama:v1", None, "weights"))
    assert image.source.identity == "image:registry.example/m/llama:v1/weights"


def test_a_cache_takes_its_defaults() -> None:
    model = parse_model_source({**HUB, "cache": {"size": "2Gi"}})
    assert model is not None
    assert model.cache == CacheSpec("2Gi", None, "ReadWriteMany", "Keep")
    assert model.cached


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({}, "exactly one source"),
        ({**HUB, "folder": {"path": "/m"}}, "exactly one source"),
        ({"hub": {"id": "gpt2"}}, "spec.model.hub.id must be a hub repository id"),
        ({"persistentVolumeClaim": {"path": "x"}}, "claimName is required"),
        ({"persistentVolumeClaim": {"claimName": "w", "path": "a/../../b"}}, "without '..'"),
        ({"folder": {"path": "models/x"}}, "must be an absolute path"),
        ({"image": {"path": "x"}}, "spec.model.image.reference is required"),
        ({"image": {"reference": "a b"}}, "spec.model.image.reference is required"),
        ({"image": {"reference": "r/m:v1", "pullPolicy": "Sometimes"}}, "pullPolicy must be one of Always"),
        ({"image": {"reference": "r/m:v1", "path": "../x"}}, "inside the image, without '..'"),
        ({"image": {"reference": "r/m:v1"}, "cache": {"size": "1Gi"}}, "a claim, an image or a folder"),
        ({"folder": {"path": "/m"}, "cache": {"size": "1Gi"}}, "cache is for hub models"),
        ({**HUB, "cache": {}}, "size is required"),
        ({**HUB, "cache": {"size": "1Gi", "accessMode": "ReadOnlyMany"}}, "accessMode must be one of"),
        ({**HUB, "cache": {"size": "1Gi", "onDelete": "Orphan"}}, "Keep or Delete"),
        ({**HUB, "cache": {"perNode": {}, "size": "1Gi"}}, "makes no claim: leave out size"),
        ({**HUB, "cache": {"perNode": {}, "storageClassName": "nfs"}}, "leave out storageClassName"),
        ({**HUB, "cache": {"perNode": {}, "accessMode": "ReadWriteOnce"}}, "leave out accessMode"),
        ({**HUB, "cache": {"perNode": {}, "onDelete": "Delete"}}, "cannot remove files from the nodes' disks"),
        ({**HUB, "cache": {"perNode": {"hostPath": "models"}}}, "hostPath must be an absolute path"),
        ({**HUB, "cache": {"perNode": {"hostPath": "/a/../b"}}}, "hostPath must be an absolute path"),
        ({**HUB, "cache": {"perNode": {"hostPath": "/"}}}, "hostPath must be an absolute path below /"),
    ],
)
def test_refusals_name_the_field(data: dict, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_model_source(data)


def test_engines_wait_for_this_very_source_in_the_cache() -> None:
    cached = parse_model_source({**HUB, "cache": {"size": "1Gi"}})
    identity = HubSource("acme/tiny", "v1").identity
    assert cache_ready(None, None)
    assert cache_ready(parse_model_source(HUB), None)  # no cache: nothing to wait for
    assert not cache_ready(cached, None)
    assert not cache_ready(cached, {"modelCache": {"phase": "Downloading", "source": identity}})
    assert not cache_ready(cached, {"modelCache": {"phase": "Ready", "source": "hub:acme/tiny@v0"}})
    assert cache_ready(cached, {"modelCache": {"phase": "Ready", "source": identity}})


def test_a_per_node_cache_has_no_claim_and_never_holds_the_engines() -> None:
    model = parse_model_source({**HUB, "cache": {"perNode": {}}})
    assert model is not None
    assert model.cache == CacheSpec(None, per_node=NodeCache("/var/lib/prefixroute/model-cache"))
    assert model.cached
    assert model.per_node
    # the API server's defaults (accessMode, onDelete) are what a claim would get: accepted
    defaulted = {"perNode": {"hostPath": "/mnt/nvme/"}, "accessMode": "ReadWriteMany", "onDelete": "Keep"}
    again = parse_model_source({**HUB, "cache": defaulted})
    assert again is not None
    assert again.cache is not None
    assert again.cache.per_node == NodeCache("/mnt/nvme")
    assert cache_ready(model, None)  # each engine pod downloads on its node before its engine starts
    claim = parse_model_source({**HUB, "cache": {"size": "1Gi"}})
    assert claim is not None
    assert not claim.per_node
    identity = HubSource("acme/tiny", "v1").identity
    per_node_ready = {"modelCache": {"phase": "Ready", "source": identity, "nodes": 2, "nodesReady": 2}}
    assert not cache_ready(claim, per_node_ready)  # the nodes' copies say nothing of the claim
