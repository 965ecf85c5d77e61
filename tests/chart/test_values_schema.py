"""values.schema.json: a wrong value fails `helm template` and `helm install` with a message
that names the key and what is wrong; the shipped values satisfy it; every key is described."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import yaml

from tests.chart.render import CHART, NAMESPACE, HelmError, helm, template

SCHEMA = json.loads((CHART / "values.schema.json").read_text())
VALUES = yaml.safe_load((CHART / "values.yaml").read_text())

BAD: list[tuple[str, dict[str, Any], list[str]]] = [
    # (id, values, fragments the error message must contain)
    ("too-many-replicas", {"replicas": 50}, ["/replicas", "50", "10"]),
    ("negative-replicas", {"replicas": -1}, ["/replicas", "minimum"]),
    ("replicas-as-text", {"replicas": "two"}, ["/replicas", "string", "integer"]),
    ("log-level", {"logLevel": "warn"}, ["/logLevel", "'info', 'debug'"]),
    ("pull-policy", {"image": {"pullPolicy": "Sometimes"}}, ["/image/pullPolicy", "Always", "IfNotPresent", "Never"]),
    ("empty-repository", {"image": {"repository": ""}}, ["/image/repository"]),
    ("bad-digest", {"image": {"digest": "sha256:1234"}}, ["/image/digest", "sha256"]),
    ("namespace-name", {"watchNamespaces": ["Team_A"]}, ["/watchNamespaces/0", "Team_A", "does not match"]),
    ("namespace-twice", {"watchNamespaces": ["a", "a"]}, ["/watchNamespaces", "are equal"]),
    ("prometheus-url", {"prometheusURL": "prometheus:9090"}, ["/prometheusURL", "prometheus:9090"]),
    ("health-port", {"healthPort": 80}, ["/healthPort", "minimum", "80"]),
    ("unknown-key", {"replicaCount": 2}, ["replicaCount", "not allowed"]),
    ("unknown-nested-key", {"peering": {"enable": True}}, ["/peering", "enable", "not allowed"]),
    ("boolean-as-text", {"networkPolicy": {"enabled": "yes"}}, ["/networkPolicy/enabled", "boolean"]),
    (
        "scrape-interval",
        {"monitoring": {"podMonitors": {"interval": "fast"}}},
        ["/monitoring/podMonitors/interval", "fast"],
    ),
    (
        "hit-rate-ratio",
        {"monitoring": {"prometheusRule": {"hitRateDrop": {"ratio": 1.5}}}},
        ["/monitoring/prometheusRule/hitRateDrop/ratio", "1.5"],
    ),
    (
        "hot-spot-factor",
        {"monitoring": {"prometheusRule": {"hotSpot": {"imbalance": 0.5}}}},
        ["/monitoring/prometheusRule/hotSpot/imbalance"],
    ),
    (
        "runbook-url",
        {"monitoring": {"prometheusRule": {"runbookBaseURL": "docs/observability.md"}}},
        ["/monitoring/prometheusRule/runbookBaseURL"],
    ),
    ("quantity", {"resources": {"limits": {"memory": "lots"}}}, ["/resources/limits/memory"]),
    (
        "toleration-operator",
        {"tolerations": [{"key": "k", "operator": "Maybe"}]},
        ["/tolerations/0/operator", "Exists", "Equal"],
    ),
    (
        "selector-shape",
        {"networkPolicy": {"prometheus": {"podSelector": {"app": "prometheus"}}}},
        ["/networkPolicy/prometheus/podSelector", "app", "not allowed"],
    ),
    ("probe-period", {"livenessProbe": {"periodSeconds": 0}}, ["/livenessProbe/periodSeconds", "minimum"]),
]


@pytest.mark.parametrize(("values", "fragments"), [(v, f) for _, v, f in BAD], ids=[i for i, _, _ in BAD])
def test_helm_template_rejects_a_wrong_value_readably(values: dict[str, Any], fragments: list[str]) -> None:
    with pytest.raises(HelmError) as info:
        template(values)
    message = str(info.value)
    assert "values don't meet the specifications of the schema" in message
    for fragment in fragments:
        assert fragment in message, message


def test_helm_install_rejects_a_wrong_value_before_touching_a_cluster() -> None:
    out = helm(
        "install",
        "prefixroute",
        str(CHART),
        "--dry-run=client",
        "--namespace",
        NAMESPACE,
        "--set",
        "logLevel=trace",
        check=False,
    )
    assert out.returncode != 0
    assert "at '/logLevel'" in out.stderr
    assert "'info', 'debug'" in out.stderr


def test_the_shipped_values_satisfy_the_schema() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    errors = list(jsonschema.Draft7Validator(SCHEMA).iter_errors(VALUES))
    assert errors == []


def test_the_schema_forbids_unknown_keys_and_covers_every_shipped_key() -> None:
    def walk(values: Any, schema: dict[str, Any], path: str) -> None:
        if "$ref" in schema:
            schema = SCHEMA["definitions"][schema["$ref"].split("/")[-1]]
        if not isinstance(values, dict) or schema.get("type") != "object" or "properties" not in schema:
            return
        open_ended = path.split(".")[0] in {
            "podSecurityContext",
            "securityContext",
        }  # core/v1 types, partly spelled out
        assert schema.get("additionalProperties") is False or open_ended, path
        for key, value in values.items():
            assert key in schema["properties"], f"{path}.{key} is not in values.schema.json"
            walk(value, schema["properties"][key], f"{path}.{key}".lstrip("."))

    walk(VALUES, SCHEMA, "")


def test_every_top_level_and_section_key_is_described() -> None:
    def described(schema: dict[str, Any]) -> bool:
        if "description" in schema:
            return True
        ref = schema.get("$ref")
        return bool(ref) and "description" in SCHEMA["definitions"][ref.split("/")[-1]]

    missing = [k for k, s in SCHEMA["properties"].items() if not described(s)]
    missing += [
        f"monitoring.{k}" for k, s in SCHEMA["properties"]["monitoring"]["properties"].items() if not described(s)
    ]
    assert missing == []


@pytest.mark.parametrize(
    "values",
    [
        {"image": {"tag": "2.3.4-rc.1"}},
        {"watchNamespaces": ["team-a", "b"], "networkPolicy": {"namespaces": []}},
        {"prometheusURL": "https://prometheus.example.com:9090/prom"},
        {"monitoring": {"dashboards": {"namespace": "grafana"}}},
        {"resources": {"requests": {"cpu": 0.5, "memory": "1Gi"}, "limits": {"cpu": 2}}},
        {"replicas": 0},
    ],
    ids=["tag", "namespaces", "https-prometheus", "dashboard-namespace", "numeric-quantities", "zero-replicas"],
)
def test_good_values_pass(values: dict[str, Any]) -> None:
    assert template(values)
