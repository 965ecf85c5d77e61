from prefixroute import __version__
from prefixroute.controller.builders.router import router_args, router_deployment, router_pod_template
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.router import parse_router
from prefixroute.controller.spec.routing import parse_routing
from tests.controller.schema import kubernetes_errors

REF = ModelRef("chat", "tenants", "uid-2", 1)


def test_default_routing_flags_are_all_explicit() -> None:
    args = router_args(REF, parse_routing({}), parse_router({}))
    assert args == [
        "router",
        "--host",
        "$(POD_IP)",
        "--port",
        "8080",
        "--resource",
        "$(POD_NAMESPACE)/chat",
        "--strategy",
        "prefix-cache",
        "--block-size",
        "256",
        "--prefix-blocks",
        "4",
        "--load-factor",
        "1.25",
        "--load-slack",
        "3",
        "--queue-penalty",
        "0.4",
        "--virtual-nodes",
        "256",
        "--peer-port",
        "9200",
        "--peers-service",
        "$(POD_NAMESPACE)/chat-router",
    ]


def test_tenant_isolation_retries_and_extra_args() -> None:
    routing = parse_routing(
        {
            "strategy": "prefix-hash",
            "blockSize": 128,
            "prefixBlocks": 8,
            "loadFactor": 2,
            "loadSlack": 0,
            "queuePenalty": 1,
            "virtualNodes": 64,
            "tenantHeader": "X-Tenant",
            "isolateTenants": True,
        }
    )
    args = router_args(REF, routing, parse_router({"retries": 2, "args": ["--max-body-bytes", "1048576"]}))
    assert args[7:] == [
        "--strategy",
        "prefix-hash",
        "--block-size",
        "128",
        "--prefix-blocks",
        "8",
        "--load-factor",
        "2",
        "--load-slack",
        "0",
        "--queue-penalty",
        "1",
        "--virtual-nodes",
        "64",
        "--tenant-header",
        "X-Tenant",
        "--isolate-tenants",
        "--peer-port",
        "9200",
        "--peers-service",
        "$(POD_NAMESPACE)/chat-router",
        "--retries",
        "2",
        "--max-body-bytes",
        "1048576",
    ]


def test_router_deployment_is_valid_and_runs_as_its_service_account() -> None:
    router = parse_router({"replicas": 3, "resources": {"limits": {"cpu": "2"}}})
    template, digest = router_pod_template(REF, parse_routing({}), router)
    deployment = router_deployment(REF, template, router.replicas)
    assert kubernetes_errors(deployment) == []
    pod = deployment["spec"]["template"]
    assert deployment["metadata"]["name"] == "chat-router"
    assert deployment["spec"]["replicas"] == 3
    assert pod["spec"]["serviceAccountName"] == "chat-router"
    container = pod["spec"]["containers"][0]
    assert container["image"] == f"prefixroute/prefixroute:{__version__}"
    assert container["resources"] == {"limits": {"cpu": "2"}}
    assert {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}} in container["env"]
    assert container["readinessProbe"]["httpGet"] == {"path": "/health", "port": "http"}
    assert {"name": "peers", "containerPort": 9200, "protocol": "TCP"} in container["ports"]
    assert pod["metadata"]["labels"]["app.kubernetes.io/component"] == "router"
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == "8080"
    assert pod["metadata"]["annotations"]["prefixroute.io/spec-hash"] == digest


def test_routing_changes_roll_routers() -> None:
    _, a = router_pod_template(REF, parse_routing({}), parse_router({}))
    _, b = router_pod_template(REF, parse_routing({"loadFactor": 1.5}), parse_router({}))
    assert a != b


def test_fair_sharing_and_tracing_render_only_what_the_spec_sets() -> None:
    router = parse_router(
        {
            "fairSharing": {"maxInFlightPerEngine": 8, "maxWaitSeconds": 2.5},
            "tracing": {"otlpEndpoint": "http://otel.observability:4318", "sampleRatio": 0.1},
        }
    )
    args = router_args(REF, parse_routing({}), router)
    tail = args[args.index("--peers-service") + 2 :]
    assert tail == [
        "--max-in-flight-per-member",
        "8",
        "--max-wait-seconds",
        "2.5",
        "--otlp-endpoint",
        "http://otel.observability:4318",
        "--trace-sample-ratio",
        "0.1",
    ]


def test_api_keys_come_from_a_whole_secret_volume_and_reach_the_flags() -> None:
    from prefixroute.controller.builders.router import API_KEYS_DIR, API_KEYS_VOLUME
    from prefixroute.controller.spec.auth import parse_auth

    auth = parse_auth(
        {"apiKeysSecret": {"name": "acme-keys", "key": "tenants.yaml"}, "trustedFronts": ["10.0.0.0/8", "fd00::/8"]}
    )
    router = parse_router({"args": ["--access-log"]})
    args = router_args(REF, parse_routing({}), router, auth)
    assert args[-5:] == [
        "--api-keys",
        f"{API_KEYS_DIR}/tenants.yaml",
        "--trusted-fronts",
        "10.0.0.0/8,fd00::/8",
        "--access-log",
    ]
    template, digest = router_pod_template(REF, parse_routing({}), router, auth)
    pod = template["spec"]
    [volume] = [v for v in pod["volumes"] if v["name"] == API_KEYS_VOLUME]
    assert volume["secret"] == {"secretName": "acme-keys", "items": [{"key": "tenants.yaml", "path": "tenants.yaml"}]}
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == API_KEYS_VOLUME]
    assert mount == {
        "name": API_KEYS_VOLUME,
        "mountPath": API_KEYS_DIR,
        "readOnly": True,
    }  # no subPath: updates propagate
    deployment = router_deployment(REF, template, 2)
    assert kubernetes_errors(deployment) == []
    _, without = router_pod_template(REF, parse_routing({}), router)
    assert digest != without  # turning keys on rolls the routers


def test_a_front_gets_hub_access_only_for_a_hub_tokenizer() -> None:
    from prefixroute.controller.builders.router import TOKENIZER_CACHE_DIR, front_env, front_volumes
    from prefixroute.controller.precise import PreciseRouting
    from prefixroute.controller.spec.auth import AuthSpec

    token = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    hub = PreciseRouting(16, "acme/m", "acme/m", (), hub_env=(token,))
    folder = PreciseRouting(16, "m", "/models/m", ())
    assert front_env(hub)[-2:] == [{"name": "HF_HOME", "value": TOKENIZER_CACHE_DIR}, token]
    assert front_env(folder) == front_env(None)
    mounts, volumes = front_volumes(AuthSpec(), hub)
    assert TOKENIZER_CACHE_DIR in [m["mountPath"] for m in mounts]
    assert len(volumes) == 2
    assert len(front_volumes(AuthSpec(), folder)[1]) == 1


def test_the_engines_adapter_slots_reach_the_router_and_change_its_pods() -> None:
    from prefixroute.controller.spec.adapters import LoraSlots

    args = router_args(REF, parse_routing({}), parse_router({}), lora=LoraSlots(max_loras=3))
    assert args[args.index("--adapter-slots") + 1] == "3"
    assert "--adapter-slots" not in router_args(REF, parse_routing({}), parse_router({}))
    _, plain = router_pod_template(REF, parse_routing({}), parse_router({}))
    _, slotted = router_pod_template(REF, parse_routing({}), parse_router({}), lora=LoraSlots(max_loras=3))
    assert plain != slotted
