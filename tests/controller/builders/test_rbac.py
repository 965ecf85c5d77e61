from prefixroute.controller.builders.rbac import router_role, router_role_binding, router_service_account
from prefixroute.controller.names import COMPONENT_EPP
from prefixroute.controller.spec.model import ModelRef
from tests.controller.schema import kubernetes_errors

REF = ModelRef("chat", "tenants", "uid-2", 1)


def test_router_may_read_only_its_own_resource_and_where_its_peers_are() -> None:
    role = router_role(REF)
    assert kubernetes_errors(role) == []
    assert role["rules"] == [
        {
            "apiGroups": ["prefixroute.io"],
            "resources": ["prefixroutedmodels"],
            "resourceNames": ["chat"],
            "verbs": ["get", "list", "watch"],
        },
        {
            "apiGroups": ["prefixroute.io"],
            "resources": ["prefixroutedmodels/status"],
            "resourceNames": ["chat"],
            "verbs": ["get"],
        },
        {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
    ]


def test_the_picker_may_also_read_its_namespaces_inference_objectives() -> None:
    role = router_role(REF, COMPONENT_EPP)
    assert kubernetes_errors(role) == []
    assert role["metadata"]["name"] == "chat-epp"
    assert role["rules"][:-1] == router_role(REF)["rules"]
    assert role["rules"][-1] == {
        "apiGroups": ["inference.networking.x-k8s.io"],
        "resources": ["inferenceobjectives"],
        "verbs": ["get", "list"],
    }


def test_binding_ties_the_role_to_the_routers_service_account() -> None:
    account, binding = router_service_account(REF), router_role_binding(REF)
    assert kubernetes_errors(account) == []
    assert kubernetes_errors(binding) == []
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "chat-router"}
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": "tenants"}
    ]
