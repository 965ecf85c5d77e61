"""spec.routing.mode: precise where the engine publishes KV events the router can read, and what it adds."""

import json
from typing import Any

import pytest

from prefixroute.cli import build_parser
from prefixroute.controller.errors import SpecError
from prefixroute.controller.plan import plan_for
from prefixroute.controller.precise import KV_EVENTS_PORT, KV_REPLAY_PORT
from prefixroute.crd import POOL_KIND
from prefixroute.epp.cli import settings_from_args as epp_settings
from prefixroute.router.cli import settings_from_args
from tests.controller.helpers import model_body
from tests.controller.schema import kubernetes_errors

MODEL_DIR = "/models/llama-8b"
VOLUME = {"name": "models", "persistentVolumeClaim": {"claimName": "model-cache", "readOnly": True}}


def vllm_on_a_volume(**more: Any) -> dict[str, Any]:
    engine = {
        "kind": "vllm",
        "model": MODEL_DIR,
        "volumes": [VOLUME],
        "volumeMounts": [{"name": "models", "mountPath": "/models"}],
        **more,
    }
    return {"engine": engine}


def containers(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The engine's, the router's (and the gateway picker's) pod spec, by component."""
    plan = plan_for(model_body(spec))
    for obj in plan.objects:
        if (
            obj["kind"] != POOL_KIND
        ):  # GIE's, not Kubernetes': no schema here (tests/controller/builders/test_gateway.py)
            assert kubernetes_errors(obj) == [], obj["kind"]
    out = {}
    for obj in plan.objects:
        if obj["kind"] == "Deployment":
            component = obj["metadata"]["labels"]["app.kubernetes.io/component"]
            out[component] = obj["spec"]["template"]["spec"]
    return out


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def test_a_sim_engine_publishes_its_events_and_the_router_follows_them_by_default() -> None:
    pods = containers({"engine": {"kind": "sim", "model": "tiny"}})
    engine, router = pods["engine"]["containers"][0], pods["router"]["containers"][0]
    config = json.loads(arg(engine["args"], "--kv-events-config"))
    assert config == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
        "replay_endpoint": f"tcp://*:{KV_REPLAY_PORT}",
        "topic": "kv@$(POD_NAME)",  # the kubelet names the pod
    }
    assert arg(engine["args"], "--block-tokens") == "16"
    assert {(p["name"], p["containerPort"]) for p in engine["ports"]} >= {
        ("kv-events", KV_EVENTS_PORT),
        ("kv-replay", KV_REPLAY_PORT),
    }
    # the router's own parser reads what the operator rendered
    settings = settings_from_args(build_parser(only="router").parse_args(router["args"]))
    assert settings.precise.mode == "precise"
    assert settings.precise.tokenizer == "engine-sim"
    assert settings.precise.served_model == "tiny"
    assert settings.routing.block_size == 16
    assert (settings.precise.kv_events_port, settings.precise.kv_events_replay_port) == (KV_EVENTS_PORT, KV_REPLAY_PORT)


def test_the_engines_own_block_size_is_the_routers() -> None:
    pods = containers({"engine": {"kind": "sim", "model": "tiny", "args": ["--block-tokens=32"]}})
    assert pods["engine"]["containers"][0]["args"].count("--block-tokens") == 0  # the user's stays alone
    assert arg(pods["router"]["containers"][0]["args"], "--block-size") == "32"


def test_vllm_with_the_model_on_a_volume_is_precise_and_the_router_mounts_the_folder_read_only() -> None:
    pods = containers(vllm_on_a_volume(args=["--served-model-name", "llama"]))
    engine, router = pods["engine"]["containers"][0], pods["router"]["containers"][0]
    assert arg(engine["args"], "--block-size") == "16"
    assert "--kv-events-config" in engine["args"]
    assert arg(router["args"], "--tokenizer") == MODEL_DIR
    assert arg(router["args"], "--served-model") == "llama"
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in router["volumeMounts"]
    assert VOLUME in pods["router"]["volumes"]


def test_a_sim_engine_with_a_model_folder_tokenizer_shares_it_with_the_routers() -> None:
    engine_spec = {
        "kind": "sim",
        "model": "tiny",
        "args": ["--tokenizer", "/models/bpe/"],
        "volumes": [VOLUME],
        "volumeMounts": [{"name": "models", "mountPath": "/models"}],
    }
    pods = containers({"engine": engine_spec})
    engine, router = pods["engine"]["containers"][0], pods["router"]["containers"][0]
    assert arg(engine["args"], "--tokenizer") == "/models/bpe/"  # the user's flag, left as written
    settings = settings_from_args(build_parser(only="router").parse_args(router["args"]))
    assert settings.precise.tokenizer == "/models/bpe"
    assert settings.precise.served_model == "tiny"
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in router["volumeMounts"]
    assert VOLUME in pods["router"]["volumes"]
    for own in ("engine-sim", "byte"):  # engine-sim's byte tokenizer, by either name: nothing to mount
        pods = containers({"engine": {"kind": "sim", "model": "tiny", "args": ["--tokenizer", own]}})
        assert arg(pods["router"]["containers"][0]["args"], "--tokenizer") == "engine-sim"
        assert VOLUME not in pods["router"].get("volumes", [])


@pytest.mark.parametrize(
    "spec",
    [
        {"engine": {"kind": "vllm", "model": "llama-8b"}},  # neither a hub id nor a folder: no tokenizer
        {"engine": {"kind": "sglang", "model": "m"}},
        {"engine": {"kind": "custom", "image": "x"}},
        {"engine": {"kind": "sim", "model": "tiny"}, "routing": {"mode": "approximate"}},
    ],
)
def test_elsewhere_the_routers_route_approximately_and_the_engine_is_left_alone(spec: dict[str, Any]) -> None:
    pods = containers(spec)
    engine = pods["engine"]["containers"][0]
    assert "--kv-events-config" not in engine.get("args", [])
    assert len(engine["ports"]) == 1
    args = pods["router"]["containers"][0]["args"]
    assert "--mode" not in args
    assert "--kv-events-port" not in args
    assert settings_from_args(build_parser(only="router").parse_args(args)).precise.mode == "approximate"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            {"engine": {"kind": "vllm", "model": "llama-8b"}, "routing": {"mode": "precise"}},
            "the router needs the model's tokenizer",
        ),
        (
            {
                "engine": {
                    "kind": "vllm",
                    "model": MODEL_DIR,
                    "volumes": [VOLUME],
                    "volumeMounts": [{"name": "models", "mountPath": "/models", "subPath": "llama"}],
                },
                "routing": {"mode": "precise"},
            },
            "not by subPath",
        ),
        (
            {"engine": {"kind": "sim", "model": "m", "args": ["--kv-events-config", "{}"]}},
            "must not set --kv-events-config in precise mode",
        ),
        ({"engine": {"kind": "sim", "model": "m", "args": ["--block-tokens", "x"]}}, "whole number"),
        (
            {"engine": {"kind": "sim", "model": "m", "args": ["--tokenizer", "bpe"]}},
            "--tokenizer bpe in precise mode needs the routers to read the same folder",
        ),
        (
            {"engine": {"kind": "sim", "model": "m", "args": ["--tokenizer", "/models/bpe"]}},  # on no volume
            "needs the routers to read the same folder",
        ),
    ],
)
def test_what_precise_mode_cannot_honour_is_a_spec_error(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        plan_for(model_body(spec))


def test_sglang_is_refused_precise_by_the_operator_too_with_the_reason() -> None:
    body = model_body({"engine": {"kind": "sglang", "model": "m"}})
    body["spec"]["routing"]["mode"] = "precise"  # past the CRD's rule (an old CRD)
    with pytest.raises(SpecError, match="SGLang's KV events come per radix page"):
        plan_for(body)


def test_the_engine_network_policy_lets_only_the_routers_reach_the_event_ports() -> None:
    spec = {"engine": {"kind": "sim", "model": "tiny"}, "networkPolicy": {"enabled": True}}
    plan = plan_for(model_body(spec))
    (engine_policy,) = [
        o for o in plan.objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("engine")
    ]
    api, events = engine_policy["spec"]["ingress"]
    assert [p["port"] for p in events["ports"]] == [KV_EVENTS_PORT, KV_REPLAY_PORT]
    assert events["from"] == [{"podSelector": {"matchLabels": api["from"][0]["podSelector"]["matchLabels"]}}]
    assert api["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "router"
    approximate = plan_for(model_body({**spec, "routing": {"mode": "approximate"}}))
    (policy,) = [
        o for o in approximate.objects if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("engine")
    ]
    assert len(policy["spec"]["ingress"]) == 1


def test_the_gateways_picker_follows_the_events_as_the_router_does() -> None:
    gateway = {"gateway": {"enabled": True}}
    pods = containers({"engine": {"kind": "sim", "model": "tiny"}, **gateway})
    router, epp = pods["router"]["containers"][0]["args"], pods["epp"]["containers"][0]["args"]
    picker = epp_settings(build_parser(only="epp").parse_args(epp))
    assert picker.precise == settings_from_args(build_parser(only="router").parse_args(router)).precise
    assert picker.precise.mode == "precise"
    assert picker.precise.kv_events_port == KV_EVENTS_PORT
    assert picker.routing.block_size == 16  # the engine's tokens per block
    # a model folder on a volume: the picker mounts it read-only, as the router does
    pods = containers({**vllm_on_a_volume(), **gateway})
    assert arg(pods["epp"]["containers"][0]["args"], "--tokenizer") == MODEL_DIR
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in pods["epp"]["containers"][0]["volumeMounts"]
    assert VOLUME in pods["epp"]["volumes"]
    # approximate: no precise flag for either front
    pods = containers({"engine": {"kind": "sim", "model": "tiny"}, "routing": {"mode": "approximate"}, **gateway})
    args = pods["epp"]["containers"][0]["args"]
    assert "--mode" not in args
    assert "--tokenizer" not in args
    assert len(pods["epp"]["volumes"]) == 1


HUB_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
TOKEN = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
MIRROR = {"name": "HF_ENDPOINT", "value": "http://hub-mirror.models:8080"}


def test_vllm_by_hub_id_is_precise_and_the_fronts_fetch_the_tokenizer_with_the_engines_token() -> None:
    engine = {
        "kind": "vllm",
        "model": HUB_MODEL,
        "args": ["--revision", "0e9e39f"],
        "env": [TOKEN, MIRROR, {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
        "envFrom": [{"secretRef": {"name": "everything"}}],
    }
    pods = containers({"engine": engine, "gateway": {"enabled": True}})
    assert "--kv-events-config" in pods["engine"]["containers"][0]["args"]
    for component in ("router", "epp"):
        pod = pods[component]
        container = pod["containers"][0]
        assert arg(container["args"], "--tokenizer") == HUB_MODEL
        assert arg(container["args"], "--tokenizer-revision") == "0e9e39f"  # vLLM's rule: the model's revision
        env = {e["name"]: e for e in container["env"]}
        assert env["HF_TOKEN"] == TOKEN  # the same Secret key the engine reads
        assert env["HF_ENDPOINT"] == MIRROR
        assert "VLLM_LOGGING_LEVEL" not in env
        assert "envFrom" not in container  # not every key of that Secret
        cache = env["HF_HOME"]["value"]
        (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == cache]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert "sizeLimit" in volume["emptyDir"]
    settings = settings_from_args(build_parser(only="router").parse_args(pods["router"]["containers"][0]["args"]))
    assert (settings.precise.mode, settings.precise.tokenizer) == ("precise", HUB_MODEL)
    assert settings.precise.tokenizer_revision == "0e9e39f"
    assert settings.routing.block_size == 16


def test_the_engines_own_tokenizer_flags_name_what_the_fronts_fetch() -> None:
    args = ["--tokenizer", "acme/llama-tokenizer", "--tokenizer-revision", "v2", "--revision", "v1"]
    pods = containers({"engine": {"kind": "vllm", "model": HUB_MODEL, "args": args}})
    router = pods["router"]["containers"][0]
    assert arg(router["args"], "--tokenizer") == "acme/llama-tokenizer"
    assert arg(router["args"], "--tokenizer-revision") == "v2"
    assert arg(router["args"], "--served-model") == HUB_MODEL
    assert [e["name"] for e in router["env"]] == ["POD_IP", "POD_NAME", "POD_NAMESPACE", "HF_HOME"]  # no token given


def test_a_hub_model_asked_approximate_gets_no_hub_access() -> None:
    pods = containers(
        {"engine": {"kind": "vllm", "model": HUB_MODEL, "env": [TOKEN]}, "routing": {"mode": "approximate"}}
    )
    router = pods["router"]["containers"][0]
    assert "--tokenizer" not in router["args"]
    assert "HF_TOKEN" not in {e["name"] for e in router["env"]}
    assert len(pods["router"]["volumes"]) == 1


def test_a_per_node_cache_sends_the_routers_to_the_hub_for_the_tokenizer() -> None:
    from prefixroute.controller.model_files import resolved
    from prefixroute.controller.spec.model import parse_spec
    from prefixroute.controller.tokenizer_status import hub_tokenizer

    endpoint = {"name": "HF_ENDPOINT", "value": "http://hub"}
    spec = {
        "model": {"hub": {"id": "acme/tiny", "revision": "v1"}, "cache": {"perNode": {}}},
        "engine": {"kind": "vllm", "env": [endpoint]},
        "routing": {"mode": "precise"},
    }
    plan = plan_for(model_body(spec))
    assert plan.spec.engine.model == "/model-cache/models/acme--tiny@v1"  # the engine reads its node's folder
    router = next(o for o in plan.objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "llama-router")
    pod = router["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    assert args[args.index("--tokenizer") + 1] == "acme/tiny"
    assert args[args.index("--tokenizer-revision") + 1] == "v1"
    assert args[args.index("--served-model") + 1] == "acme/tiny"
    assert endpoint in pod["containers"][0]["env"]
    assert all("hostPath" not in v for v in pod.get("volumes", []))
    assert hub_tokenizer(resolved("llama", parse_spec(spec))) == "acme/tiny"  # the operator asks the routers
