"""spec.gateway's children: the InferencePool names our picker, the picker routes as the router."""

from prefixroute.controller.builders.gateway import (
    epp_args,
    epp_deployment,
    epp_pdb,
    epp_pod_template,
    epp_service,
    inference_pool,
)
from prefixroute.controller.builders.router import router_args
from prefixroute.controller.precise import precise_routing
from prefixroute.controller.spec.engine import parse_engine
from prefixroute.controller.spec.gateway import parse_gateway
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.router import parse_router
from prefixroute.controller.spec.routing import parse_routing
from prefixroute.epp.cli import add_epp_arguments, settings_from_args
from tests.controller.schema import kubernetes_errors

REF = ModelRef("chat", "tenants", "uid-2", 1)
ROUTING = parse_routing(
    {"strategy": "prefix-hash", "loadFactor": 2, "tenantHeader": "X-Tenant", "isolateTenants": True}
)


def test_the_pool_selects_the_engine_pods_and_names_the_picker() -> None:
    pool = inference_pool(
        REF, parse_engine({"kind": "sim", "model": "m", "port": 8001}), parse_gateway({"failureMode": "FailOpen"})
    )
    assert pool["apiVersion"] == "inference.networking.k8s.io/v1"
    assert pool["kind"] == "InferencePool"
    assert pool["metadata"]["name"] == "chat"
    assert pool["metadata"]["ownerReferences"][0]["uid"] == "uid-2"
    spec = pool["spec"]
    assert spec["selector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    assert spec["targetPorts"] == [{"number": 8001}]
    assert spec["endpointPickerRef"] == {"name": "chat-epp", "port": {"number": 9002}, "failureMode": "FailOpen"}


def test_the_picker_takes_the_routers_routing_flags_and_follows_the_resource() -> None:
    args = epp_args(REF, ROUTING, parse_gateway({"args": ["--max-body-bytes", "1024"]}))
    routing_part = router_args(REF, ROUTING, parse_router({}))[7:]
    assert args[:14] == ["epp", "--host", "$(POD_IP)", "--port", "9002", "--health-port", "9003",
                         "--metrics-port", "9090", "--resource", "$(POD_NAMESPACE)/chat",
                         "--inference-objectives", "$(POD_NAMESPACE)/chat", "--strategy"]  # fmt: skip
    # the same routing flags; the picker's peers are the picker's replicas (its own Service)
    assert routing_part[-4:] == ["--peer-port", "9200", "--peers-service", "$(POD_NAMESPACE)/chat-router"]
    assert args[13:-6] == routing_part[:-4]
    assert args[-2:] == ["--max-body-bytes", "1024"]
    assert args[-6:-2] == ["--peer-port", "9200", "--peers-service", "$(POD_NAMESPACE)/chat-epp"]
    # ... and `prefixroute epp` reads them as the spec says.
    import argparse

    parser = argparse.ArgumentParser()
    add_epp_arguments(parser)
    settings = settings_from_args(
        parser.parse_args([a.replace("$(POD_NAMESPACE)", "tenants").replace("$(POD_IP)", "10.0.0.9") for a in args[1:]])
    )
    assert settings.routing == ROUTING.config
    assert settings.objectives_of == "tenants/chat"  # its own pool's InferenceObjectives
    assert settings.gate.tenant_header == "X-Tenant"
    assert settings.resource == "tenants/chat"
    assert settings.max_body_bytes == 1024


def test_picker_pods_probe_grpc_health_and_are_valid_kubernetes() -> None:
    template, _digest = epp_pod_template(REF, ROUTING, parse_gateway({"enabled": True}))
    container = template["spec"]["containers"][0]
    assert container["readinessProbe"]["grpc"] == {"port": 9003, "service": ""}
    assert container["livenessProbe"]["grpc"] == {"port": 9003, "service": "liveness"}
    assert template["spec"]["serviceAccountName"] == "chat-epp"
    assert container["securityContext"]["readOnlyRootFilesystem"]
    assert template["metadata"]["annotations"]["prometheus.io/port"] == "9090"
    deployment = epp_deployment(REF, template, 3)
    assert deployment["spec"]["replicas"] == 3
    for obj in (deployment, epp_service(REF), epp_pdb(REF)):
        assert kubernetes_errors(obj) == [], obj["kind"]
    ports = {p["name"]: (p["port"], p.get("appProtocol")) for p in epp_service(REF)["spec"]["ports"]}
    assert ports == {
        "grpc": (9002, "kubernetes.io/h2c"),
        "grpc-health": (9003, "kubernetes.io/h2c"),
        "metrics": (9090, "http"),
    }


def test_the_front_door_applies_to_the_picker_too() -> None:
    """spec.router.fairSharing and spec.auth reach the picker as they reach the router: a model
    behind a gateway is no way around its API keys or fair sharing."""
    import argparse

    from prefixroute.controller.builders.router import API_KEYS_DIR, API_KEYS_VOLUME
    from prefixroute.controller.spec.auth import parse_auth

    auth = parse_auth({"apiKeysSecret": {"name": "acme-keys", "key": "tenants.yaml"}, "trustedFronts": ["10.0.0.0/8"]})
    router = parse_router({"retries": 4, "fairSharing": {"maxInFlightPerEngine": 8, "maxWaitSeconds": 2.5}})
    args = epp_args(REF, ROUTING, parse_gateway({"enabled": True}), router, auth)
    assert "--retries" not in args  # the router's own knobs stay the router's
    assert args[-8:] == ["--max-in-flight-per-member", "8", "--max-wait-seconds", "2.5",
                         "--api-keys", f"{API_KEYS_DIR}/tenants.yaml", "--trusted-fronts", "10.0.0.0/8"]  # fmt: skip
    parser = argparse.ArgumentParser()
    add_epp_arguments(parser)
    gate = settings_from_args(
        parser.parse_args([a.replace("$(POD_NAMESPACE)", "tenants").replace("$(POD_IP)", "10.0.0.9") for a in args[1:]])
    ).gate
    assert (gate.max_in_flight_per_member, gate.max_wait_seconds, gate.api_keys) == (
        8,
        2.5,
        f"{API_KEYS_DIR}/tenants.yaml",
    )
    template, digest = epp_pod_template(REF, ROUTING, parse_gateway({"enabled": True}), router, auth)
    pod = template["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == API_KEYS_VOLUME]
    assert volume["secret"]["secretName"] == "acme-keys"
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == API_KEYS_VOLUME]
    assert mount == {"name": API_KEYS_VOLUME, "mountPath": API_KEYS_DIR, "readOnly": True}
    assert kubernetes_errors(epp_deployment(REF, template, 2)) == []
    _, without = epp_pod_template(REF, ROUTING, parse_gateway({"enabled": True}))
    assert digest != without  # turning keys on rolls the pickers


def test_in_precise_mode_the_picker_gets_the_routers_precise_flags_and_model_folder() -> None:
    engine = parse_engine(
        {"kind": "vllm", "model": "/models/m", "volumes": [{"name": "models", "emptyDir": {}}],
         "volumeMounts": [{"name": "models", "mountPath": "/models"}]}
    )  # fmt: skip
    precise = precise_routing(engine, ROUTING)
    assert precise is not None
    args = epp_args(REF, ROUTING, parse_gateway({"enabled": True}), precise=precise)
    router = router_args(REF, ROUTING, parse_router({}), precise=precise)
    # the same routing and precise flags, in the same order; each front's peers are its own replicas
    assert args[13:] == [*router[7:-1], "$(POD_NAMESPACE)/chat-epp"]
    assert router[-1] == "$(POD_NAMESPACE)/chat-router"
    assert args[args.index("--mode") + 1] == "precise"
    assert "--block-size" in args
    template, digest = epp_pod_template(REF, ROUTING, parse_gateway({"enabled": True}), precise=precise)
    pod = template["spec"]
    assert {"name": "models", "mountPath": "/models", "readOnly": True} in pod["containers"][0]["volumeMounts"]
    assert {"name": "models", "emptyDir": {}} in pod["volumes"]
    assert digest != epp_pod_template(REF, ROUTING, parse_gateway({"enabled": True}))[1]


def test_the_picker_is_told_the_engines_adapter_slots_as_the_router_is() -> None:
    from prefixroute.controller.spec.adapters import LoraSlots

    args = epp_args(REF, ROUTING, parse_gateway({"enabled": True}), lora=LoraSlots(max_loras=2))
    assert args[args.index("--adapter-slots") + 1] == "2"
