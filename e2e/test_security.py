"""Security on the local real control plane.

- A Secret's value reaches the engine (as an HF token would: `valueFrom.secretKeyRef` and
  `envFrom.secretRef`) and nowhere else: not in the operator's, router's or engines' logs,
  not in any Event, not in the resource's status or any child object the operator wrote.
- The router's ServiceAccount may do nothing beyond reading its own resource (more verbs
  than e2e/test_rbac.py asks, which covers the operator's and the router's main rules);
  engine pods carry no API token at all, router pods only their own.
- Pods run as the builders say: UID 65532, the restricted security context on every
  container of ours.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube
from e2e.test_faults import container_pid
from e2e.test_rbac import NS, _ask, _service_account

SA_TOKEN = "run/secrets/kubernetes.io/serviceaccount/token"  # /var/run is a link to /run


def _secret(kube: Kube, namespace: str, name: str, data: dict[str, str]) -> None:
    kube.post(
        f"/api/v1/namespaces/{namespace}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "type": "Opaque", "stringData": data},
    )


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def test_a_secret_reaches_the_engine_and_nothing_else(
    cluster: Cluster, kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    token, extra = f"hf_{secrets.token_hex(16)}", f"sk-{secrets.token_hex(16)}"
    _secret(kube, namespace, "hf-token", {"token": token})
    _secret(kube, namespace, "engine-env", {"EXTRA_TOKEN": extra})
    doc = product.sim_model("secretive", replicas=2)
    doc["spec"]["engine"]["env"] = [
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
    ]
    doc["spec"]["engine"]["envFrom"] = [{"secretRef": {"name": "engine-env"}}]
    product.create_model(kube, namespace, doc)
    product.wait_serving(kube, namespace, "secretive", 2)
    router = product.router_url(kube, namespace, "secretive")
    for i in range(10):  # traffic, so the logs have something to say
        assert product.completion(router, f"secret-free prompt {i} " * 20)[0] == 200
    # the scale path too: a second reconcile and ring change
    kube.patch(product.prm_path(namespace, "secretive"), {"spec": {"replicas": 3}}, kind="merge")
    product.wait_serving(kube, namespace, "secretive", 3)

    # The control: the values did reach the engine processes.
    engines = product.live(product.pods(kube, namespace, "secretive", "engine"))
    for pod in engines:
        env = _environ(container_pid(pod))
        assert env["HF_TOKEN"] == token
        assert env["EXTRA_TOKEN"] == extra

    places: dict[str, str] = {}
    op = product.operator_pods(kube)[0]
    for pod, ns in [(op, product.SYSTEM_NAMESPACE)] + [
        (p, namespace)
        for p in product.pods(kube, namespace, "secretive", "engine")
        + product.pods(kube, namespace, "secretive", "router")
    ]:
        for log in cluster.pod_log_dir(ns, pod).glob("*.log"):
            places[f"log {ns}/{pod['metadata']['name']}/{log.name}"] = log.read_text(errors="replace")
    for path in (f"/api/v1/namespaces/{namespace}/events", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events"):
        places[path] = json.dumps(kube.get(path))
    places["the resource"] = json.dumps(product.get_model(kube, namespace, "secretive"))
    for kind in ("deployments", "replicasets"):
        places[kind] = json.dumps(kube.get(f"/apis/apps/v1/namespaces/{namespace}/{kind}"))
    places["operator metrics"] = product.http("GET", f"http://{op['status']['podIP']}:8080/metrics")[2].decode()
    logs = [where for where, text in places.items() if where.startswith("log ") and text]
    assert any(f" {product.SYSTEM_NAMESPACE}/" in w for w in logs), logs
    assert len(logs) >= 1 + 3 + 1, logs  # operator, engines, router
    assert "secretive" in places["the resource"]
    assert any("Applied" in text for text in places.values())  # the Events were read
    leaks = [where for where, text in places.items() if token in text or extra in text]
    assert leaks == [], leaks
    # the Deployment names the Secrets, never their values
    engine = kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/secretive-engine")
    container = engine["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}} in container["env"]


ROUTER_MAY_NOT = [
    ("create", "", "pods", NS, ""),
    ("create", "", "pods/exec", NS, "any"),
    ("get", "", "pods/log", NS, "any"),
    ("list", "", "secrets", NS, ""),
    ("watch", "", "secrets", NS, ""),
    ("get", "", "configmaps", NS, "any"),
    ("create", "", "events", NS, ""),
    ("create", "", "serviceaccounts/token", NS, "alpha-router"),
    ("update", "prefixroute.io", "prefixroutedmodels", NS, "alpha"),
    ("delete", "prefixroute.io", "prefixroutedmodels", NS, "alpha"),
    ("update", "prefixroute.io", "prefixroutedmodels/status", NS, "alpha"),
    ("list", "prefixroute.io", "prefixroutedmodels", "", ""),
    ("watch", "prefixroute.io", "prefixroutedmodels", "", ""),
    ("get", "prefixroute.io", "prefixroutedmodels/scale", NS, "alpha"),
    ("update", "prefixroute.io", "prefixroutedmodels/scale", NS, "alpha"),
    ("patch", "apps", "deployments", NS, "alpha-engine"),
    ("get", "", "nodes", "", "kwok-gpu-0"),
    ("list", "", "namespaces", "", ""),
    ("create", "rbac.authorization.k8s.io", "rolebindings", NS, ""),
    ("patch", "rbac.authorization.k8s.io", "roles", NS, "alpha-router"),
    ("impersonate", "", "serviceaccounts", NS, "alpha-router"),
]


def test_router_and_engine_identities_have_least_privilege(
    kube: Kube, namespace: str, operator: dict[str, Any]
) -> None:
    product.create_model(kube, namespace, product.sim_model("alpha", replicas=1))
    product.wait_serving(kube, namespace, "alpha", 1)
    router_sa = _service_account(namespace, "alpha-router")
    assert _ask(kube, router_sa, ("get", "prefixroute.io", "prefixroutedmodels", NS, "alpha"), namespace)  # control
    assert [r for r in ROUTER_MAY_NOT if _ask(kube, router_sa, r, namespace)] == []

    # Engines never call the API server: no token in their pods or their processes' file systems.
    (engine,) = product.live(product.pods(kube, namespace, "alpha", "engine"))
    assert engine["spec"]["automountServiceAccountToken"] is False
    assert not any("kube-api-access" in v["name"] for v in engine["spec"].get("volumes", []))
    assert not Path(f"/proc/{container_pid(engine)}/root/{SA_TOKEN}").exists()
    (router,) = product.live(product.pods(kube, namespace, "alpha", "router"))
    assert Path(f"/proc/{container_pid(router)}/root/{SA_TOKEN}").exists()  # control: the router has its own
    # ... and it is the router's ServiceAccount, not the namespace default
    assert router["spec"]["serviceAccountName"] == "alpha-router"


def test_our_pods_run_non_root_and_restricted(kube: Kube, namespace: str, operator: dict[str, Any]) -> None:
    product.create_model(kube, namespace, product.sim_model("tight", replicas=1))
    product.wait_serving(kube, namespace, "tight", 1)
    for component in ("engine", "router"):
        (pod,) = product.live(product.pods(kube, namespace, "tight", component))
        (container,) = pod["spec"]["containers"]
        sc = container["securityContext"]
        assert sc["runAsNonRoot"]
        assert sc["runAsUser"] == 65532
        assert sc["readOnlyRootFilesystem"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        status = Path(f"/proc/{container_pid(pod)}/status").read_text()
        uid_line = next(line for line in status.splitlines() if line.startswith("Uid:"))
        assert uid_line.split()[1:3] == ["65532", "65532"], uid_line
