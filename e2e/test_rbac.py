"""Least privilege, asked of the API server's own authorizer (SubjectAccessReview) for the
identities the manifests and the operator create: the operator's ServiceAccount may do
what reconciling needs and nothing more, and each router may read only its own resource.
A real token of the operator's ServiceAccount confirms the answers on actual requests.
"""

from __future__ import annotations

from typing import Any

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube, status_as

NS = "{ns}"  # stands for the test's namespace: any namespace a model lives in

OPERATOR_MAY = [
    # (verb, group, resource, namespace or "" for cluster-wide, name)
    ("list", "prefixroute.io", "prefixroutedmodels", "", ""),
    ("watch", "prefixroute.io", "prefixroutedmodels", "", ""),
    ("patch", "prefixroute.io", "prefixroutedmodels/status", NS, "m"),
    ("list", "", "pods", "", ""),
    ("watch", "", "pods", "", ""),
    ("create", "apps", "deployments", NS, ""),
    ("patch", "apps", "deployments", NS, "m-engine"),
    ("watch", "apps", "deployments", "", ""),
    ("create", "", "services", NS, ""),
    ("patch", "", "services", NS, "m-router"),
    ("create", "", "serviceaccounts", NS, ""),
    ("create", "policy", "poddisruptionbudgets", NS, ""),
    ("create", "networking.k8s.io", "networkpolicies", NS, ""),
    ("delete", "networking.k8s.io", "networkpolicies", NS, "m-engine"),
    ("patch", "inference.networking.k8s.io", "inferencepools", NS, "m"),  # spec.gateway
    ("delete", "inference.networking.k8s.io", "inferencepools", NS, "m"),  # spec.gateway turned off
    ("create", "rbac.authorization.k8s.io", "roles", NS, ""),
    ("create", "rbac.authorization.k8s.io", "rolebindings", NS, ""),
    ("create", "", "events", NS, ""),
    ("create", "events.k8s.io", "events", NS, ""),
    ("list", "", "events", NS, ""),  # spec.auth: the kubelets' FailedMount events of router pods
    ("get", "", "pods/log", NS, "m-fetch-abc123-x"),  # a model cache's download progress
    ("list", "discovery.k8s.io", "endpointslices", NS, ""),  # granted to the fronts: where their peers are
    ("get", "", "secrets", NS, "prometheus-ca"),  # spec.autoscaling.prometheusTLS.ca, by name
    ("get", "", "configmaps", NS, "prometheus-ca"),  # the same from a ConfigMap
    ("patch", "kopf.dev", "clusterkopfpeerings", "", "prefixroute"),
    ("watch", "apiextensions.k8s.io", "customresourcedefinitions", "", ""),
    ("list", "", "namespaces", "", ""),
]

OPERATOR_MAY_NOT = [
    ("list", "", "secrets", NS, ""),
    ("list", "", "secrets", "", ""),
    ("watch", "", "secrets", "", ""),
    ("list", "", "configmaps", NS, ""),
    ("watch", "", "configmaps", "", ""),
    ("patch", "", "secrets", NS, "prometheus-ca"),
    ("delete", "", "nodes", "", "kwok-gpu-0"),
    ("patch", "", "nodes", "", "kwok-gpu-0"),
    ("create", "", "pods", NS, ""),
    ("delete", "", "pods", NS, "any"),
    ("create", "", "pods/exec", NS, "any"),
    ("create", "", "serviceaccounts/token", NS, "m-router"),
    ("delete", "apps", "deployments", NS, "m-engine"),
    ("create", "", "namespaces", "", ""),
    ("delete", "", "namespaces", "", NS),
    ("create", "prefixroute.io", "prefixroutedmodels", NS, ""),
    ("delete", "prefixroute.io", "prefixroutedmodels", NS, "m"),
    ("create", "rbac.authorization.k8s.io", "clusterroles", "", ""),
    ("create", "rbac.authorization.k8s.io", "clusterrolebindings", "", ""),
    ("escalate", "rbac.authorization.k8s.io", "roles", NS, "any"),
    ("bind", "rbac.authorization.k8s.io", "clusterroles", "", "cluster-admin"),
    ("impersonate", "", "serviceaccounts", NS, "default"),
    ("create", "apiextensions.k8s.io", "customresourcedefinitions", "", ""),
    ("delete", "apiextensions.k8s.io", "customresourcedefinitions", "", "prefixroutedmodels.prefixroute.io"),
    ("create", "admissionregistration.k8s.io", "mutatingwebhookconfigurations", "", ""),
]


def allowed(
    kube: Kube, user: str, groups: list[str], verb: str, group: str, resource: str, namespace: str, name: str
) -> bool:
    resource, _, subresource = resource.partition("/")
    attributes = {
        "verb": verb,
        "group": group,
        "resource": resource,
        "subresource": subresource,
        "namespace": namespace,
        "name": name,
    }
    review = kube.post(
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {"user": user, "groups": groups, "resourceAttributes": {k: v for k, v in attributes.items() if v}},
        },
    )
    return bool(review["status"].get("allowed"))


def _service_account(namespace: str, name: str) -> tuple[str, list[str]]:
    return (
        f"system:serviceaccount:{namespace}:{name}",
        ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
    )


def _ask(kube: Kube, who: tuple[str, list[str]], rule: tuple[str, ...], namespace: str) -> bool:
    verb, group, resource, ns, name = (x.replace(NS, namespace) for x in rule)
    return allowed(kube, *who, verb, group, resource, ns, name)


def test_operator_service_account_may_do_what_it_needs_and_no_more(
    kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    who = _service_account(product.SYSTEM_NAMESPACE, product.OPERATOR)
    missing = [rule for rule in OPERATOR_MAY if not _ask(kube, who, rule, namespace)]
    excess = [rule for rule in OPERATOR_MAY_NOT if _ask(kube, who, rule, namespace)]
    assert missing == [], f"the operator lacks {missing}"
    assert excess == [], f"the operator may {excess}"


def test_operator_token_is_refused_secrets_on_real_requests(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    token = kube.post(
        f"/api/v1/namespaces/{product.SYSTEM_NAMESPACE}/serviceaccounts/{product.OPERATOR}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 600},
        },
    )["status"]["token"]

    def status(path: str) -> int:
        return status_as(cluster.server, str(cluster.ca), token, path)

    assert status(f"/apis/prefixroute.io/v1alpha1/{product.PLURAL}") == 200
    assert status("/api/v1/pods") == 200
    assert status("/api/v1/namespaces/kube-system/secrets") == 403
    assert status(f"/api/v1/namespaces/{namespace}/secrets") == 403
    assert status("/api/v1/secrets") == 403
    assert status("/api/v1/nodes") == 403


def test_router_may_read_only_its_own_resource_and_its_peers(
    kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    product.create_model(kube, namespace, product.sim_model("alpha", replicas=1))
    product.wait_serving(kube, namespace, "alpha", 1)  # the router runs with this identity
    who = _service_account(namespace, "alpha-router")
    may = [
        ("get", "prefixroute.io", "prefixroutedmodels", NS, "alpha"),
        ("watch", "prefixroute.io", "prefixroutedmodels", NS, "alpha"),
        ("get", "prefixroute.io", "prefixroutedmodels/status", NS, "alpha"),
        ("list", "discovery.k8s.io", "endpointslices", NS, ""),  # its peers: its Service's endpoints
        ("watch", "discovery.k8s.io", "endpointslices", NS, ""),
    ]
    may_not = [
        ("get", "prefixroute.io", "prefixroutedmodels", NS, "beta"),
        ("list", "prefixroute.io", "prefixroutedmodels", NS, ""),
        ("patch", "prefixroute.io", "prefixroutedmodels", NS, "alpha"),
        ("patch", "prefixroute.io", "prefixroutedmodels/status", NS, "alpha"),
        ("get", "prefixroute.io", "prefixroutedmodels", "default", "alpha"),
        ("list", "", "pods", NS, ""),
        ("get", "", "secrets", NS, "any"),
        ("list", "discovery.k8s.io", "endpointslices", "default", ""),  # only in its own namespace
    ]
    assert [r for r in may if not _ask(kube, who, r, namespace)] == []
    assert [r for r in may_not if _ask(kube, who, r, namespace)] == []


def test_an_unbound_service_account_gets_nothing(kube: Kube, namespace: str, operator: dict[str, Any]) -> None:
    # The control: an identity nobody bound is refused what the operator may, so the answers above mean something.
    who = _service_account(namespace, "default")
    assert [r for r in OPERATOR_MAY if _ask(kube, who, r, namespace)] == []
