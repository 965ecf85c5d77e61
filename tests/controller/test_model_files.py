"""controller.model_files: spec.model folded into the engine spec a person would write."""

import pytest

from prefixroute.controller.builders.engine import engine_deployment, engine_pod_template
from prefixroute.controller.engines import make_adapter
from prefixroute.controller.errors import SpecError
from prefixroute.controller.model_files import (
    cached_folder,
    download_job_name,
    download_lock,
    engine_with_model,
    link_name,
    node_cache_path,
    resolved,
)
from prefixroute.controller.precise import precise_routing
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.model import parse_spec
from prefixroute.controller.spec.model_source import HubSource, parse_model_source
from prefixroute.controller.spec.routing import parse_routing
from tests.controller.builders.test_engine import REF
from tests.controller.schema import kubernetes_errors

CACHED = {"hub": {"id": "acme/tiny", "revision": "v1"}, "cache": {"size": "1Gi"}}


def _engine(kind: str, source: dict, **fields) -> EngineSpec:
    return engine_with_model("llama", EngineSpec(kind=kind, **fields), parse_model_source(source))


def test_without_spec_model_the_engine_is_as_written() -> None:
    engine = EngineSpec(kind="vllm", model="acme/tiny")
    assert engine_with_model("llama", engine, None) is engine


def test_a_cached_vllm_model_is_the_snapshot_folder_on_the_claim_read_only() -> None:
    engine = _engine("vllm", CACHED)
    assert engine.model == "/model-cache/models/acme--tiny@v1" == cached_folder(HubSource("acme/tiny", "v1"))
    assert engine.args[:2] == ("--served-model-name", "acme/tiny")  # clients still ask for the hub id
    assert engine.volumes == (
        {"name": "model-cache", "persistentVolumeClaim": {"claimName": "llama-model-cache", "readOnly": True}},
    )
    assert engine.volume_mounts == ({"name": "model-cache", "mountPath": "/model-cache", "readOnly": True},)
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in engine.env


def test_precise_routers_read_the_tokenizer_from_the_same_claim() -> None:
    precise = precise_routing(_engine("vllm", CACHED), parse_routing({}))
    assert precise is not None
    assert precise.tokenizer == "/model-cache/models/acme--tiny@v1"
    assert precise.served_model == "acme/tiny"
    assert precise.model_volume == {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": "llama-model-cache", "readOnly": True},
    }
    assert precise.model_mount == {"name": "model-cache", "mountPath": "/model-cache", "readOnly": True}
    assert not precise.from_hub


def test_engine_sim_serves_the_hub_id_and_tokenizes_with_the_cached_files() -> None:
    engine = _engine("sim", CACHED)
    assert engine.model == "acme/tiny"
    assert engine.args == ("--tokenizer", "/model-cache/models/acme--tiny@v1")
    precise = precise_routing(engine, parse_routing({}))
    assert precise is not None
    assert precise.tokenizer == "/model-cache/models/acme--tiny@v1"


def test_an_uncached_hub_model_is_fetched_by_the_engine_at_its_revision() -> None:
    engine = _engine("vllm", {"hub": {"id": "acme/tiny", "revision": "v1"}})
    assert (engine.model, engine.args, engine.volumes) == ("acme/tiny", ("--revision", "v1"), ())
    assert _engine("sglang", {"hub": {"id": "acme/tiny"}}).args == ()


def test_a_claim_is_mounted_read_only_and_its_path_is_the_model() -> None:
    engine = _engine(
        "vllm", {"persistentVolumeClaim": {"claimName": "weights", "path": "llama"}, "servedName": "llama"}
    )
    assert engine.model == "/model-source/llama"
    assert engine.args == ("--served-model-name", "llama")
    assert engine.volumes[0]["persistentVolumeClaim"] == {"claimName": "weights", "readOnly": True}
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} not in engine.env


def test_an_image_volume_holds_the_model_and_precise_routers_mount_it_too() -> None:
    source = {"image": {"reference": "registry.example/m/llama:v1", "pullPolicy": "IfNotPresent", "path": "model"}}
    engine = _engine("vllm", source)
    assert engine.model == "/model-source/model"
    assert engine.volumes == (
        {"name": "model-source", "image": {"reference": "registry.example/m/llama:v1", "pullPolicy": "IfNotPresent"}},
    )
    assert engine.volume_mounts == ({"name": "model-source", "mountPath": "/model-source", "readOnly": True},)
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} not in engine.env
    precise = precise_routing(engine, parse_routing({}))
    assert precise is not None
    assert precise.tokenizer == "/model-source/model"
    assert precise.model_volume == engine.volumes[0]
    sim = _engine("sim", {"image": {"reference": "r/m:v1"}, "servedName": "m"})
    assert (sim.model, sim.args) == ("m", ("--tokenizer", "/model-source"))
    assert sim.volumes == ({"name": "model-source", "image": {"reference": "r/m:v1"}},)


def test_a_folder_is_the_model_argument_as_before() -> None:
    engine = _engine("vllm", {"folder": {"path": "/models/x"}})
    assert (engine.model, engine.args, engine.volumes) == ("/models/x", (), ())


@pytest.mark.parametrize(
    ("kind", "fields", "words"),
    [
        ("vllm", {"model": "acme/other"}, "spec.engine.model must be empty"),
        ("custom", {"image": "x"}, "a custom engine takes its model"),
        ("vllm", {"args": ("--served-model-name=x",)}, "must not set --served-model-name"),
        ("sim", {"args": ("--tokenizer", "byte")}, "must not set --tokenizer"),
        ("vllm", {"volumes": ({"name": "model-cache", "emptyDir": {}},)}, "must not name a volume 'model-cache'"),
    ],
)
def test_clashes_with_what_spec_model_sets_are_refused(kind: str, fields: dict, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        _engine(kind, CACHED, **fields)


def test_names_fit_kubernetes_limits_and_revisions_with_slashes() -> None:
    assert len(download_job_name("m" * 50, "abcdef0123")) <= 63
    assert link_name(HubSource("acme/tiny", "refs/pr/1")) == "acme--tiny@refs--pr--1"
    assert link_name(HubSource("acme/tiny")) == "acme--tiny@main"


def test_resolved_keeps_spec_model_and_replaces_the_engine() -> None:
    spec = parse_spec({"engine": {"kind": "vllm"}, "model": CACHED})
    out = resolved("llama", spec)
    assert out.model == spec.model
    assert out.engine.model == "/model-cache/models/acme--tiny@v1"
    plain = parse_spec({"engine": {"kind": "sim", "model": "m"}})
    assert resolved("llama", plain) is plain


def test_an_engine_deployment_on_an_image_volume_is_a_valid_kubernetes_object() -> None:
    engine = _engine("vllm", {"image": {"reference": "registry.example/m/llama:v1", "pullPolicy": "Always"}})
    template, _ = engine_pod_template(REF, engine, make_adapter(engine.kind).render(engine))
    assert kubernetes_errors(engine_deployment(REF, template, 1, engine.rollout)) == []


def test_adapters_are_loaded_from_the_cache_link_or_their_folder() -> None:
    from prefixroute.controller.model_files import adapter_path
    from prefixroute.controller.spec.adapters import AdapterSpec
    from prefixroute.controller.spec.model_source import FolderSource

    assert (
        adapter_path(AdapterSpec("sql", HubSource("acme/sql", "release/2"))) == "/model-cache/adapters/sql@release--2"
    )
    assert adapter_path(AdapterSpec("sql", HubSource("acme/sql"))) == "/model-cache/adapters/sql@main"
    assert adapter_path(AdapterSpec("chat", FolderSource("/adapters/chat"))) == "/adapters/chat"


@pytest.mark.parametrize(
    ("args", "served"),
    [((), "/m"), (("--served-model-name", "tiny"), "tiny"), (("--served-model-name=tiny",), "tiny")],
)
def test_the_served_name_is_vllms_first_served_name_else_the_model(args: tuple, served: str) -> None:
    from prefixroute.controller.model_files import served_name

    assert served_name(EngineSpec(kind="vllm", model="/m", args=args)) == served


def test_an_adapter_named_as_the_served_model_is_refused_after_spec_model_is_folded_in() -> None:
    lora = {"lora": {}}
    adapters = [{"name": "tiny", "source": {"folder": {"path": "/a"}}}]
    model = {"hub": {"id": "acme/tiny"}, "servedName": "tiny"}
    spec = parse_spec({"engine": {"kind": "vllm", **lora}, "model": model, "adapters": adapters})
    with pytest.raises(SpecError, match="served model's name"):
        resolved("m", spec)
    fine = parse_spec({"engine": {"kind": "vllm", **lora}, "model": {"hub": {"id": "acme/tiny"}}, "adapters": []})
    assert resolved("m", fine).adapters == ()


PER_NODE = {"hub": {"id": "acme/tiny", "revision": "v1"}, "cache": {"perNode": {"hostPath": "/mnt/models"}}}


def test_a_per_node_cache_is_the_nodes_folder_of_the_namespace_read_only_offline() -> None:
    engine = engine_with_model("llama", EngineSpec(kind="vllm"), parse_model_source(PER_NODE), "serving")
    assert engine.model == "/model-cache/models/acme--tiny@v1"
    assert engine.volumes == (
        {"name": "model-cache", "hostPath": {"path": "/mnt/models/serving", "type": "DirectoryOrCreate"}},
    )
    assert engine.volume_mounts == ({"name": "model-cache", "mountPath": "/model-cache", "readOnly": True},)
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in engine.env
    assert node_cache_path("/mnt/models/", "other") == "/mnt/models/other"
    assert download_lock(HubSource("acme/tiny", "v1")) == "/model-cache/models/.acme--tiny@v1.lock"


def test_hub_adapters_need_the_claim_not_a_per_node_cache() -> None:
    spec = parse_spec(
        {
            "model": PER_NODE,
            "engine": {"kind": "vllm", "lora": {}},
            "adapters": [{"name": "sql", "source": {"hub": {"id": "acme/sql"}}}],
        }
    )
    with pytest.raises(SpecError, match="a cache that is not perNode"):
        resolved("m", spec, "serving")
