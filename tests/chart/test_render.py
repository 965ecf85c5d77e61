"""What `helm template` renders: valid objects for the supported Kubernetes versions, an
operator Deployment that mirrors manifests/ and runs the operator's real command line,
RBAC equal to the kustomize RBAC, Pod Security "restricted", and NetworkPolicy and
PodMonitor selectors that match the pods the operator really creates."""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from prefixroute import __version__
from prefixroute.controller import cli as operator_cli
from prefixroute.controller.builders.rbac import router_role
from prefixroute.controller.plan import plan_for
from prefixroute.controller.spec.model import ModelRef
from prefixroute.crd import API_VERSION
from tests.chart import tools
from tests.chart.render import CHART, NAMESPACE, ROOT, every, kinds, one, template
from tests.controller.schema import admit

MANIFESTS = ROOT / "manifests"
KUBE_VERSIONS = ("1.30.0", "1.35.0")
"""The oldest version the chart supports (Chart.yaml kubeVersion) and the newest we run (e2e)."""

EVERYTHING = {
    "image": {
        "repository": "registry.example.com/prefixroute/prefixroute",
        "digest": "sha256:" + "a" * 64,
        "pullPolicy": "Always",
    },
    "imagePullSecrets": [{"name": "regcred"}],
    "replicas": 3,
    "watchNamespaces": ["team-a", "team-b"],
    "logLevel": "debug",
    "prometheusURL": "http://prometheus.monitoring:9090",
    "nodeSelector": {"kubernetes.io/os": "linux"},
    "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "control", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}
                ]
            }
        }
    },
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": "operator"}},
        }
    ],
    "podAnnotations": {"example.com/team": "ml"},
    "podLabels": {"example.com/cost-center": "42"},
    "priorityClassName": "system-cluster-critical",
    "extraArgs": ["--priority", "100"],
    "extraEnv": [{"name": "TZ", "value": "UTC"}],
    "serviceAccount": {"annotations": {"example.com/role": "operator"}},
    "monitoring": {
        "podMonitors": {"labels": {"release": "kube-prometheus-stack"}},
        "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}},
        "dashboards": {"namespace": "monitoring", "annotations": {"grafana_folder": "LLM"}},
    },
    "networkPolicy": {
        "namespaces": ["team-a"],
        "extraFrom": [{"namespaceSelector": {"matchLabels": {"debug": "true"}}}],
    },
}
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "namespaced": {"watchNamespaces": ["team-a", "team-b"]},
    "standalone": {"replicas": 1, "peering": {"enabled": False}},
    "existing-identity": {"serviceAccount": {"create": False, "name": "my-operator"}, "rbac": {"create": False}},
    "no-operator-metrics": {"operatorMetrics": {"enabled": False}},
    "everything": EVERYTHING,
}

# -- schemas of the objects kubernetes-validate does not know ------------------------------

_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "matchLabels": {"type": "object", "additionalProperties": {"type": "string"}},
        "matchExpressions": {"type": "array"},
    },
}
_META = {"type": "object", "required": ["name", "namespace"]}
MONITORING_SCHEMAS = {
    # The fields of the Prometheus Operator's monitoring.coreos.com/v1 API this chart uses
    # (from its API reference), strict, so a misspelt field fails here.
    "PodMonitor": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["selector", "podMetricsEndpoints"],
                "properties": {
                    "selector": _SELECTOR,
                    "namespaceSelector": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "any": {"type": "boolean"},
                            "matchNames": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "podMetricsEndpoints": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["port"],
                            "properties": {
                                "port": {"type": "string"},
                                "path": {"type": "string"},
                                "honorLabels": {"type": "boolean"},
                                "interval": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                                "scrapeTimeout": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h))+$"},
                                "relabelings": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "properties": {
                                            "sourceLabels": {
                                                "type": "array",
                                                "items": {"type": "string", "pattern": "^[a-zA-Z_][a-zA-Z0-9_]*$"},
                                            },
                                            "regex": {"type": "string"},
                                            "targetLabel": {"type": "string"},
                                            "replacement": {"type": "string"},
                                            "action": {"type": "string"},
                                        },
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    "PrometheusRule": {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata", "spec"],
        "properties": {
            "metadata": _META,
            "spec": {
                "type": "object",
                "additionalProperties": False,
                "required": ["groups"],
                "properties": {
                    "groups": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string"},
                                "interval": {"type": "string"},
                                "rules": {
                                    "type": "array",
                                    "items": {
                                        "type": "object",
                                        "additionalProperties": False,
                                        "required": ["expr"],
                                        "properties": {
                                            "alert": {"type": "string"},
                                            "record": {"type": "string"},
                                            "expr": {"type": "string"},
                                            "for": {"type": "string", "pattern": "^([0-9]+(ms|s|m|h|d|w|y))+$"},
                                            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                                            "annotations": {
                                                "type": "object",
                                                "additionalProperties": {"type": "string"},
                                            },
                                        },
                                    },
                                },
                            },
                        },
                    }
                },
            },
        },
    },
}


def _crd_schemas() -> dict[str, dict[str, Any]]:
    """The kopf peering CRs are checked against the chart's own CRDs."""
    schemas = {}
    for path in (CHART / "crds").glob("*.yaml"):
        for crd in yaml.safe_load_all(path.read_text()):
            if crd:
                schemas[crd["spec"]["names"]["kind"]] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schemas


def validation_errors(obj: dict[str, Any], version: str) -> list[str]:
    import kubernetes_validate
    from kubernetes_validate.utils import ValidationError

    kind = obj["kind"]
    schema = MONITORING_SCHEMAS.get(kind) or _crd_schemas().get(kind)
    if schema is not None:
        return [f"{kind}: {e.message} at {list(e.path)}" for e in jsonschema.Draft7Validator(schema).iter_errors(obj)]
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except ValidationError as exc:
        return [f"{kind} {obj['metadata']['name']}: {'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    return []


@pytest.mark.parametrize("version", KUBE_VERSIONS)
@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_rendered_objects_are_valid_kubernetes(name: str, version: str) -> None:
    docs = template(VALUE_SETS[name], monitoring=True, kube_version=version)
    assert docs
    errors = [e for d in docs for e in validation_errors(d, version)]
    assert errors == []


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_helm_lint_strict_is_clean(name: str, tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(json.dumps(VALUE_SETS[name]))
    out = subprocess.run(
        [tools.helm(), "lint", "--strict", str(CHART), "--namespace", NAMESPACE, "-f", str(values)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    problems = [line for line in out.stdout.splitlines() if line.startswith(("[WARNING]", "[ERROR]"))]
    assert problems == []


def test_every_object_is_labelled_and_namespaced_explicitly() -> None:
    docs = template(VALUE_SETS["everything"], monitoring=True)
    cluster_scoped = {"ClusterRole", "ClusterRoleBinding", "ClusterKopfPeering"}
    for doc in docs:
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/part-of"] == "prefixroute"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
        assert ("namespace" in doc["metadata"]) == (doc["kind"] not in cluster_scoped), (doc["kind"], doc["metadata"])


def test_default_install_objects() -> None:
    assert kinds(template()) == [
        ("ClusterKopfPeering", "prefixroute"),
        ("ClusterRole", "prefixroute-operator"),
        ("ClusterRole", "prefixroute-operator-discovery"),
        ("ClusterRoleBinding", "prefixroute-operator"),
        ("ClusterRoleBinding", "prefixroute-operator-discovery"),
        ("ConfigMap", "prefixroute-dashboard-prefixroute"),
        ("Deployment", "prefixroute-operator"),
        ("PodDisruptionBudget", "prefixroute-operator"),
        ("ServiceAccount", "prefixroute-operator"),
    ]


# -- the operator Deployment ---------------------------------------------------------------


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]


def _kustomize(overlay: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [tools.kubectl(), "kustomize", str(MANIFESTS / "overlays" / overlay)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


@pytest.mark.parametrize(
    ("overlay", "values"),
    [
        ("all-namespaces", {}),
        ("single-namespace", {"watchNamespaces": ["prefixroute-models"]}),
    ],
)
def test_deployment_mirrors_the_kustomize_operator(overlay: str, values: dict[str, Any]) -> None:
    chart = template(values)
    ours, theirs = _container(chart), _container(_kustomize(overlay))
    for field in ("args", "env", "ports", "livenessProbe", "readinessProbe", "resources", "image"):
        assert ours[field] == theirs[field], field
    assert theirs["securityContext"].items() <= ours["securityContext"].items()
    pod, their_pod = (
        one(chart, "Deployment")["spec"]["template"]["spec"],
        one(_kustomize(overlay), "Deployment")["spec"]["template"]["spec"],
    )
    assert their_pod["securityContext"].items() <= pod["securityContext"].items()
    assert pod["serviceAccountName"] == their_pod["serviceAccountName"] == "prefixroute-operator"
    assert (
        ours["readinessProbe"]["httpGet"] == ours["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "healthz"}
    )
    their_template = one(_kustomize(overlay), "Deployment")["spec"]["template"]["metadata"]
    ours_template = one(chart, "Deployment")["spec"]["template"]["metadata"]
    assert ours_template["annotations"] == their_template["annotations"]  # no Prometheus Operator: scrape annotations
    assert one(chart, "Deployment")["spec"]["replicas"] == 2  # HA; the kustomize base runs one


def _parse_operator_args(args: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="prefixroute", exit_on_error=False)
    operator_cli.register(parser.add_subparsers(dest="command"))
    expanded = [a.replace("$(POD_IP)", "10.0.0.7") for a in args]
    return parser.parse_args(expanded)


@pytest.mark.parametrize("name", ["defaults", "namespaced", "standalone", "everything"])
def test_rendered_command_line_is_what_the_operator_accepts(name: str) -> None:
    container = _container(template(VALUE_SETS[name]))
    args = _parse_operator_args(container["args"])
    options = operator_cli.kopf_options(args, {"POD_IP": "10.0.0.7", "POD_NAME": "op-0"})
    values = VALUE_SETS[name]
    if values.get("watchNamespaces"):
        assert options["namespaces"] == values["watchNamespaces"]
        assert options["clusterwide"] is False
    else:
        assert options["clusterwide"] is True
    if values.get("peering", {}).get("enabled", True):
        assert options["peering_name"] == "prefixroute"
        assert options["standalone"] is False
    else:
        assert options["standalone"] is True
    assert options["liveness_endpoint"] == "http://10.0.0.7:8081/healthz"
    assert args.verbose == (values.get("logLevel") == "debug")


def test_operator_metrics_flag_is_accepted() -> None:
    args = _parse_operator_args(_container(template())["args"])
    assert args.metrics_port == 8080
    assert "--metrics-port" not in _container(template(VALUE_SETS["no-operator-metrics"]))["args"]


def test_image_tag_defaults_to_app_version_and_digest_wins() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == __version__  # tests/test_version.py: Chart.yaml agrees with the package
    assert _container(template())["image"] == f"prefixroute/prefixroute:{__version__}"
    assert _container(template({"image": {"tag": "0.2.0-rc1"}}))["image"] == "prefixroute/prefixroute:0.2.0-rc1"
    assert (
        _container(template(EVERYTHING))["image"] == "registry.example.com/prefixroute/prefixroute@sha256:" + "a" * 64
    )


def test_prometheus_url_log_level_and_extras_reach_the_container() -> None:
    container = _container(template(EVERYTHING))
    env = {e["name"]: e for e in container["env"]}
    assert env["PREFIXROUTE_PROMETHEUS_URL"]["value"] == "http://prometheus.monitoring:9090"
    assert env["TZ"]["value"] == "UTC"
    assert container["args"][-2:] == ["--priority", "100"]
    assert "--verbose" in container["args"]
    assert "PREFIXROUTE_PROMETHEUS_URL" not in {e["name"] for e in _container(template())["env"]}


def test_scheduling_values_reach_the_pod() -> None:
    pod = one(template(EVERYTHING), "Deployment")["spec"]["template"]
    spec = pod["spec"]
    for key in (
        "nodeSelector",
        "tolerations",
        "affinity",
        "topologySpreadConstraints",
        "imagePullSecrets",
        "priorityClassName",
    ):
        assert spec[key] == EVERYTHING[key], key
    assert EVERYTHING["podAnnotations"].items() <= pod["metadata"]["annotations"].items()
    assert pod["metadata"]["labels"]["example.com/cost-center"] == "42"
    default = one(template(), "Deployment")["spec"]["template"]["spec"]
    anti = default["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert anti["podAffinityTerm"]["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "operator"
    assert "affinity" not in one(template(VALUE_SETS["standalone"]), "Deployment")["spec"]["template"]["spec"]


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_pod_security_restricted(name: str) -> None:
    """The checks of the 'restricted' Pod Security Standard that a pod spec can fail."""
    pod = one(template(VALUE_SETS[name]), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not any(pod.get(k) for k in ("hostNetwork", "hostPID", "hostIPC"))
    assert all(
        set(v) <= {"name", "emptyDir", "configMap", "secret", "projected", "downwardAPI"}
        for v in pod.get("volumes", [])
    )
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"]["drop"] == ["ALL"]
        assert sc["readOnlyRootFilesystem"] is True
        assert not sc.get("privileged")
        assert not sc["capabilities"].get("add")
        assert all("hostPort" not in p for p in c["ports"])


def test_pdb_only_with_more_than_one_replica() -> None:
    assert one(template(), "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    assert every(template(VALUE_SETS["standalone"]), "PodDisruptionBudget") == []


def test_more_replicas_without_peering_is_refused() -> None:
    from tests.chart.render import HelmError

    with pytest.raises(HelmError, match=r"replicas > 1 needs peering\.enabled"):
        template({"peering": {"enabled": False}})


# -- RBAC and peering ----------------------------------------------------------------------


def _rule_set(rules: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    return {(g, r, v) for rule in rules for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def _kustomize_rules(overlay: str, kind: str, name: str) -> set[tuple[str, str, str]]:
    return _rule_set(one(_kustomize(overlay), kind, name)["rules"])


def test_cluster_rbac_equals_the_kustomize_rbac() -> None:
    docs = template()
    assert _rule_set(one(docs, "ClusterRole", "prefixroute-operator")["rules"]) == _kustomize_rules(
        "all-namespaces", "ClusterRole", "prefixroute-operator"
    )
    assert _rule_set(one(docs, "ClusterRole", "prefixroute-operator-discovery")["rules"]) == _kustomize_rules(
        "all-namespaces", "ClusterRole", "prefixroute-operator-discovery"
    )
    binding = one(docs, "ClusterRoleBinding", "prefixroute-operator")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "prefixroute-operator", "namespace": NAMESPACE}]
    assert every(docs, "Role") == []
    assert one(docs, "ClusterKopfPeering")["metadata"]["name"] == "prefixroute"


def test_namespaced_rbac_equals_the_kustomize_rbac_in_each_namespace() -> None:
    docs = template(VALUE_SETS["namespaced"])
    expected = _kustomize_rules("single-namespace", "Role", "prefixroute-operator")
    roles = every(docs, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert _rule_set(role["rules"]) == expected
    bindings = every(docs, "RoleBinding")
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["team-a", "team-b"]
    assert all(b["subjects"][0]["namespace"] == NAMESPACE for b in bindings)
    assert [d["metadata"]["name"] for d in every(docs, "ClusterRole")] == ["prefixroute-operator-discovery"]
    assert sorted(p["metadata"]["namespace"] for p in every(docs, "KopfPeering")) == ["team-a", "team-b"]
    assert every(docs, "ClusterKopfPeering") == []


def test_rbac_covers_what_the_operator_grants_routers() -> None:
    """RBAC refuses to let the operator grant a router Role more than it holds itself."""
    held = _rule_set(one(template(), "ClusterRole", "prefixroute-operator")["rules"])
    for rule in router_role(ModelRef("m", "ns"))["rules"]:
        for resource in rule["resources"]:
            for verb in rule["verbs"]:
                assert (rule["apiGroups"][0], resource, verb) in held


def test_existing_service_account_and_no_rbac() -> None:
    docs = template(VALUE_SETS["existing-identity"])
    assert every(docs, "ServiceAccount") == []
    assert every(docs, "ClusterRole") == []
    assert one(docs, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "my-operator"


# -- NetworkPolicy and PodMonitors against the pods the operator creates --------------------


def _model_pods(kind: str) -> dict[str, dict[str, Any]]:
    """Pod templates of the engine and router Deployments the operator renders for a model."""
    engine: dict[str, Any] = {"kind": kind, "model": "m"}
    if kind == "custom":
        engine = {"kind": "custom", "image": "example/engine:1", "command": ["serve"]}
    doc = {
        "apiVersion": API_VERSION,
        "kind": "PrefixRoutedModel",
        "metadata": {"name": "chat"},
        "spec": {"engine": engine},
    }
    stored, errors = admit(doc)
    assert errors == []
    stored["metadata"].update(namespace="team-a", uid="uid", generation=1)
    pods = {}
    for obj in plan_for(stored).objects:
        if obj["kind"] == "Deployment":
            pods[obj["metadata"]["labels"]["app.kubernetes.io/component"]] = obj["spec"]["template"]
    return pods


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}
    return selector.get("matchLabels", {}).items() <= labels.items()


@pytest.mark.parametrize("kind", ["sim", "vllm", "sglang", "custom"])
def test_network_policy_lets_only_routers_prometheus_and_the_operator_reach_engines(kind: str) -> None:
    pods = _model_pods(kind)
    operator_pod = one(template(), "Deployment")["spec"]["template"]
    policies = every(template(VALUE_SETS["namespaced"]), "NetworkPolicy")
    assert sorted(p["metadata"]["namespace"] for p in policies) == ["team-a", "team-b"]
    policy = policies[0]["spec"]
    assert _selects(policy["podSelector"], pods["engine"]["metadata"]["labels"])
    assert not _selects(policy["podSelector"], pods["router"]["metadata"]["labels"])
    assert not _selects(policy["podSelector"], operator_pod["metadata"]["labels"])
    assert policy["policyTypes"] == ["Ingress"]
    assert len(policy["ingress"]) == 1
    rule = policy["ingress"][0]
    routers, prometheus, operator = rule["from"]
    assert _selects(operator["podSelector"], operator_pod["metadata"]["labels"])  # it loads LoRA adapters
    assert operator["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NAMESPACE}}
    assert _selects(routers["podSelector"], pods["router"]["metadata"]["labels"])
    assert "namespaceSelector" not in routers
    assert not _selects(routers["podSelector"], pods["engine"]["metadata"]["labels"])
    assert prometheus == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    }
    port_names = {p["name"] for p in pods["engine"]["spec"]["containers"][0]["ports"]}
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    assert "http" in port_names


def test_network_policy_namespaces_and_extra_sources() -> None:
    assert every(template(), "NetworkPolicy") == []  # every namespace watched, none listed
    docs = template(EVERYTHING)
    (policy,) = every(docs, "NetworkPolicy")
    assert policy["metadata"]["namespace"] == "team-a"
    assert policy["spec"]["ingress"][0]["from"][-1] == {"namespaceSelector": {"matchLabels": {"debug": "true"}}}
    assert every(template({"watchNamespaces": ["a"], "networkPolicy": {"enabled": False}}), "NetworkPolicy") == []
    assert [
        p["metadata"]["namespace"] for p in every(template({"networkPolicy": {"namespaces": ["x"]}}), "NetworkPolicy")
    ] == ["x"]


@pytest.mark.parametrize("kind", ["sim", "vllm", "sglang"])
def test_pod_monitors_select_the_operators_pods_and_fall_back_to_annotations(kind: str) -> None:
    pods = _model_pods(kind)
    monitors = {
        m["metadata"]["labels"]["app.kubernetes.io/component"]: m
        for m in every(template(monitoring=True), "PodMonitor")
    }
    assert set(monitors) == {"router", "engine", "operator"}
    del monitors["operator"]
    for component, monitor in monitors.items():
        spec = monitor["spec"]
        labels = pods[component]["metadata"]["labels"]
        assert _selects(spec["selector"], labels)
        other = "engine" if component == "router" else "router"
        assert not _selects(spec["selector"], pods[other]["metadata"]["labels"])
        assert spec["namespaceSelector"] == {"any": True}
        (endpoint,) = spec["podMetricsEndpoints"]
        assert endpoint["port"] in {p["name"] for p in pods[component]["spec"]["containers"][0]["ports"]}
        annotations = pods[component]["metadata"]["annotations"]
        # without the Prometheus Operator, the annotations are what Prometheus reads
        assert annotations["prometheus.io/scrape"] == "true"
        assert annotations["prometheus.io/path"] == "/metrics"
        assert {r["targetLabel"] for r in endpoint["relabelings"]} >= {"__metrics_path__", "prefixroute_io_model"}
    assert every(template(VALUE_SETS["namespaced"], monitoring=True), "PodMonitor")[0]["spec"]["namespaceSelector"] == {
        "matchNames": ["team-a", "team-b"]
    }


def test_monitoring_objects_need_the_prometheus_operator_api_and_their_toggles() -> None:
    without = {d["kind"] for d in template()}
    assert not without & {"PodMonitor", "PrometheusRule"}
    with_api = {d["kind"] for d in template(monitoring=True)}
    assert {"PodMonitor", "PrometheusRule"} <= with_api
    off = template(
        {
            "monitoring": {
                "podMonitors": {"enabled": False},
                "prometheusRule": {"enabled": False},
                "dashboards": {"enabled": False},
            }
        },
        monitoring=True,
    )
    assert not {d["kind"] for d in off} & {"PodMonitor", "PrometheusRule", "ConfigMap"}


def test_operator_metrics_add_a_port_and_a_pod_monitor_or_annotations() -> None:
    with_api = template(monitoring=True)
    container = _container(with_api)
    assert {"name": "metrics", "containerPort": 8080, "protocol": "TCP"} in container["ports"]
    endpoint = one(with_api, "PodMonitor", "prefixroute-operator")["spec"]["podMetricsEndpoints"][0]
    # the model's namespace is model_namespace: no honorLabels needed, none set (it would let
    # a target overwrite the scrape's own labels)
    assert endpoint["port"] == "metrics"
    assert "honorLabels" not in endpoint
    assert "annotations" not in one(with_api, "Deployment")["spec"]["template"]["metadata"]  # scraped once, not twice
    annotated = one(template(), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert annotated == {"prometheus.io/scrape": "true", "prometheus.io/port": "8080", "prometheus.io/path": "/metrics"}
    off = template(VALUE_SETS["no-operator-metrics"], monitoring=True)
    assert "metrics" not in {p["name"] for p in _container(off)["ports"]}
    assert sorted(m["metadata"]["name"] for m in every(off, "PodMonitor")) == [
        "prefixroute-engines",
        "prefixroute-routers",
    ]


def test_dashboard_config_map_carries_the_json_file_for_the_sidecar() -> None:
    cm = one(template(EVERYTHING), "ConfigMap")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["namespace"] == "monitoring"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "LLM"}
    assert cm["data"]["prefixroute.json"] == (CHART / "dashboards" / "prefixroute.json").read_text().rstrip("\n")
    json.loads(cm["data"]["prefixroute.json"])


def test_notes_say_what_to_apply_next() -> None:
    from tests.chart.render import helm

    out = helm(
        "install",
        "prefixroute",
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "--set",
        "watchNamespaces={team-a}",
    ).stdout
    notes = out[out.index("NOTES:") :]
    assert "rollout status deployment/prefixroute-operator" in notes
    assert "kubectl -n team-a apply --server-side -f -" in notes
    assert "kind: PrefixRoutedModel" in notes
    assert "engine: {kind: sim" in notes
    assert "prefixroute.io/v1alpha1" in notes
    assert "Network: engine pods in team-a" in notes
    # the embedded example is a valid PrefixRoutedModel
    start = notes.index("apiVersion: prefixroute.io/v1alpha1")
    example = yaml.safe_load(notes[start : notes.index("\nYAML", start)])
    _, errors = admit(copy.deepcopy(example))
    assert errors == []
