"""The CRD itself: structural, valid against apiextensions/v1, defaults that agree with the
code, CEL rules that accept good specs and reject bad ones with readable messages."""

from __future__ import annotations

import pytest

from prefixroute.autoscaling.settings import CA_SOURCES, DEFAULT_CA_KEY, AutoscalingSettings, CAReference, PrometheusTLS
from prefixroute.controller.spec.adapters import DEFAULT_MAX_LORAS, DEFAULT_MAX_RANK
from prefixroute.controller.spec.engine import (
    DEFAULT_ENGINE_PORT,
    DEFAULT_MAX_SURGE,
    DEFAULT_MAX_UNAVAILABLE,
    DEFAULT_SLOW_START_SECONDS,
    DEFAULT_TERMINATION_GRACE_SECONDS,
    ENGINE_KINDS,
)
from prefixroute.controller.spec.gateway import FAILURE_MODES, GatewaySpec
from prefixroute.controller.spec.model import DEFAULT_REPLICAS
from prefixroute.controller.spec.model_source import DEFAULT_NODE_ROOT
from prefixroute.controller.spec.network import NetworkPolicySpec
from prefixroute.controller.spec.router import SERVICE_TYPES, RouterSpec
from prefixroute.crd import GROUP, KIND, PLURAL, VERSION
from prefixroute.routing.config import STRATEGY_NAMES, RoutingConfig
from tests.controller.helpers import model_body
from tests.controller.schema import admit, kubernetes_errors, load_crd, root_schema, structural_problems, walk

CRD = load_crd()
VERSION_ENTRY = CRD["spec"]["versions"][0]
SPEC = root_schema()["properties"]["spec"]["properties"]


def test_names_scope_and_version() -> None:
    assert CRD["metadata"]["name"] == f"{PLURAL}.{GROUP}"
    names = CRD["spec"]["names"]
    assert (CRD["spec"]["group"], names["kind"], names["plural"], names["shortNames"]) == (GROUP, KIND, PLURAL, ["prm"])
    assert CRD["spec"]["scope"] == "Namespaced"
    assert (VERSION_ENTRY["name"], VERSION_ENTRY["served"], VERSION_ENTRY["storage"]) == (VERSION, True, True)


def test_valid_against_apiextensions_v1() -> None:
    assert kubernetes_errors(CRD) == []


def test_schema_is_structural() -> None:
    assert structural_problems(root_schema()) == []


def test_every_cel_rule_has_a_message() -> None:
    rules = [r for _, node in walk(root_schema()) for r in node.get("x-kubernetes-validations") or ()]
    assert len(rules) >= 8
    assert all(r["message"].strip() and not r["message"].startswith("failed") for r in rules)


def test_defaults_pass_their_own_rules_as_written() -> None:
    """The API server validates a `default` against the rules of its schema as is, before
    nested defaults are filled in (a real kube-apiserver refused `default: {}` with rules
    that read fields without has())."""
    from tests.controller.schema import cel_failures

    for path, node in walk(root_schema()):
        if "default" in node and node.get("x-kubernetes-validations"):
            assert cel_failures(node["default"], node) == [], path


def test_status_and_scale_subresources() -> None:
    assert VERSION_ENTRY["subresources"] == {
        "status": {},
        "scale": {
            "specReplicasPath": ".spec.replicas",
            "statusReplicasPath": ".status.replicas",
            "labelSelectorPath": ".status.selector",
        },
    }
    status = root_schema()["properties"]["status"]["properties"]
    for field in (
        "replicas",
        "selector",
        "readyText",
        "hitRate",
        "ttftP50",
        "ring",
        "conditions",
        "observedGeneration",
        "kopf",
    ):
        assert field in status
    assert status["kopf"]["x-kubernetes-preserve-unknown-fields"] is True  # kopf's bookkeeping survives pruning


def test_printer_columns() -> None:
    columns = {c["name"]: c["jsonPath"] for c in VERSION_ENTRY["additionalPrinterColumns"]}
    assert columns == {
        "Ready": ".status.readyText",
        "Strategy": ".spec.routing.strategy",
        "Front": ".status.front",
        "Hit rate": ".status.hitRate",
        "TTFT p50": ".status.ttftP50",
        "Age": ".metadata.creationTimestamp",
    }


def test_enums_come_from_the_code() -> None:
    assert SPEC["engine"]["properties"]["kind"]["enum"] == list(ENGINE_KINDS)
    assert SPEC["routing"]["properties"]["strategy"]["enum"] == list(STRATEGY_NAMES)
    assert SPEC["router"]["properties"]["serviceType"]["enum"] == list(SERVICE_TYPES)
    assert SPEC["gateway"]["properties"]["failureMode"]["enum"] == list(FAILURE_MODES)


def test_gateway_defaults_are_the_parsers() -> None:
    props = SPEC["gateway"]["properties"]
    parsed = GatewaySpec()
    assert props["enabled"]["default"] is parsed.enabled is False
    assert props["router"]["default"] is parsed.router is True
    assert props["failureMode"]["default"] == parsed.failure_mode
    assert props["replicas"]["default"] == parsed.replicas


def test_routing_defaults_are_the_routing_cores() -> None:
    props = SPEC["routing"]["properties"]
    config = RoutingConfig()
    assert props["strategy"]["default"] == config.strategy
    assert props["blockSize"]["default"] == config.block_size
    assert props["prefixBlocks"]["default"] == config.prefix_blocks
    assert props["loadFactor"]["default"] == config.load_factor
    assert props["loadSlack"]["default"] == config.load_slack
    assert props["queuePenalty"]["default"] == config.queue_penalty
    assert props["virtualNodes"]["default"] == config.virtual_nodes
    assert props["isolateTenants"]["default"] == config.isolate_tenants


def _camel(snake: str) -> str:
    head, *rest = snake.split("_")
    return head + "".join(p.title() for p in rest).replace("Tls", "TLS")


def test_autoscaling_fields_and_defaults_are_the_autoscalers() -> None:
    """spec.autoscaling is read by AutoscalingSettings.from_spec: every field it knows is in
    the schema with the same default, and the schema has nothing it would ignore."""
    props = SPEC["autoscaling"]["properties"]
    settings = AutoscalingSettings()
    expected = {_camel(name): getattr(settings, name) for name in settings.__dataclass_fields__}
    assert set(props) == set(expected)
    for name, value in expected.items():
        if value is None:
            assert "default" not in props[name], name
        else:
            assert props[name]["default"] == value, name


def test_other_defaults_are_the_parsers() -> None:
    assert SPEC["engine"]["properties"]["port"]["default"] == DEFAULT_ENGINE_PORT
    assert SPEC["replicas"]["default"] == DEFAULT_REPLICAS
    router = SPEC["router"]["properties"]
    default = RouterSpec()
    assert (router["replicas"]["default"], router["serviceType"]["default"], router["port"]["default"]) == (
        default.replicas,
        default.service_type,
        default.port,
    )


def test_rollout_and_grace_defaults_are_the_parsers() -> None:
    engine = SPEC["engine"]["properties"]
    rollout = engine["rollout"]["properties"]
    assert (rollout["maxSurge"]["default"], rollout["maxUnavailable"]["default"]) == (
        DEFAULT_MAX_SURGE,
        DEFAULT_MAX_UNAVAILABLE,
    )
    assert engine["terminationGracePeriodSeconds"]["default"] == DEFAULT_TERMINATION_GRACE_SECONDS
    assert engine["slowStartSeconds"]["default"] == DEFAULT_SLOW_START_SECONDS
    assert SPEC["networkPolicy"]["properties"]["enabled"]["default"] is NetworkPolicySpec().enabled


def test_a_rollout_for_a_full_gpu_pool_is_admitted() -> None:
    spec = {"engine": {"kind": "sim", "model": "m", "rollout": {"maxSurge": 0, "maxUnavailable": 1}}}
    stored, errors = admit(model_body(spec, defaults=False))
    assert errors == []
    assert stored["spec"]["engine"]["rollout"] == {"maxSurge": 0, "maxUnavailable": 1}
    stored, errors = admit(
        model_body({"engine": {"kind": "sim", "model": "m", "rollout": {"maxSurge": "25%"}}}, defaults=False)
    )
    assert errors == []
    assert stored["spec"]["engine"]["rollout"] == {"maxSurge": "25%", "maxUnavailable": 0}


def test_a_minimal_spec_is_admitted_and_defaulted() -> None:
    stored, errors = admit(model_body(defaults=False))
    assert errors == []
    assert stored["spec"]["engine"]["rollout"] == {"maxSurge": 1, "maxUnavailable": 0}
    assert stored["spec"]["engine"]["terminationGracePeriodSeconds"] == 60
    assert stored["spec"]["networkPolicy"] == {"enabled": False}
    assert stored["spec"]["routing"]["strategy"] == "prefix-cache"
    assert stored["spec"]["routing"]["loadFactor"] == 1.25
    assert stored["spec"]["router"]["replicas"] == 2
    assert stored["spec"]["autoscaling"]["enabled"] is False
    assert stored["spec"]["replicas"] == 1


REJECTED = [
    (
        {"engine": {"kind": "sim", "model": "m"}, "adapters": [{"name": "a", "source": {"folder": {"path": "/a"}}}]},
        "adapters need engine.lora",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m", "lora": {}},
            "adapters": [{"name": "a", "source": {"folder": {"path": "/a"}}}] * 2,
        },
        "adapters must have unique names",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m", "lora": {}},
            "adapters": [{"name": "m", "source": {"folder": {"path": "/a"}}}],
        },
        "must differ from engine.model",
    ),
    (
        {
            "engine": {"kind": "vllm", "lora": {}},
            "model": {"folder": {"path": "/m"}, "servedName": "base"},
            "adapters": [{"name": "base", "source": {"folder": {"path": "/a"}}}],
        },
        "must differ from model.servedName",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m", "lora": {}},
            "adapters": [{"name": "a", "source": {"hub": {"id": "o/a"}}}],
        },
        "adapters from the hub are downloaded into the model cache",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m", "lora": {}},
            "adapters": [{"name": "a,b", "source": {"folder": {"path": "/a"}}}],
        },
        "an adapter's name holds only letters",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m", "lora": {}},
            "adapters": [{"name": "a", "source": {"folder": {"path": "/a"}, "hub": {"id": "o/a"}}}],
        },
        "exactly one of hub or folder",
    ),
    ({"engine": {"kind": "sglang", "model": "m", "lora": {}}}, "engine.lora is for engine kinds vllm and sim"),
    ({"engine": {"kind": "vllm", "model": "m", "lora": {"maxRank": 12}}}, "maxRank"),
    ({"engine": {"kind": "vllm"}}, "engine.model is required"),
    ({"engine": {"kind": "vllm", "model": "a/b"}, "model": {"hub": {"id": "a/b"}}}, "not both"),
    ({"engine": {"kind": "custom", "image": "x"}, "model": {"hub": {"id": "a/b"}}}, "a custom engine takes its model"),
    ({"engine": {"kind": "vllm"}, "model": {}}, "model needs exactly one source"),
    (
        {"engine": {"kind": "vllm"}, "model": {"hub": {"id": "a/b"}, "folder": {"path": "/m"}}},
        "model needs exactly one source",
    ),
    ({"engine": {"kind": "vllm"}, "model": {"folder": {"path": "/m"}, "cache": {"size": "1Gi"}}}, "for hub models"),
    ({"engine": {"kind": "vllm"}, "model": {"hub": {"id": "a/b"}, "cache": {}}}, "model.cache needs size"),
    (
        {"engine": {"kind": "vllm"}, "model": {"hub": {"id": "a/b"}, "cache": {"perNode": {}, "size": "1Gi"}}},
        "model.cache.perNode keeps the weights on each node's own disk and makes no claim",
    ),
    (
        {
            "engine": {"kind": "vllm"},
            "model": {"hub": {"id": "a/b"}, "cache": {"perNode": {}, "storageClassName": "x"}},
        },
        "leave out size, storageClassName and accessMode",
    ),
    (
        {
            "engine": {"kind": "vllm"},
            "model": {"hub": {"id": "a/b"}, "cache": {"perNode": {}, "accessMode": "ReadWriteOnce"}},
        },
        "leave out size, storageClassName and accessMode",
    ),
    (
        {"engine": {"kind": "vllm"}, "model": {"hub": {"id": "a/b"}, "cache": {"perNode": {}, "onDelete": "Delete"}}},
        "the operator cannot remove files from the nodes' disks",
    ),
    (
        {"engine": {"kind": "vllm"}, "model": {"hub": {"id": "a/b"}, "cache": {"perNode": {"hostPath": "/a/../b"}}}},
        "model.cache.perNode.hostPath must be an absolute path below /",
    ),
    (
        {"engine": {"kind": "vllm"}, "model": {"hub": {"id": "a/b"}, "cache": {"perNode": {"hostPath": "var/x"}}}},
        "model.cache.perNode.hostPath must be an absolute path below /",
    ),
    (
        {
            "engine": {"kind": "vllm", "lora": {}},
            "model": {"hub": {"id": "a/b"}, "cache": {"perNode": {}}},
            "adapters": [{"name": "a", "source": {"hub": {"id": "o/a"}}}],
        },
        "give model a hub source with a cache that is not perNode",
    ),
    ({"engine": {"kind": "vllm"}, "model": {"folder": {"path": "m"}}}, "must be an absolute path"),
    (
        {"engine": {"kind": "vllm"}, "model": {"image": {"reference": "r/m:v1"}, "folder": {"path": "/m"}}},
        "model needs exactly one source",
    ),
    ({"engine": {"kind": "vllm"}, "model": {"image": {"reference": "r/m:v1", "path": "a/../.."}}}, "without '..'"),
    ({"engine": {"kind": "vllm"}, "model": {"image": {"reference": "r/m v1"}}}, "must not contain spaces"),
    (
        {"engine": {"kind": "vllm"}, "model": {"persistentVolumeClaim": {"claimName": "w", "path": "../x"}}},
        "without '..'",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "gateway": {"router": False}},
        "gateway.router may be false only with gateway.enabled",
    ),
    (
        {"engine": {"kind": "sim", "model": "m", "command": ["x"]}},
        "engine.command is only used with engine kind custom",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "routing": {"loadFactor": 0.5}},
        "routing.loadFactor must be at least 1.0",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "routing": {"isolateTenants": True}},
        "routing.isolateTenants needs routing.tenantHeader",
    ),
    (
        {"engine": {"kind": "sglang", "model": "m"}, "routing": {"mode": "precise"}},
        "routing.mode precise needs an engine that publishes vLLM's KV cache events",
    ),
    (
        {"engine": {"kind": "custom", "image": "x"}, "routing": {"mode": "precise"}},
        "routing.mode precise needs an engine that publishes vLLM's KV cache events",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "autoscaling": {"minReplicas": 5, "maxReplicas": 2}},
        "minReplicas must be less than or equal",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "router": {"nodePort": 30080}},
        "router.nodePort needs router.serviceType",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m"},
            "autoscaling": {
                "prometheus": "https://prometheus:9090",
                "prometheusTLS": {"ca": {"secretKeyRef": {"name": "prom-ca"}}, "insecureSkipVerify": True},
            },
        },
        "autoscaling.prometheusTLS: set ca or insecureSkipVerify, not both",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m"},
            "autoscaling": {"prometheus": "http://prometheus:9090", "prometheusTLS": {"insecureSkipVerify": True}},
        },
        "autoscaling.prometheusTLS needs autoscaling.prometheus to be an https:// URL",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "autoscaling": {"prometheusTLS": {"insecureSkipVerify": True}}},
        "autoscaling.prometheusTLS needs autoscaling.prometheus to be an https:// URL",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m"},
            "autoscaling": {
                "prometheus": "https://prometheus:9090",
                "prometheusTLS": {"ca": {"secretKeyRef": {"name": "a"}, "configMapKeyRef": {"name": "b"}}},
            },
        },
        "autoscaling.prometheusTLS.ca names exactly one of secretKeyRef or configMapKeyRef",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m"},
            "autoscaling": {"prometheus": "https://prometheus:9090", "prometheusTLS": {"ca": {}}},
        },
        "autoscaling.prometheusTLS.ca names exactly one of secretKeyRef or configMapKeyRef",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m"},
            "autoscaling": {
                "prometheus": "https://prometheus:9090",
                "prometheusTLS": {"ca": {"configMapKeyRef": {"name": "Bundle"}}},
            },
        },
        "does not match",
    ),
    ({"engine": {"kind": "tgi", "model": "m"}}, "is not one of"),
    ({"engine": {"kind": "sim", "model": "m"}, "replicas": -1}, "less than the minimum"),
    ({"engine": {"kind": "sim", "model": "m"}, "routing": {"strategy": "random"}}, "is not one of"),
    ({"engine": {"kind": "sim", "model": "m", "port": 70000}}, "greater than the maximum"),
    ({"engine": {"kind": "sim", "model": "m", "sharedMemorySize": "lots"}}, "does not match"),
    ({"engine": {"kind": "sim", "model": "m", "resourcez": {}}}, "unknown field .spec.engine.resourcez"),
    ({}, "'engine' is a required property"),
    (
        {"engine": {"kind": "sim", "model": "m", "rollout": {"maxSurge": 0, "maxUnavailable": "0%"}}},
        "maxSurge and maxUnavailable cannot both be 0",
    ),
    ({"engine": {"kind": "sim", "model": "m", "rollout": {"maxSurge": "one"}}}, "does not match"),
    ({"engine": {"kind": "sim", "model": "m", "terminationGracePeriodSeconds": -5}}, "less than the minimum"),
    ({"engine": {"kind": "sim", "model": "m"}, "networkPolicy": {"enabled": "yes"}}, "is not of type 'boolean'"),
    (
        {"engine": {"kind": "sim", "model": "m"}, "auth": {"trustedFronts": ["10.0.0.0/8"]}},
        "auth.trustedFronts needs auth.apiKeysSecret",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "auth": {"apiKeysSecret": {"name": "k"}, "trustedFronts": ["gw"]}},
        "each of auth.trustedFronts must be an IP address or a CIDR network",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "auth": {"apiKeysSecret": {"name": "Keys!"}}},
        "does not match",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "auth": {"apiKeysSecret": {"key": "keys.yaml"}}},
        "'name' is a required property",
    ),
    (
        {
            "engine": {"kind": "sim", "model": "m"},
            "gateway": {"enabled": True, "router": False},
            "auth": {"apiKeysSecret": {"name": "k"}},
        },
        "auth is checked by the router",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "router": {"tracing": {"sampleRatio": 0.1}}},
        "router.tracing.sampleRatio needs router.tracing.otlpEndpoint",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "router": {"tracing": {"otlpEndpoint": "collector:4318"}}},
        "does not match",
    ),
    (
        {"engine": {"kind": "sim", "model": "m"}, "router": {"fairSharing": {"maxWaitSeconds": 0}}},
        "less than the minimum",
    ),
]


def test_auth_with_keys_is_admitted_and_names_the_tenant_for_isolation() -> None:
    spec = {
        "engine": {"kind": "sim", "model": "m"},
        "routing": {"isolateTenants": True},  # no tenant header: the keys name the tenant
        "auth": {"apiKeysSecret": {"name": "acme-keys"}, "trustedFronts": ["10.0.0.0/8", "192.168.1.7", "fd00::/8"]},
        "router": {"tracing": {"otlpEndpoint": "http://otel.observability:4318", "sampleRatio": 0.25}},
    }
    stored, errors = admit(model_body(spec, defaults=False))
    assert errors == []
    assert stored["spec"]["auth"]["apiKeysSecret"] == {"name": "acme-keys", "key": "keys.yaml"}


def test_a_prometheus_ca_is_admitted_with_its_default_key() -> None:
    """What the autoscaler reads from the stored object is what the spec meant."""
    tls = {"ca": {"configMapKeyRef": {"name": "kube-root-ca.crt"}}}
    spec = {
        "engine": {"kind": "sim", "model": "m"},
        "autoscaling": {"prometheus": "https://p:9090", "prometheusTLS": tls},
    }
    stored, errors = admit(model_body(spec, defaults=False))
    assert errors == []
    assert stored["spec"]["autoscaling"]["prometheusTLS"] == {
        "ca": {"configMapKeyRef": {"name": "kube-root-ca.crt", "key": "ca.crt"}},
        "insecureSkipVerify": False,
    }
    settings = AutoscalingSettings.from_spec(stored["spec"]["autoscaling"])
    assert settings.prometheus_tls == PrometheusTLS(ca=CAReference("ConfigMap", "kube-root-ca.crt", DEFAULT_CA_KEY))
    for source in CA_SOURCES:  # the schema's key default is the parser's
        ref = SPEC["autoscaling"]["properties"]["prometheusTLS"]["properties"]["ca"]["properties"][source]
        assert ref["properties"]["key"]["default"] == DEFAULT_CA_KEY
    assert set(SPEC["autoscaling"]["properties"]["prometheusTLS"]["properties"]["ca"]["properties"]) == set(CA_SOURCES)


@pytest.mark.parametrize(("spec", "message"), REJECTED)
def test_bad_specs_are_rejected_with_a_readable_message(spec: dict, message: str) -> None:
    _, errors = admit(model_body(spec, defaults=False))
    assert any(message in e for e in errors), errors


@pytest.mark.parametrize("name", ["Llama", "9lives", "a" * 51, "llama.v2"])
def test_names_that_cannot_name_services_are_rejected(name: str) -> None:
    _, errors = admit(model_body(name=name, defaults=False))
    assert any("metadata.name" in e for e in errors), errors


def test_a_custom_engine_without_image_is_admitted_for_the_operator_to_report() -> None:
    """The schema lets it through on purpose: the operator answers with Degraded (see
    test_reconcile), which is the path a user sees when a spec cannot be honoured."""
    _, errors = admit(model_body({"engine": {"kind": "custom"}}, defaults=False))
    assert errors == []


def test_integers_for_number_fields_are_fine() -> None:
    _, errors = admit(
        model_body({"engine": {"kind": "sim", "model": "m"}, "routing": {"loadFactor": 2}}, defaults=False)
    )
    assert errors == []


def test_a_cached_hub_model_is_admitted_with_the_cache_defaults() -> None:
    spec = {
        "engine": {"kind": "vllm"},
        "model": {"hub": {"id": "acme/tiny", "revision": "v1"}, "cache": {"size": "2Gi"}},
    }
    stored, errors = admit(model_body(spec, defaults=False))
    assert errors == []
    assert stored["spec"]["model"]["cache"] == {"size": "2Gi", "accessMode": "ReadWriteMany", "onDelete": "Keep"}


def test_a_per_node_cache_is_admitted_with_its_folder_and_no_claim_fields() -> None:
    spec = {"engine": {"kind": "vllm"}, "model": {"hub": {"id": "acme/tiny"}, "cache": {"perNode": {}}}}
    stored, errors = admit(model_body(spec, defaults=False))
    assert errors == []
    cache = stored["spec"]["model"]["cache"]
    assert cache["perNode"] == {"hostPath": DEFAULT_NODE_ROOT}
    assert "size" not in cache
    assert "storageClassName" not in cache
    explicit = {**spec, "model": {"hub": {"id": "acme/tiny"}, "cache": {"perNode": {"hostPath": "/mnt/nvme/models"}}}}
    assert admit(model_body(explicit, defaults=False))[1] == []


def test_adapters_and_lora_slots_are_admitted_with_vllms_defaults() -> None:
    spec = {
        "engine": {"kind": "vllm", "lora": {}},
        "model": {"hub": {"id": "acme/tiny"}, "cache": {"size": "2Gi"}},
        "adapters": [
            {"name": "sql", "source": {"hub": {"id": "acme/sql-lora", "revision": "v2"}}},
            {"name": "chat_v1.2", "source": {"folder": {"path": "/adapters/chat"}}},
        ],
    }
    stored, errors = admit(model_body(spec, defaults=False))
    assert errors == []
    assert stored["spec"]["engine"]["lora"] == {"maxLoras": DEFAULT_MAX_LORAS, "maxRank": DEFAULT_MAX_RANK}
