"""The fleet ``e2e.operator_scale`` puts in front of the operator: many PrefixRoutedModels
whose engine and router pods are KWOK's fakes, nodes to hold them, and a stand-in that
exports their engines' metrics to the cluster's Prometheus.

- **Fakes by image.** KWOK plays every pod whose image no pod runner serves (docs/control-
  plane.md): Running and Ready at once, deleted at once, no process. The models name
  ``FAKE_IMAGE`` for their engines and routers, so the operator renders, watches and
  publishes them exactly as it would real ones while nothing runs; the operator itself is
  the installed one, a real process under the runner.
- **Nodes of their own.** The default nodes hold 110 pods each and hand out a /24 of pod IPs;
  a thousand models of four engines need thousands. ``scale_nodes`` adds fake nodes labelled
  ``SCALE_NODE_LABEL`` with room for 2,000 pods and a /20 each; the engines select them.
- **Metrics without engines.** ``EngineExporter`` serves, on one page, vLLM's metric families
  for every fake engine pod under that pod's ``namespace`` and ``pod`` labels; the cluster's
  Prometheus scrapes it in its ``exporters`` job (``e2e.promconfig``, honor_labels), so the
  autoscaler's queries find every engine as if each were scraped on its own. The engines are
  idle: no requests waiting or running, counters that do not move.
- **Counting the operator's requests.** ``flow_schema`` classifies every request of the
  operator's ServiceAccount into a FlowSchema of its own (same priority level as the
  default ``service-accounts`` one), so the API server's own
  ``apiserver_flowcontrol_dispatched_requests_total{flow_schema=...}`` counts that client alone.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from e2e import kwokconfig

FAKE_IMAGE = "prefixroute/kwok-fake:scale"
"""A repository no pod runner serves: KWOK plays these pods."""
SCALE_NODE_LABEL = "prefixroute.io/scale-node"
PODS_PER_NODE = 2000
FLOW_SCHEMA = "e2e-operator-scale"
OPERATOR_ACCOUNT = ("prefixroute-system", "prefixroute-operator")
SERVED_MODEL = "sim-llm"
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
"""vLLM's own time-to-first-token buckets: the autoscaler's TTFT query sees a real histogram's width."""


def nodes_for(pods: int) -> int:
    """Scale nodes for ``pods`` pods, with room for the replacements churn creates."""
    return max(1, -(-int(pods * 1.5) // PODS_PER_NODE))


def scale_node(i: int) -> dict[str, Any]:
    """Fake node *i*: pod IPs from 10.244.(16(i+1)).0/20, clear of the default nodes'
    10.244.1-6.0/24 and of KWOK's fallback range 10.244.128.0/17."""
    if not 0 <= i < 7:
        raise ValueError("at most 7 scale nodes (pod IPs 10.244.16.0 to 10.244.127.255)")
    cidr = f"10.244.{16 * (i + 1)}.0/20"
    capacity = {"cpu": "2000", "memory": "8Ti", "pods": str(PODS_PER_NODE), "ephemeral-storage": "1Ti"}
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": f"kwok-scale-{i}",
            "labels": {
                "kubernetes.io/hostname": f"kwok-scale-{i}",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
                SCALE_NODE_LABEL: "true",
            },
            "annotations": {kwokconfig.FAKE_NODE_ANNOTATION[0]: kwokconfig.FAKE_NODE_ANNOTATION[1]},
        },
        "spec": {"podCIDR": cidr, "podCIDRs": [cidr]},
        "status": {"capacity": capacity, "allocatable": capacity, "phase": "Running"},
    }


def model(name: str, replicas: int, prometheus: str, interval_seconds: int = 15) -> dict[str, Any]:
    """An engine-sim model of fakes with autoscaling on, pinned at ``replicas`` (min = that,
    so an idle fleet holds rather than scales down)."""
    return {
        "apiVersion": "prefixroute.io/v1alpha1",
        "kind": "PrefixRoutedModel",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "engine": {
                "kind": "sim",
                "model": SERVED_MODEL,
                "image": FAKE_IMAGE,
                "nodeSelector": {SCALE_NODE_LABEL: "true"},
                "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
            },
            "router": {"replicas": 1, "image": FAKE_IMAGE},
            "autoscaling": {
                "enabled": True,
                "minReplicas": replicas,
                "maxReplicas": 2 * replicas,
                "prometheus": prometheus,
                "intervalSeconds": interval_seconds,
            },
        },
    }


def flow_schema(namespace: str = OPERATOR_ACCOUNT[0], account: str = OPERATOR_ACCOUNT[1]) -> dict[str, Any]:
    """Every request of one ServiceAccount in a FlowSchema of its own, ahead of the default
    ``service-accounts`` schema (precedence 9000) and at its priority level."""
    return {
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1",
        "kind": "FlowSchema",
        "metadata": {"name": FLOW_SCHEMA},
        "spec": {
            "matchingPrecedence": 8000,
            "priorityLevelConfiguration": {"name": "workload-low"},
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [
                {
                    "subjects": [
                        {"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": account}}
                    ],
                    "resourceRules": [
                        {
                            "verbs": ["*"],
                            "apiGroups": ["*"],
                            "resources": ["*"],
                            "namespaces": ["*"],
                            "clusterScope": True,
                        }
                    ],
                    "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                }
            ],
        },
    }


def engine_page(pods: Iterable[tuple[str, str]]) -> str:
    """vLLM's metric families for idle engines, one series set per (namespace, pod)."""
    pods = sorted(set(pods))
    out: list[str] = []

    def family(name: str, kind: str, value: str, extra: str = "") -> None:
        out.append(f"# TYPE {name} {kind}")
        for ns, pod in pods:
            out.append(f'{name}{{namespace="{ns}",pod="{pod}",model_name="{SERVED_MODEL}"{extra}}} {value}')

    family("vllm:num_requests_waiting", "gauge", "0")
    family("vllm:num_requests_running", "gauge", "0")
    family("vllm:kv_cache_usage_perc", "gauge", "0.05")
    family("vllm:prefix_cache_queries_total", "counter", "40000")
    family("vllm:prefix_cache_hits_total", "counter", "20000")
    for ns, pod in pods:  # the finished-request count alone (the autoscaler reads no more of it)
        out.append(
            f'vllm:e2e_request_latency_seconds_count{{namespace="{ns}",pod="{pod}",model_name="{SERVED_MODEL}"}} 100'
        )
    out.append("# TYPE vllm:time_to_first_token_seconds histogram")
    for ns, pod in pods:
        labels = f'namespace="{ns}",pod="{pod}",model_name="{SERVED_MODEL}"'
        for bound in TTFT_BUCKETS:
            count = 0 if bound < 0.1 else 50 if bound < 0.5 else 100
            out.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{bound:g}"}} {count}')
        out.append(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} 100')
    return "\n".join(out) + "\n"


class EngineExporter:
    """One HTTP page of every fake engine's metrics, listed in the cluster's ``exporters.json``
    while it runs. ``set_pods`` replaces the list of engines it speaks for."""

    def __init__(self, host: str, exporters_file: Path) -> None:
        self._page = engine_page(())
        self._lock = threading.Lock()
        self._file = exporters_file
        exporter = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                with exporter._lock:
                    body = exporter._page.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self.address = f"{host}:{self._server.server_address[1]}"

    def set_pods(self, pods: Iterable[tuple[str, str]]) -> None:
        page = engine_page(pods)
        with self._lock:
            self._page = page

    def __enter__(self) -> EngineExporter:
        threading.Thread(target=self._server.serve_forever, name="engine exporter", daemon=True).start()
        self._file.write_text(json.dumps([{"targets": [self.address], "labels": {"exporter": "operator-scale"}}]))
        return self

    def __exit__(self, *exc: Any) -> None:
        self._file.write_text("[]")
        self._server.shutdown()
        self._server.server_close()
