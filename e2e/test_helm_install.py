"""Installing with Helm, as docs/install.md says, on the real API server.

`helm install` of charts/prefixroute (watching one namespace, both namespaces under Pod
Security "restricted") installs the CRDs from the chart's crds/, the operator becomes
Ready with two replicas in one kopf peering, and the engine-sim example is reconciled and
serves through its router. With the Prometheus Operator's API present (minimal CRDs of our
own stand in for it) the PodMonitors and the PrometheusRule are installed. Nothing the
operator does makes the example differ from what was applied (`kubectl diff
--server-side` exits 0; only the status is written by anyone else). The dashboard's
queries run on the cluster's Prometheus and find the routers' and engines' series.
`helm upgrade` rolls the operator; `helm uninstall` removes everything but the CRDs.
"""

from __future__ import annotations

import json
import re
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from e2e import pins
from e2e.conftest import Cluster, wait_for
from e2e.kube import ApiError, Kube
from e2e.product import uninstall_operator
from e2e.waiting import absent

CHART = pins.REPO_ROOT / "charts" / "prefixroute"
DEMO = pins.REPO_ROOT / "manifests" / "examples" / "engine-sim-demo.yaml"
DASHBOARD = CHART / "dashboards" / "prefixroute.json"
RELEASE = "pr-helm"
OPERATOR = f"{RELEASE}-prefixroute-operator"
CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/prefixroutedmodels.prefixroute.io"
MONITORING_CRDS = {"podmonitors": "PodMonitor", "prometheusrules": "PrometheusRule"}
RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}


@dataclass(frozen=True)
class Release:
    system: str  # where the chart is installed
    models: str  # the namespace the operator watches

    @property
    def demo(self) -> str:
        return f"/apis/prefixroute.io/v1alpha1/namespaces/{self.models}/prefixroutedmodels/demo"


def _monitoring_crd(plural: str, kind: str) -> dict[str, Any]:
    """A stand-in for the Prometheus Operator's CRD: the same group, version and names, any content."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com", "labels": {"e2e.prefixroute.io/stand-in": "true"}},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind, "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                }
            ],
        },
    }


def _established(kube: Kube, name: str) -> bool:
    crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    return any(
        c["type"] == "Established" and c["status"] == "True" for c in crd.get("status", {}).get("conditions", [])
    )


def _namespace(kube: Kube, name: str) -> None:
    kube.post(
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": RESTRICTED}},
    )
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default"), 30, what=f"{name}/default")


def _delete(kube: Kube, path: str) -> None:
    try:
        kube.delete(path)
    except ApiError as e:
        if e.status != 404:
            raise


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == kind), {})


@pytest.fixture(scope="module")
def release(cluster: Cluster, kube: Kube) -> Iterator[Release]:
    # One operator at a time: an install of another test (kustomize, every namespace) would
    # reconcile our models too. Its CRDs go with it, so the chart's crds/ are what we test.
    uninstall_operator(cluster.kubectl, kube, timeout=180)
    wait_for(
        lambda: absent(kube, CRD) and absent(kube, "/api/v1/namespaces/prefixroute-system"),
        120,
        what="a previous operator install gone",
    )
    suffix = uuid.uuid4().hex[:5]
    rel = Release(system=f"e2e-helm-system-{suffix}", models=f"e2e-helm-models-{suffix}")
    created_crds = []
    for plural, kind in MONITORING_CRDS.items():
        name = f"{plural}.monitoring.coreos.com"
        if absent(kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"):
            kube.post("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", _monitoring_crd(plural, kind))
            created_crds.append(name)
        wait_for(lambda name=name: _established(kube, name), 30, what=f"{name} Established")
    wait_for(
        lambda: "monitoring.coreos.com/v1" in cluster.kubectl("api-versions").stdout.split(),
        30,
        what="discovery to serve monitoring.coreos.com/v1",
    )
    _namespace(kube, rel.system)
    _namespace(kube, rel.models)
    try:
        cluster.helm(
            "install",
            RELEASE,
            str(CHART),
            "--namespace",
            rel.system,
            "--set",
            f"watchNamespaces={{{rel.models}}}",
            "--set",
            f"peering.name={RELEASE}",
            "--wait",
            "--timeout",
            "180s",
            timeout=240,
        )
        yield rel
    finally:
        cluster.helm("uninstall", RELEASE, "--namespace", rel.system, "--wait", "--timeout", "120s", check=False)
        for path in (
            rel.demo,
            f"/api/v1/namespaces/{rel.models}",
            f"/api/v1/namespaces/{rel.system}",
            CRD,
            *(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}" for n in created_crds),
        ):
            _delete(kube, path)
        wait_for(lambda: absent(kube, CRD), 120, what="the PrefixRoutedModel CRD deleted")


def test_operator_is_ready_with_two_replicas_in_one_peering(cluster: Cluster, kube: Kube, release: Release) -> None:
    deployment = kube.get(f"/apis/apps/v1/namespaces/{release.system}/deployments/{OPERATOR}")
    assert deployment["spec"]["replicas"] == 2
    assert deployment["status"].get("readyReplicas") == 2
    assert _established(kube, "prefixroutedmodels.prefixroute.io")  # from the chart's crds/
    pods = kube.get(f"/api/v1/namespaces/{release.system}/pods", labelSelector="app.kubernetes.io/component=operator")[
        "items"
    ]
    assert len(pods) == 2
    for pod in pods:
        assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
        assert pod["spec"]["securityContext"]["runAsNonRoot"] is True  # admitted under "restricted"
    peering = f"/apis/kopf.dev/v1/namespaces/{release.models}/kopfpeerings/{RELEASE}"
    wait_for(lambda: len(kube.get(peering).get("status") or {}) == 2, 60, what="both replicas in the peering")
    history = json.loads(cluster.helm("history", RELEASE, "--namespace", release.system, "-o", "json").stdout)
    assert history[-1]["status"] == "deployed"


def test_chart_objects_with_the_prometheus_operator_api(kube: Kube, release: Release) -> None:
    monitors = kube.get(f"/apis/monitoring.coreos.com/v1/namespaces/{release.system}/podmonitors")["items"]
    assert sorted(m["metadata"]["name"] for m in monitors) == [
        f"{RELEASE}-prefixroute-engines",
        OPERATOR,
        f"{RELEASE}-prefixroute-routers",
    ]
    rules = kube.get(f"/apis/monitoring.coreos.com/v1/namespaces/{release.system}/prometheusrules")["items"]
    assert next(r["alert"] for r in rules[0]["spec"]["groups"][0]["rules"]) == "PrefixRouteHitRateDropped"
    dashboard = kube.get(f"/api/v1/namespaces/{release.system}/configmaps/{RELEASE}-prefixroute-dashboard-prefixroute")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    policy = kube.get(
        f"/apis/networking.k8s.io/v1/namespaces/{release.models}/networkpolicies/{RELEASE}-prefixroute-engines"
    )
    assert policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "engine"
    role = kube.get(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{release.models}/roles/{OPERATOR}")
    assert any("kopfpeerings" in r["resources"] for r in role["rules"])
    assert absent(
        kube, f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{OPERATOR}"
    )  # namespaced mode: no ClusterRole


def _router_url(kube: Kube, release: Release) -> str:
    service = kube.get(f"/api/v1/namespaces/{release.models}/services/demo-router")
    return f"http://{service['spec']['clusterIP']}:{service['spec']['ports'][0]['port']}"


def _complete(url: str, prompt: str) -> dict[str, Any]:
    body = json.dumps({"model": "demo-llm", "prompt": prompt, "max_tokens": 4}).encode()
    request = urllib.request.Request(f"{url}/v1/completions", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200
        return json.load(response)


def test_operator_reconciles_the_engine_sim_example_and_it_serves(
    cluster: Cluster, kube: Kube, release: Release
) -> None:
    cluster.kubectl("apply", "--server-side", "-n", release.models, "-f", str(DEMO))

    def serving() -> dict[str, Any] | None:  # Ready turns True with the first engine in the ring
        demo = kube.get(release.demo)
        full = demo["status"].get("readyReplicas") == 3 and len(demo["status"].get("ring", {}).get("members", [])) == 3
        return demo if condition(demo, "Ready").get("status") == "True" and full else None

    demo = wait_for(serving, 120, what="demo Ready with 3 engines in the ring")
    assert condition(demo, "Degraded").get("status") == "False"
    engines = kube.get(
        f"/api/v1/namespaces/{release.models}/pods",
        labelSelector="prefixroute.io/model=demo,app.kubernetes.io/component=engine",
    )["items"]
    assert len(engines) == 3  # admitted under Pod Security "restricted" too
    url = wait_for(lambda: _router_url(kube, release), 30)
    shared = "You are a helpful assistant. " * 40  # a shared prefix, several KV blocks long
    answers = [wait_for(lambda: _complete(url, shared + "Question 0?"), 30, what="the router answers")]
    answers += [_complete(url, shared + f"Question {i}?") for i in range(1, 12)]
    assert all(a["object"] == "text_completion" and a["choices"] for a in answers)


def test_nothing_drifts_from_what_was_applied(cluster: Cluster, kube: Kube, release: Release) -> None:
    """GitOps: the operator writes status only; defaults came from the CRD schema at admission."""
    diff = cluster.kubectl("diff", "--server-side", "-n", release.models, "-f", str(DEMO), check=False)
    assert diff.returncode == 0, diff.stdout + diff.stderr
    out = cluster.kubectl("get", "prm", "demo", "-n", release.models, "-o", "json", "--show-managed-fields")
    demo = json.loads(out.stdout)
    for entry in demo["metadata"]["managedFields"]:
        if entry["manager"] != "kubectl":
            assert entry.get("subresource") == "status", entry  # nobody but the user writes spec or metadata
    assert not demo["metadata"].get("finalizers")
    assert set(demo["metadata"].get("annotations") or {}) == set()


def _dashboard_queries(namespace: str) -> list[tuple[str, str]]:
    dashboard = json.loads(DASHBOARD.read_text())
    values = {"namespace": namespace, "model": "demo", "__rate_interval": "1m", "__interval": "15s"}

    def interpolate(expr: str) -> str:
        return re.sub(r"\$\{?(\w+)\}?", lambda m: values.get(m.group(1), ".*"), expr)

    return [
        (f"{p['title']} {t['refId']}", interpolate(t["expr"]))
        for p in dashboard["panels"]
        for t in p.get("targets", [])
    ]


def test_dashboard_queries_run_on_prometheus_and_find_the_series(
    cluster: Cluster, kube: Kube, release: Release
) -> None:
    queries = dict(_dashboard_queries(release.models))
    # Traffic inside the panels' 1m rate window: the earlier tests' requests may have left it on a
    # loaded machine, and a rate of nothing over nothing is NaN.
    url = _router_url(kube, release)
    shared = "You are a helpful assistant. " * 40
    for i in range(6):
        _complete(url, shared + f"Dashboard question {i}?")
    must_have_data = [
        "Hit rate (engines) A",
        "Match ratio (router) A",
        "TTFT p50 (engines) A",
        "Ready replicas in the ring A",
        "Requests per engine replica A",
        "Router answers by status A",
        "Load imbalance (max / mean) A",
        "Queue per engine replica A",
    ]
    assert set(must_have_data) <= set(queries)

    def all_found() -> bool:
        # One more request per look: on a loaded machine a scrape can come late, and the panels'
        # 1m rate windows must still hold requests when it does.
        _complete(url, shared + "Dashboard question, once more?")
        missing = [name for name in must_have_data if not cluster.prometheus_query(queries[name])]
        hit = cluster.prometheus_query(queries["Hit rate (engines) A"])
        if hit and not 0 < float(hit[0]["value"][1]) <= 1:  # NaN until a scrape sees the requests
            missing.append(f"Hit rate (engines) A: a rate, not {hit[0]['value'][1]}")
        if missing:
            raise AssertionError(f"no data yet: {missing}")  # wait_for reports the last one
        return True

    wait_for(all_found, 120, interval=2, what="the dashboard's main panels to have data")
    for _name, query in queries.items():
        cluster.prometheus_query(query)  # every query is valid PromQL for the real Prometheus
    ring = cluster.prometheus_query(queries["Ready replicas in the ring A"])
    assert float(ring[0]["value"][1]) == 3
    hit_rate = float(cluster.prometheus_query(queries["Hit rate (engines) A"])[0]["value"][1])
    assert 0 < hit_rate <= 1  # the shared prefix was served from the engines' caches


def test_helm_upgrade_rolls_the_operator_and_keeps_serving(cluster: Cluster, kube: Kube, release: Release) -> None:
    cluster.helm(
        "upgrade",
        RELEASE,
        str(CHART),
        "--namespace",
        release.system,
        "--reuse-values",
        "--set",
        "logLevel=debug",
        "--wait",
        "--timeout",
        "180s",
        timeout=240,
    )
    deployment = kube.get(f"/apis/apps/v1/namespaces/{release.system}/deployments/{OPERATOR}")
    assert "--verbose" in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert deployment["status"].get("updatedReplicas") == 2
    assert deployment["status"].get("readyReplicas") == 2
    manifest = cluster.helm("get", "manifest", RELEASE, "--namespace", release.system).stdout
    assert {d["kind"] for d in yaml.safe_load_all(manifest) if d} >= {"Deployment", "PodMonitor", "NetworkPolicy"}
    assert condition(kube.get(release.demo), "Ready").get("status") == "True"


def test_helm_uninstall_removes_everything_but_the_crds(cluster: Cluster, kube: Kube, release: Release) -> None:
    cluster.helm("uninstall", RELEASE, "--namespace", release.system, "--wait", "--timeout", "120s")
    for path in (
        f"/apis/apps/v1/namespaces/{release.system}/deployments/{OPERATOR}",
        f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{OPERATOR}-discovery",
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{release.models}/roles/{OPERATOR}",
        f"/apis/kopf.dev/v1/namespaces/{release.models}/kopfpeerings/{RELEASE}",
        f"/apis/monitoring.coreos.com/v1/namespaces/{release.system}/podmonitors/{OPERATOR}",
    ):
        assert absent(kube, path), path
    assert not absent(kube, CRD)  # Helm never deletes what crds/ installed: the models stay
    assert not absent(kube, release.demo)
