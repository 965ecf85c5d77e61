from prefixroute.controller.builders.service import engine_service, router_endpoint, router_service
from prefixroute.controller.spec.engine import parse_engine
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.router import parse_router
from tests.controller.schema import kubernetes_errors

REF = ModelRef("chat", "tenants", "uid-2", 1)


def test_engine_service_is_headless_over_the_engines() -> None:
    service = engine_service(REF, parse_engine({"kind": "sim", "model": "m", "port": 9000}))
    assert kubernetes_errors(service) == []
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "engine"
    assert service["spec"]["ports"] == [{"name": "http", "port": 9000, "targetPort": "http", "protocol": "TCP"}]


def test_router_service_type_port_node_port_and_annotations() -> None:
    router = parse_router(
        {
            "serviceType": "LoadBalancer",
            "port": 443,
            "nodePort": 30443,
            "serviceAnnotations": {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"},
        }
    )
    service = router_service(REF, router)
    assert kubernetes_errors(service) == []
    assert service["metadata"]["name"] == "chat-router"
    assert service["metadata"]["annotations"] == {"service.beta.kubernetes.io/aws-load-balancer-type": "nlb"}
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 443, "targetPort": "http", "protocol": "TCP", "nodePort": 30443}
    ]
    assert router_endpoint(REF, router) == "http://chat-router.tenants.svc:443"
