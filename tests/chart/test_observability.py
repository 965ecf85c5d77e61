"""The dashboard and the alerts ask for what the project really exports.

Every PromQL expression (dashboard panels, its variables, the PrometheusRule) is parsed;
every metric it names must be exported by our code — read from the metric registries of
the router and engine-sim (and any operator registry once one exists), with the sample
names Prometheus sees (counters ``_total``, histograms ``_bucket``/``_sum``/``_count``) —
and every label it filters or groups by must be one of that metric's labels or a label
the scrape adds. Metrics the operator does not export yet are listed in PENDING, once, and
a test fails as soon as one of them is exported (so the list only shrinks). Prometheus'
own tools then check the files (`promtool check rules`) and unit-test every alert on
synthetic series (`promtool test rules`)."""

from __future__ import annotations

import importlib
import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import REGISTRY, CollectorRegistry

from tests.chart import tools
from tests.chart.render import CHART, ROOT, one, template

DASHBOARD = json.loads((CHART / "dashboards" / "prefixroute.json").read_text())
DOC = ROOT / "docs" / "observability.md"
SGLANG_METRICS = ROOT / "tests" / "fixtures" / "sglang_metrics.txt"
"""What an SGLang engine exports (a /metrics page in its format): the dashboard and the
alerts read SGLang engines as well as vLLM's names, which engine-sim exports."""

PENDING: dict[str, set[str]] = {
    # Metrics the dashboard or the alerts are written against before the code exports them:
    # name -> its labels. Empty now that the operator exports prefixroute_operator_*; a test
    # fails when a listed name becomes exported, so the list only shrinks.
}

TARGET_LABELS = {
    # added by the scrape: Prometheus itself, the Prometheus Operator's PodMonitor, the
    # usual kubernetes-pods job's labelmap of pod labels (and e2e's file_sd, which mirrors it)
    "job",
    "instance",
    "namespace",
    "pod",
    "container",
    "endpoint",
    "node",
    "prefixroute_io_model",
    "app_kubernetes_io_component",
    "app_kubernetes_io_instance",
    "app_kubernetes_io_name",
}
GRAFANA_VARIABLES = {"__rate_interval": "5m", "__interval": "1m", "__range": "1h"}


# -- what the project exports ----------------------------------------------------------------


def _sample_names(name: str, kind: str) -> dict[str, set[str]]:
    """Sample names of one metric family and the extra label each carries."""
    if kind == "counter":
        return {f"{name}_total": set(), f"{name}_created": set()}
    if kind == "histogram":
        return {f"{name}_bucket": {"le"}, f"{name}_sum": set(), f"{name}_count": set(), f"{name}_created": set()}
    if kind == "summary":
        return {name: {"quantile"}, f"{name}_sum": set(), f"{name}_count": set(), f"{name}_created": set()}
    if kind == "info":
        return {f"{name}_info": set()}
    return {name: set()}


def _registries() -> Iterator[CollectorRegistry]:
    from prefixroute.controller.metrics import OperatorMetrics
    from prefixroute.engine_model.config import EngineConfig
    from prefixroute.engine_sim.driver import EngineDriver
    from prefixroute.engine_sim.metrics import EngineMetrics
    from prefixroute.router.metrics import RouterMetrics, StateView

    router = RouterMetrics("prefix-cache")
    router.attach_state(
        StateView(
            in_flight=lambda: {"member-0": 1}, ring_members=lambda: 1, load_imbalance=lambda: 1.0, ejected=lambda: 0
        )
    )
    yield router.registry
    yield EngineMetrics(EngineDriver(EngineConfig(model="m")), "m").registry
    yield OperatorMetrics().registry
    # any other part's metrics module with a module-level registry
    for module_name in ("prefixroute.autoscaling.metrics",):
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError:
            continue
        yield from (v for v in vars(module).values() if isinstance(v, CollectorRegistry))
    yield REGISTRY


def _sglang() -> dict[str, set[str]]:
    from prometheus_client.parser import text_string_to_metric_families

    names: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(SGLANG_METRICS.read_text()):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


@cache
def exported() -> dict[str, frozenset[str]]:
    """Every sample name the project's code exports (and SGLang engines), with its label names."""
    names: dict[str, set[str]] = _sglang()
    for registry in _registries():
        for collector in list(
            registry._collector_to_names
        ):  # the collectors themselves: labelled metrics without children still count
            own = set(getattr(collector, "_labelnames", ()))
            # the fronts' loop-only metrics (front/metrics.py) name their labels on each metric
            loop_labels = {m.name: set(getattr(m, "labelnames", ())) for m in getattr(collector, "histograms", ())}
            for family in collector.collect():
                sampled = {k for s in family.samples for k in s.labels} | loop_labels.get(family.name, set())
                for sample, extra in _sample_names(family.name, family.type).items():
                    names.setdefault(sample, set()).update(own | sampled | extra)
    return {
        k: frozenset(v) - {"le", "quantile"} | ({"le"} if k.endswith("_bucket") else set()) for k, v in names.items()
    }


# -- what the dashboard and the alerts ask for ------------------------------------------------


def _substitute(expr: str) -> str:
    """Grafana's variables as Prometheus would see them after interpolation."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        return GRAFANA_VARIABLES.get(name, ".*")

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", value, expr)


def dashboard_queries() -> list[tuple[str, str]]:
    out = []
    for panel in DASHBOARD["panels"]:
        for target in panel.get("targets", []):
            out.append((f"panel {panel['id']} {panel['title']!r} {target['refId']}", target["expr"]))
    for variable in DASHBOARD["templating"]["list"]:
        if variable["type"] == "query":
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", variable["query"]["query"])
            assert match, variable
            out.append((f"variable {variable['name']}", f"count by ({match.group(2)}) ({match.group(1)})"))
    return out


def alert_rules() -> list[dict[str, Any]]:
    rule = one(template(monitoring=True), "PrometheusRule")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def alert_queries() -> list[tuple[str, str]]:
    return [(f"alert {r['alert']}", r["expr"]) for r in alert_rules()]


QUERIES = dashboard_queries() + alert_queries()


class Asked:
    """What one expression names: metric names, and label names per place they appear."""

    def __init__(self) -> None:
        self.metrics: set[str] = set()
        self.problems: list[str] = []

    def walk(self, node: Any) -> set[str]:
        """Returns the labels the node's result series may carry (for by/on checks)."""
        kind = type(node).__name__
        if kind == "VectorSelector":
            name = node.name
            self.metrics.add(name)
            labels = set(exported().get(name) or PENDING.get(name) or ()) | TARGET_LABELS
            for matcher in node.matchers.matchers:
                if matcher.name not in labels:
                    self.problems.append(f"{name} has no label {matcher.name!r}")
            return labels
        if kind == "MatrixSelector":
            return self.walk(node.vector_selector)
        if kind == "AggregateExpr":
            inner = self.walk(node.expr)
            if node.param is not None:
                self.walk(node.param)
            grouping = set(node.modifier.labels) if node.modifier is not None else set()
            missing = grouping - inner
            if missing:
                self.problems.append(f"aggregation by {sorted(missing)} over series without those labels")
            return grouping if node.modifier is not None and str(node.modifier).startswith("by") else inner - grouping
        if kind == "BinaryExpr":
            left, right = self.walk(node.lhs), self.walk(node.rhs)
            matching = node.modifier.matching if node.modifier is not None else None
            if matching is not None:
                missing = set(matching.labels) - (left | right)
                if missing:
                    self.problems.append(f"vector matching on {sorted(missing)} that neither side has")
            return left | right
        if kind == "Call":
            labels: set[str] = set()
            for arg in node.args:
                labels |= self.walk(arg)
            return labels
        if kind in {"ParenExpr", "UnaryExpr", "SubqueryExpr"}:
            return self.walk(node.expr)
        if kind in {"NumberLiteral", "StringLiteral"}:
            return set()
        raise AssertionError(f"unexpected PromQL node {kind}")


def asked(expr: str) -> Asked:
    promql = tools.module("promql_parser")
    result = Asked()
    result.walk(promql.parse(_substitute(expr)))
    return result


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_query_names_only_exported_metrics_and_their_labels(where: str, expr: str) -> None:
    found = asked(expr)
    unknown = sorted(found.metrics - set(exported()) - set(PENDING))
    assert unknown == [], f"{where}: not exported by the project: {unknown}"
    assert found.problems == [], where


@pytest.mark.parametrize(
    ("expr", "problem"),
    [
        ("rate(prefixroute_router_request_total[5m])", "metric"),  # misspelt: requests
        ("prefixroute_router_requests", "metric"),  # a counter is exported as _total
        ("vllm:time_to_first_token_seconds", "metric"),  # a histogram is exported as _bucket/_sum/_count
        ("sum by (reason) (rate(prefixroute_router_requests_total[5m]))", "label"),
        ('prefixroute_router_ring_members{member="x"}', "label"),
        ("rate(vllm:prefix_cache_hits_total[5m]) / on (status) rate(vllm:prefix_cache_queries_total[5m])", "label"),
    ],
)
def test_the_check_catches_mistakes(expr: str, problem: str) -> None:
    found = asked(expr)
    if problem == "metric":
        assert found.metrics - set(exported()) - set(PENDING)
    else:
        assert found.problems


def test_exported_names_are_read_from_the_code() -> None:
    names = exported()
    # the registries really were read: a counter, a histogram and a scrape-time gauge of each part
    assert {
        "prefixroute_router_requests_total",
        "prefixroute_router_time_to_first_byte_seconds_bucket",
        "prefixroute_router_ring_members",
        "vllm:prefix_cache_hits_total",
        "prefixroute_operator_reconcile_errors_total",
        "vllm:time_to_first_token_seconds_bucket",
        "vllm:num_requests_waiting",
    } <= set(names)
    assert {"member", "strategy", "status"} <= names["prefixroute_router_requests_total"]
    assert names["prefixroute_router_in_flight"] >= {"member"}
    assert {"model_namespace", "model", "action"} <= names["prefixroute_operator_autoscaling_decisions_total"]
    # never `namespace`: every pod scrape sets it to the operator pod's own namespace
    assert not any("namespace" in labels for name, labels in names.items() if name.startswith("prefixroute_operator_"))


def test_pending_metrics_are_still_pending_and_still_used() -> None:
    now_exported = sorted(set(PENDING) & set(exported()))
    assert now_exported == [], f"exported now: remove {now_exported} from PENDING in {Path(__file__).name}"
    used: set[str] = set().union(*(asked(e).metrics for _, e in QUERIES))
    assert set(PENDING) <= used, f"PENDING lists metrics nothing asks for: {sorted(set(PENDING) - used)}"


def test_the_dashboard_shows_what_issue_7_asks_for() -> None:
    def metrics_of(fragment: str) -> set[str]:
        panels = [p for p in DASHBOARD["panels"] if fragment.lower() in p["title"].lower()]
        assert panels, fragment
        return set().union(*(asked(t["expr"]).metrics for p in panels for t in p["targets"]))

    hit = metrics_of("hit rate")
    assert {"vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total"} <= hit  # engine-reported
    assert {"prefixroute_router_prefix_match_ratio_sum", "prefixroute_router_prefix_match_ratio_count"} <= hit  # router
    ttft = [t["expr"] for p in DASHBOARD["panels"] if "first token" in p["title"].lower() for t in p["targets"]]
    assert any("histogram_quantile(0.5," in e for e in ttft)
    assert any("histogram_quantile(0.99," in e for e in ttft)
    assert "vllm:request_success_total" in metrics_of("requests per engine replica")
    assert "prefixroute_router_load_imbalance" in metrics_of("imbalance")
    assert "prefixroute_router_ring_members" in metrics_of("ring size")
    assert {
        "prefixroute_operator_desired_replicas",
        "prefixroute_operator_replicas",
        "prefixroute_operator_ring_members",
    } <= metrics_of("replicas:")
    assert "prefixroute_operator_autoscaling_decisions_total" in metrics_of("autoscaling decisions")
    assert "prefixroute_router_retries_total" in metrics_of("retries")
    assert any('status=~"5.."' in t["expr"] for p in DASHBOARD["panels"] for t in p.get("targets", []))
    ids = [p["id"] for p in DASHBOARD["panels"]]
    assert len(ids) == len(set(ids))
    assert DASHBOARD["uid"] == "prefixroute-overview"
    for panel in DASHBOARD["panels"]:
        if panel["type"] != "row":
            assert panel["description"]
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


# -- the alerts ---------------------------------------------------------------------------------


def _anchors(markdown: str) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces to '-'."""
    out = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            out.add(re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text)))
    return out


def test_every_alert_has_a_runbook_section_severity_and_text() -> None:
    anchors = _anchors(DOC.read_text())
    names = set()
    for rule in alert_rules():
        names.add(rule["alert"])
        url = rule["annotations"]["runbook_url"]
        base, anchor = url.split("#")
        assert base.endswith("docs/observability.md"), url
        assert anchor == rule["alert"].lower(), url
        assert anchor in anchors, f"docs/observability.md has no heading for #{anchor}"
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]
        assert rule["annotations"]["description"]
    assert names == {
        "PrefixRouteHitRateDropped",
        "PrefixRouteHotSpot",
        "PrefixRouteNoReadyReplicas",
        "PrefixRouteRouterErrors",
        "PrefixRouteReconcileErrors",
    }


def test_alert_thresholds_come_from_values() -> None:
    values = {
        "monitoring": {
            "prometheusRule": {
                "runbookBaseURL": "https://runbooks.example.com/prefixroute/",
                "hitRateDrop": {"ratio": 0.3, "for": "30m"},
                "hotSpot": {"imbalance": 3, "minRequestsPerSecond": 5},
                "routerErrors": {"ratio": 0.01},
            }
        }
    }
    rules = {
        r["alert"]: r
        for g in one(template(values, monitoring=True), "PrometheusRule")["spec"]["groups"]
        for r in g["rules"]
    }
    assert "< 0.3 * (" in rules["PrefixRouteHitRateDropped"]["expr"]
    assert rules["PrefixRouteHitRateDropped"]["for"] == "30m"
    assert "> 3\n" in rules["PrefixRouteHotSpot"]["expr"]
    assert rules["PrefixRouteHotSpot"]["expr"].endswith("> 5")
    assert rules["PrefixRouteRouterErrors"]["expr"].endswith("> 0.01")
    assert (
        rules["PrefixRouteHotSpot"]["annotations"]["runbook_url"]
        == "https://runbooks.example.com/prefixroute#prefixroutehotspot"
    )


@cache
def promtool() -> str:
    if shutil.which("promtool") is None:
        from e2e import build

        build.ensure_system_packages(quiet=True)  # Debian's prometheus package, as the e2e cluster uses
    found = shutil.which("promtool")
    assert found, "promtool (Debian package prometheus) is missing"
    return found


def test_promtool_accepts_the_alerts_and_every_dashboard_query(tmp_path: Path) -> None:
    groups = one(template(monitoring=True), "PrometheusRule")["spec"]["groups"]
    dashboard = [
        {"record": f"prefixroute:dashboard_query_{i}", "expr": _substitute(e)}
        for i, (_, e) in enumerate(dashboard_queries())
    ]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [*groups, {"name": "dashboard", "rules": dashboard}]}))
    out = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"SUCCESS: {len(alert_rules()) + len(dashboard)} rules found" in out.stdout


# Synthetic series for each alert: (alert, series, time it must fire at, labels, time it must not)
MODEL = 'namespace="serving", prefixroute_io_model="chat"'
ALERT_CASES = [
    (
        "PrefixRouteHitRateDropped",
        [
            (f'vllm:prefix_cache_queries_total{{{MODEL}, pod="e-0"}}', "0+100x180"),
            # 80% of prompt tokens cached for 90 minutes, then 20%
            (f'vllm:prefix_cache_hits_total{{{MODEL}, pod="e-0"}}', "0+80x90 7220+20x90"),
        ],
        "150m",
        {"namespace": "serving", "prefixroute_io_model": "chat"},
        "85m",
    ),
    (
        "PrefixRouteHitRateDropped",
        [
            (f'sglang:prompt_tokens_total{{{MODEL}, pod="e-0", is_streaming="true"}}', "0+100x180"),
            (f'sglang:cached_tokens_total{{{MODEL}, pod="e-0", cache_source="device"}}', "0+80x90 7220+20x90"),
        ],
        "150m",
        {"namespace": "serving", "prefixroute_io_model": "chat"},
        "85m",
    ),
    (
        "PrefixRouteHitRateDropped",
        [
            (f'sglang:prompt_tokens_total{{{MODEL}, pod="e-0", is_streaming="true"}}', "0+100x180"),
            (f'sglang:cached_tokens_total{{{MODEL}, pod="e-0", cache_source="device"}}', "0+80x90 7220+20x90"),
        ],
        "150m",
        {"namespace": "serving", "prefixroute_io_model": "chat"},
        "85m",
    ),
    (
        "PrefixRouteHotSpot",
        [
            (f'prefixroute_router_load_imbalance{{{MODEL}, pod="r-0"}}', "1x10 3x50"),
            (
                f'prefixroute_router_requests_total{{{MODEL}, pod="r-0", member="e-0", strategy="prefix-cache", status="200"}}',
                "0+120x60",
            ),
        ],
        "40m",
        {"namespace": "serving", "prefixroute_io_model": "chat"},
        "20m",
    ),
    (
        "PrefixRouteNoReadyReplicas",
        [
            (f'prefixroute_router_ring_members{{{MODEL}, pod="r-0"}}', "2x10 0x20"),
            (f'prefixroute_router_ring_members{{{MODEL}, pod="r-1"}}', "2x10 0x20"),
        ],
        "20m",
        {"namespace": "serving", "prefixroute_io_model": "chat"},
        "12m",
    ),
    (
        "PrefixRouteRouterErrors",
        [
            (
                f'prefixroute_router_requests_total{{{MODEL}, pod="r-0", member="e-0", strategy="prefix-cache", status="200"}}',
                "0+600x40",
            ),
            (
                f'prefixroute_router_requests_total{{{MODEL}, pod="r-0", member="", strategy="prefix-cache", status="503"}}',
                "0x10 0+60x30",
            ),
        ],
        "30m",
        {"namespace": "serving", "prefixroute_io_model": "chat"},
        "10m",
    ),
    (
        "PrefixRouteReconcileErrors",
        # the scrape's namespace is the operator pod's; the model's is model_namespace
        [
            (
                'prefixroute_operator_reconcile_errors_total{namespace="prefixroute-system", pod="op-0", model_namespace="serving", model="chat", reason="ApplyFailed"}',
                "0x10 0+1x40",
            )
        ],
        "40m",
        {"model_namespace": "serving", "model": "chat"},
        "8m",
    ),
]


@pytest.mark.parametrize(
    ("alert", "series", "fires_at", "labels", "quiet_at"),
    ALERT_CASES,
    ids=[c[0] + ("-sglang" if "sglang:" in c[1][0][0] else "") for c in ALERT_CASES],
)
def test_alert_fires_on_its_condition_and_not_before(
    alert: str, series: list[tuple[str, str]], fires_at: str, labels: dict[str, str], quiet_at: str, tmp_path: Path
) -> None:
    rules = [{k: v for k, v in r.items() if k != "annotations"} for r in alert_rules() if r["alert"] == alert]
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [{"name": "under-test", "rules": rules}]}))
    severity = rules[0]["labels"]["severity"]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": s, "values": v} for s, v in series],
                "alert_rule_test": [
                    {"eval_time": quiet_at, "alertname": alert, "exp_alerts": []},
                    {
                        "eval_time": fires_at,
                        "alertname": alert,
                        "exp_alerts": [{"exp_labels": {**labels, "severity": severity}}],
                    },
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    out = subprocess.run([promtool(), "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
