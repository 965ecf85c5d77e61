"""The autoscaler's queries, evaluated by Prometheus' own engine (``promtool test rules``) over
an SGLang engine's series (tests/fixtures/sglang_metrics.txt) and an engine-sim's (vLLM's
names) side by side: each pod's figures come from its own family, SGLang's per-priority
queue breakdown is not counted twice, and the fleet's TTFT is the SGLang histogram's."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from prefixroute.autoscaling.queries import (
    FLEET_LABEL,
    engine_queries,
    fleets_ttft_queries,
    namespace_selector,
    pod_selector,
)
from prefixroute.engine_metrics import SGLANG, VLLM

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "sglang_metrics.txt"
STEPS = 10  # one sample a minute; counters grow by the fixture's value each minute

pytestmark = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian's prometheus) not found")


def _labels(labels: dict[str, str]) -> str:
    return ", ".join(f'{k}="{v}"' for k, v in labels.items())


def _input_series() -> list[dict[str, str]]:
    """The SGLang page as pod "sg-0" (gauges flat, counters and histograms growing by their
    value per minute), and a small vLLM engine as pod "vl-0"."""
    out = []
    for family in text_string_to_metric_families(FIXTURE.read_text()):
        for sample in family.samples:
            labels = {**sample.labels, "namespace": "ns", "pod": "sg-0"}
            name = sample.name
            values = f"{sample.value:g}x{STEPS}" if family.type == "gauge" else f"0+{sample.value:g}x{STEPS}"
            out.append({"series": f"{name}{{{_labels(labels)}}}", "values": values})
    vllm = {"namespace": "ns", "pod": "vl-0", "model_name": "m"}
    for name, values in (
        (VLLM.waiting, f"2x{STEPS}"),
        (VLLM.running, f"3x{STEPS}"),
        (VLLM.kv_usage[0], f"0.25x{STEPS}"),
        (VLLM.hit_tokens, f"0+1200x{STEPS}"),
        (VLLM.query_tokens, f"0+2400x{STEPS}"),
        (VLLM.requests, f"0+6x{STEPS}"),
    ):
        out.append({"series": f"{name}{{{_labels(vllm)}}}", "values": values})
    return out


def _evaluate(exprs: dict[str, str], expected: dict[str, list[tuple[dict[str, str], float]]], tmp_path: Path) -> None:
    """Each expression x 1000, rounded (promtool compares exactly), at the last minute."""
    tests = [
        {
            "expr": f"round(1000 * ({exprs[name]}))",
            "eval_time": f"{STEPS}m",
            "exp_samples": [{"labels": "{" + _labels(labels) + "}", "value": value} for labels, value in samples],
        }
        for name, samples in expected.items()
    ]
    doc = {
        "rule_files": [],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": _input_series(), "promql_expr_test": tests}],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(doc))
    out = subprocess.run(["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


def test_engine_queries_read_sglang_and_vllm_pods_each_in_its_own_names(tmp_path: Path) -> None:
    queries = engine_queries(namespace_selector(["ns"]), "5m", "5m")  # every pod of the namespace
    sg, vl = {"namespace": "ns", "pod": "sg-0"}, {"namespace": "ns", "pod": "vl-0"}
    _evaluate(
        queries,
        {
            # 5 waiting and 7 running in total, not the priority breakdown added on top
            "waiting": [(sg, 5000), (vl, 2000)],
            "running": [(sg, 7000), (vl, 3000)],
            "kv_usage": [(sg, 420), (vl, 250)],
            # per second over the window: 3600 cached of 9000 prompt tokens a minute (device + host)
            "hit_tokens_rate": [(sg, 60_000), (vl, 20_000)],
            "query_tokens_rate": [(sg, 150_000), (vl, 40_000)],
            "request_rate": [(sg, 200), (vl, 100)],
        },
        tmp_path,
    )


def test_the_fleet_ttft_is_read_from_sglangs_histogram_one_series_per_fleet(tmp_path: Path) -> None:
    selectors = [pod_selector("ns", ["vl-0"]), pod_selector("ns", ["sg-0"]), pod_selector("ns", ["sg-0", "vl-0"])]
    queries = fleets_ttft_queries(selectors, "5m")
    # 12 requests a minute: 3 within 0.1 s, 7 within 0.2 s; the median interpolates in (0.1, 0.2];
    # fleet 0 (a vLLM engine without a TTFT histogram here) has none
    _evaluate(queries, {"ttft_p50": [({FLEET_LABEL: "1"}, 175), ({FLEET_LABEL: "2"}, 175)]}, tmp_path)


def test_the_fixture_carries_every_sglang_name_the_readers_use() -> None:
    names = {s.name for f in text_string_to_metric_families(FIXTURE.read_text()) for s in f.samples}
    wanted = {SGLANG.waiting, SGLANG.running, *SGLANG.kv_usage, SGLANG.hit_tokens, SGLANG.query_tokens}
    assert wanted | {SGLANG.requests, SGLANG.ttft_bucket} <= names
