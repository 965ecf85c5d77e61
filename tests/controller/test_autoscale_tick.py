"""The autoscaler's tick through a fake edge: what it writes, applies, annotates and tells,
with scripted signals on the controller's clock, and a stand-in ReplicaSet that deletes the
pod with the lowest deletion cost (as the real one does)."""

from __future__ import annotations

import asyncio
import copy
import logging
from pathlib import Path

import pytest

from prefixroute.autoscaling.policy import PolicyState
from prefixroute.autoscaling.prometheus_signals import (
    CA_INVALID,
    CA_UNAVAILABLE,
    MISSING,
    UNREACHABLE,
    MetricsUnavailable,
)
from prefixroute.autoscaling.signals import FleetSignals, MemberSignals
from prefixroute.controller.autoscale_status import DELETION_COST
from prefixroute.controller.autoscale_tick import Autoscaler, AutoscalerMemory
from prefixroute.controller.conditions import find
from prefixroute.controller.errors import ApplyFailed
from prefixroute.controller.prometheus_trust import PrometheusTrust
from prefixroute.controller.reconcile import Controller
from prefixroute.controller.ring_status import is_ready
from tests.controller.certificates import make_authority
from tests.controller.helpers import Clock, EventLog, FakeEdge, model_body, pod

KEY = ("serving", "llama")
AUTO = {
    "enabled": True,
    "prometheus": "http://prometheus:9090",
    "minReplicas": 2,
    "maxReplicas": 6,
    "targetQueueDepth": 4,
    "intervalSeconds": 10,
    "scaleUpWindowSeconds": 30,
    "scaleDownWindowSeconds": 60,
    "scaleUpCooldownSeconds": 0,
    "scaleDownCooldownSeconds": 0,
    "drainTimeoutSeconds": 60,
    "hitRateFloor": 0.0,
}


class Reader:
    """Signals as a test scripts them: per pod (running, waiting) and prefix hits; or a fault."""

    def __init__(self) -> None:
        self.load: dict[str, tuple[float, float]] = {}
        self.hits: dict[str, float] = {}
        self.fault: MetricsUnavailable | None = None
        self.calls: list[dict] = []
        self.held = 0.0  # requests the routers hold

    def __call__(self, requests, now):
        return [self.one(r.engine_pods, r.router_pods, r.young, now) for r in requests]

    def one(self, engine_pods, router_pods, young, now):
        self.calls.append(
            {"engines": list(engine_pods), "routers": list(router_pods), "young": list(young), "now": now}
        )
        if self.fault is not None:
            return self.fault
        members = tuple(
            MemberSignals(
                p,
                running=self.load.get(p, (0.5, 0.0))[0],
                waiting=self.load.get(p, (0.5, 0.0))[1],
                hit_tokens_rate=self.hits.get(p, 100.0),
                query_tokens_rate=200.0,
            )
            for p in engine_pods
        )
        return FleetSignals(at=now, members=members, ttft_p50=0.2, held=self.held)


class Harness:
    def __init__(self, replicas: int = 3, **autoscaling) -> None:
        self.edge, self.events, self.clock = FakeEdge(), EventLog(), Clock()
        self.controller = Controller(edge=self.edge, events=self.events, clock=self.clock)
        self.reader = Reader()
        self.autoscaler = Autoscaler(self.controller, self.reader)
        self.memory = AutoscalerMemory()
        self.spec = {
            "engine": {"kind": "sim", "model": "tiny"},
            "replicas": replicas,
            "autoscaling": {**AUTO, **autoscaling},
        }
        self.born = 0
        self.pods: list[dict] = []
        for _ in range(replicas):
            self.add_pod()
        self.pods.append(pod("llama-router-a", ip="10.0.1.1", component="router"))

    def add_pod(self) -> None:
        self.pods.append(pod(f"llama-engine-{self.born}", ip=f"10.0.0.{self.born + 1}"))
        self.born += 1

    @property
    def engines(self) -> list[str]:
        return [
            p["metadata"]["name"]
            for p in self.pods
            if p["metadata"]["labels"]["app.kubernetes.io/component"] == "engine"
        ]

    @property
    def status(self) -> dict:
        return self.edge.status.get(KEY, {})

    def body(self, status: dict | None = None) -> dict:
        return model_body(self.spec, status=self.status if status is None else status)

    def replicaset(self) -> None:
        """Pods follow the Deployment: new ones join, and on the way down a pod that is not
        ready goes first, then the lowest deletion cost (the ReplicaSet's own ranking)."""
        wanted = self.edge.replicas()
        if wanted is None:
            return
        while len(self.engines) < wanted:
            self.add_pod()
        while len(self.engines) > wanted:
            cost = lambda name: int(self.edge.annotations.get(name, {}).get(DELETION_COST, "0"))  # noqa: E731
            ready = {p["metadata"]["name"]: is_ready(p) for p in self.pods}
            victim = min(self.engines, key=lambda n: (ready[n], cost(n), -int(n.rsplit("-", 1)[1])))
            self.pods = [p for p in self.pods if p["metadata"]["name"] != victim]

    async def tick(self, seconds: float = 10.0):
        decision = await self.autoscaler.tick(self.body(), self.pods, self.memory)
        self.replicaset()
        self.clock.advance(seconds)
        return decision

    async def run(self, seconds: float):
        return [await self.tick() for _ in range(int(seconds // 10))]

    @property
    def told(self) -> list[tuple[str, str, str]]:
        """The autoscaler's Events (the ring's own RingChanged ones left out)."""
        return [e for e in self.events.events if e[1] != "RingChanged"]

    def reasons(self) -> list[str]:
        return [r for _, r, _ in self.told]


async def test_a_calm_fleet_holds_and_says_so_in_status() -> None:
    h = Harness()
    decision = await h.tick()
    assert decision.action == "hold"
    assert h.told == []
    auto = h.status["autoscaling"]
    assert (auto["lastDecision"], auto["desiredReplicas"], auto["dryRun"], auto["weights"]) == ("hold", 3, False, {})
    assert "within targets" in auto["reason"]
    assert auto["lastEvaluationTime"] == "2026-01-01T12:00:00Z"
    assert h.status["hitRate"] == 0.5
    assert h.status["ttftP50"] == 0.2  # numbers, as the printer columns are
    available = find(h.status["conditions"], "MetricsAvailable")
    assert (available["status"], available["reason"]) == ("True", "SignalsFresh")
    assert h.edge.replicas() is None  # nothing applied: nothing changed
    assert h.reader.calls[0]["engines"] == ["llama-engine-0", "llama-engine-1", "llama-engine-2"]
    assert h.reader.calls[0]["routers"] == ["llama-router-a"]


async def test_a_calm_fleet_writes_its_status_once_not_every_tick() -> None:
    h = Harness()
    await h.tick()
    written = len(h.edge.status_patches)
    assert written
    assert (await h.tick()).action == "hold"
    assert (await h.tick()).action == "hold"
    assert len(h.edge.status_patches) == written
    assert h.status["autoscaling"]["lastEvaluationTime"] == "2026-01-01T12:00:00Z"  # the first, which said it


async def test_ticks_follow_the_resources_own_interval() -> None:
    h = Harness()  # intervalSeconds 10; kopf's timer fires every second
    assert await h.tick(seconds=4) is not None
    assert await h.tick(seconds=4) is None  # 4 s later: not due
    assert await h.tick(seconds=1.8) is None  # 8 s
    assert await h.tick(seconds=1) is not None  # 9.8 s: due (a 1 s timer must not stretch 10 s to 11 s)
    assert len(h.reader.calls) == 2
    # only the ticks that evaluated are timed in the operator's histogram, a held one too
    h.reader.fault = MetricsUnavailable("Prometheus at http://prometheus:9090 failed", UNREACHABLE)
    h.clock.advance(10)
    assert await h.tick() is None
    assert h.controller.metrics.value("prefixroute_operator_autoscale_tick_seconds_count") == 3
    # each round's read of the signals is timed once, whatever it read
    assert h.controller.metrics.value("prefixroute_operator_autoscale_read_seconds_count") == 3


async def test_a_sustained_queue_scales_the_engine_deployment_and_tells_why() -> None:
    h = Harness()
    h.reader.load = {n: (4.0, 10.0) for n in h.engines}
    decisions = await h.run(40)
    up = next(d for d in decisions if d.action == "scale-up")
    assert up.replicas == 6
    assert h.edge.replicas() == 6
    assert len(h.engines) == 6
    assert h.status["autoscaling"]["desiredReplicas"] == 6
    assert h.status["desiredReplicas"] == 6
    assert h.status["autoscaling"]["lastScaleTime"] == h.status["autoscaling"]["lastEvaluationTime"]
    [(kind, reason, message)] = h.told
    assert (kind, reason) == ("Normal", "ScaledUp")
    assert "scaled 3→6: queue 10.0 > 4 per replica for 30s" in message
    assert (
        h.controller.metrics.value(
            "prefixroute_operator_autoscaling_decisions_total",
            model_namespace="serving",
            model="llama",
            action="scale-up",
            dry_run="false",
        )
        == 1
    )
    assert (
        h.controller.metrics.value("prefixroute_operator_desired_replicas", model_namespace="serving", model="llama")
        == 6
    )
    deployment = h.edge.objects[("Deployment", "serving", "llama-engine")]
    assert deployment["spec"]["template"]["metadata"]["annotations"]["prefixroute.io/spec-hash"]  # the whole object


async def test_a_reconcile_with_an_older_body_keeps_the_autoscalers_count() -> None:
    """kopf may hand a reconcile a body from before the autoscaler's last status write;
    the plan is made from the freshest status, so the count is not put back."""
    h = Harness()
    h.reader.load = {n: (4.0, 10.0) for n in h.engines}
    await h.run(40)
    assert h.edge.replicas() == 6
    await h.controller.reconcile(h.body(status={}), h.pods)
    assert h.edge.replicas() == 6
    assert h.body()["spec"]["replicas"] == 3  # the user's spec is never written


async def test_a_hot_spot_is_rebalanced_in_the_ring_before_any_scale_up() -> None:
    h = Harness()
    hot = h.engines[0]
    h.reader.load = {n: (2.0, 0.5) for n in h.engines} | {hot: (12.0, 8.0)}
    await h.run(40)
    assert h.reasons() == ["Rebalanced"]
    assert "hot spot: llama-engine-0" in h.told[0][2]
    assert h.status["autoscaling"]["weights"] == {hot: 0.5}
    assert h.status["autoscaling"]["rebalanced"] == {hot: 0.5}
    ring = {m["pod"]: m["weight"] for m in h.status["ring"]["members"]}
    assert ring == {hot: 0.5, h.engines[1]: 1.0, h.engines[2]: 1.0}
    assert h.edge.replicas() is None
    await h.run(60)
    assert h.reasons() == ["Rebalanced", "Rebalanced", "ScaledUp"], h.told
    assert "persists at ring weight 0.25" in h.told[-1][2]
    assert h.edge.replicas() == 4


async def test_scale_down_drains_the_coldest_pod_which_is_the_one_deleted() -> None:
    h = Harness(replicas=4)
    cold = "llama-engine-2"
    h.reader.hits = {n: 300.0 for n in h.engines} | {cold: 5.0}
    h.reader.load = {cold: (2.0, 0.0)}  # still busy when its drain starts
    decisions = await h.run(70)
    drain = next(d for d in decisions if d.action == "drain")
    assert drain.drain_member == cold
    assert h.reasons() == ["Draining"]
    assert "coldest" in h.told[0][2]
    assert h.edge.annotations[cold] == {DELETION_COST: "-1000"}
    assert h.status["autoscaling"]["weights"] == {cold: 0.0}
    assert h.status["autoscaling"]["draining"]["pod"] == cold
    assert {m["pod"]: m["weight"] for m in h.status["ring"]["members"]}[cold] == 0.0  # out of the routable set
    held = await h.tick()
    assert held.action == "hold"
    assert "draining llama-engine-2" in held.reason
    assert h.edge.replicas() is None
    h.reader.load = {}  # its in-flight requests finished (0.5 each elsewhere)
    h.reader.load = {n: (0.5, 0.0) for n in h.engines} | {cold: (0.0, 0.0)}
    done = await h.tick()
    assert done.action == "scale-down"
    assert h.edge.replicas() == 3
    assert cold not in h.engines
    assert len(h.engines) == 3  # exactly that pod went
    assert h.reasons() == ["Draining", "ScaledDown"]
    assert "llama-engine-2 drained" in h.told[-1][2]
    assert "draining" not in h.status["autoscaling"]


async def test_a_drained_pod_that_survives_its_scale_down_serves_again() -> None:
    """The ReplicaSet deletes a pod that is not ready before it looks at deletion costs: here
    an engine that stopped being ready goes, and the drained one stays. Its weight comes
    back and its low deletion cost goes (it is not the next to go any more)."""
    h = Harness(replicas=3)
    cold = "llama-engine-2"
    h.reader.hits = {n: 300.0 for n in h.engines} | {cold: 5.0}
    h.reader.load = {cold: (0.0, 0.0)}  # idle: drained as soon as its drain starts
    h.pods[0] = pod("llama-engine-0", ip="10.0.0.1", ready=False)  # its readiness probe fails
    decisions = []
    while not decisions or decisions[-1].action != "scale-down":
        assert len(decisions) < 12, decisions
        decisions.append(await h.tick())
    assert [d.action for d in decisions if d.action != "hold"] == ["drain", "scale-down"]
    assert h.status["autoscaling"]["weights"] == {cold: 0.0}  # kept at 0 with the scale-down
    assert h.edge.replicas() == 2
    assert h.engines == ["llama-engine-1", cold]  # the not-ready pod went
    back = await h.tick()
    assert back.restored == (cold,)
    assert back.weights[cold] == 1.0
    assert h.edge.annotations[cold] == {}
    assert h.edge.pod_annotations[-1] == (cold, {DELETION_COST: None})
    assert h.status["autoscaling"]["weights"] == {}
    assert {m["pod"]: m["weight"] for m in h.status["ring"]["members"]}[cold] == 1.0
    assert h.reasons()[-1] == "Restored"
    assert f"{cold} stayed when replicas went down to 2" in h.told[-1][2]


async def test_a_cancelled_drain_takes_the_deletion_cost_back() -> None:
    h = Harness()
    await h.run(70)
    victim = h.memory.state.draining.member
    h.reader.load = {n: (20.0, 20.0) for n in h.engines}
    await h.run(20)
    assert h.memory.state.draining is None
    assert h.edge.pod_annotations[-1] == (victim, {DELETION_COST: None})
    assert victim not in {n for n, a in h.edge.annotations.items() if a}
    assert "DrainCancelled" in h.reasons()


async def test_dry_run_recommends_once_and_touches_nothing() -> None:
    h = Harness(dryRun=True)
    h.reader.load = {n: (4.0, 10.0) for n in h.engines}
    await h.run(120)
    assert h.edge.replicas() is None
    assert h.edge.pod_annotations == []
    assert h.reasons() == ["ScaleRecommended"]
    assert "dry run, not applied: scale-up: scaled 3→6" in h.told[0][2]
    auto = h.status["autoscaling"]
    assert auto["dryRun"] is True
    assert auto["recommendedReplicas"] == 6
    assert "desiredReplicas" not in auto
    assert h.status["desiredReplicas"] == 3  # spec.replicas rules in dry run
    assert (
        h.controller.metrics.value(
            "prefixroute_operator_autoscaling_decisions_total",
            model_namespace="serving",
            model="llama",
            action="scale-up",
            dry_run="true",
        )
        >= 1
    )


async def test_without_signals_it_holds_warns_once_and_recovers_by_itself() -> None:
    h = Harness()
    await h.tick()
    h.reader.fault = MetricsUnavailable(
        "Prometheus at http://prometheus:9090 failed: ConnectionError: refused", UNREACHABLE
    )
    h.reader.load = {n: (4.0, 10.0) for n in h.engines}  # would scale up, if anyone could see it
    for _ in range(5):
        assert await h.tick() is None
    condition = find(h.status["conditions"], "MetricsAvailable")
    assert (condition["status"], condition["reason"]) == ("False", "PrometheusUnreachable")
    assert "ConnectionError: refused" in condition["message"]
    assert condition["lastTransitionTime"] == "2026-01-01T12:00:10Z"  # the first failing tick, not the last
    assert h.reasons() == ["MetricsUnavailable"]
    assert h.told[0][0] == "Warning"
    assert "holding 3 replicas" in h.status["autoscaling"]["reason"]
    assert h.status["autoscaling"]["desiredReplicas"] == 3
    assert "hitRate" not in h.status
    assert h.edge.replicas() is None
    assert (
        h.controller.metrics.value(
            "prefixroute_operator_autoscaling_metrics_errors_total",
            model_namespace="serving",
            model="llama",
            reason=UNREACHABLE,
        )
        == 5
    )
    h.reader.fault = MetricsUnavailable("no vLLM metrics in Prometheus for engine pods x", MISSING)
    await h.tick()
    assert h.reasons() == ["MetricsUnavailable", "MetricsUnavailable"]  # a new problem is told
    h.reader.fault = None
    decision = await h.tick()
    assert decision.action == "hold"
    assert find(h.status["conditions"], "MetricsAvailable")["status"] == "True"
    assert h.reasons()[-1] == "MetricsRecovered"
    # the windows start again: no scale-up on the first samples after the gap
    assert [d.action for d in await h.run(20)] == ["hold", "hold"]
    assert (await h.tick()).action == "scale-up"


async def test_holds_and_faults_are_logged_when_they_are_news_not_every_tick(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="prefixroute.controller.autoscale_tick")
    h = Harness(maxReplicas=3)

    def logged(level: int) -> list[str]:
        return [r.getMessage() for r in caplog.records if r.levelno == level]

    assert [d.action for d in await h.run(30)] == ["hold"] * 3
    assert logged(logging.INFO) == []
    assert len(logged(logging.DEBUG)) == 3
    h.reader.load = {n: (4.0, 10.0) for n in h.engines}  # overloaded, and already at maxReplicas
    await h.run(80)
    assert h.reasons() == ["AtMaxReplicas"]
    [told] = logged(logging.INFO)
    assert "already at maxReplicas 3" in told
    h.reader.fault = MetricsUnavailable("Prometheus at http://prometheus:9090 failed", UNREACHABLE)
    for _ in range(3):
        await h.tick()
    assert len(logged(logging.WARNING)) == 1
    assert len(logged(logging.INFO)) == 1


async def test_a_restarted_operator_resumes_a_drain_from_status() -> None:
    h = Harness(replicas=4)
    h.reader.hits = {n: 300.0 for n in h.engines} | {"llama-engine-1": 1.0}
    h.reader.load = {"llama-engine-1": (3.0, 0.0)}
    await h.run(70)
    assert h.status["autoscaling"]["draining"]["pod"] == "llama-engine-1"
    h.memory = AutoscalerMemory()  # the operator restarted: kopf's memo is gone
    h.reader.load = {"llama-engine-1": (0.0, 0.0)}
    decision = await h.tick()
    assert decision.action == "scale-down"
    assert decision.drain_member == "llama-engine-1"
    assert "llama-engine-1" not in h.engines


async def test_a_failed_apply_is_retried_at_the_next_tick() -> None:
    h = Harness()
    h.reader.load = {n: (4.0, 10.0) for n in h.engines}
    await h.run(30)
    h.edge.fail["Deployment"] = ApplyFailed("Deployment llama-engine: etcdserver: request timed out", status=500)
    with pytest.raises(ApplyFailed):
        await h.tick()
    h.clock.advance(10)
    assert h.status["autoscaling"]["desiredReplicas"] == 6
    assert h.edge.replicas() is None
    del h.edge.fail["Deployment"]
    h.reader.load = {n: (0.5, 0.0) for n in h.engines}
    await h.tick()
    assert h.edge.replicas() == 6


async def test_pods_that_just_turned_ready_may_lack_metrics() -> None:
    h = Harness()
    fresh = copy.deepcopy(h.pods[0])
    fresh["metadata"]["name"] = "llama-engine-9"
    fresh["status"]["conditions"][1]["lastTransitionTime"] = "2026-01-01T11:59:50Z"  # 10 s before the tick
    h.pods.append(fresh)
    await h.tick()
    assert h.reader.calls[0]["young"] == ["llama-engine-9"]


async def test_deleting_the_model_forgets_its_series() -> None:
    h = Harness()
    await h.tick()
    assert h.controller.metrics.value("prefixroute_operator_replicas", model_namespace="serving", model="llama") == 3
    h.controller.forget("serving", "llama")
    assert h.controller.metrics.value("prefixroute_operator_replicas", model_namespace="serving", model="llama") is None


async def test_a_fleet_still_starting_is_unknown_not_a_fault() -> None:
    from prefixroute.autoscaling.prometheus_signals import NO_ENGINE_PODS

    h = Harness()
    h.reader.fault = MetricsUnavailable("the resource has no ready engine pods to read metrics for", NO_ENGINE_PODS)
    await h.tick()
    condition = find(h.status["conditions"], "MetricsAvailable")
    assert (condition["status"], condition["reason"]) == ("Unknown", "NoEnginePods")
    h.reader.fault = None
    await h.tick()
    assert h.told == []
    assert find(h.status["conditions"], "MetricsAvailable")["status"] == "True"


async def test_an_idle_fleet_scales_to_zero_and_held_requests_bring_an_engine_back() -> None:
    h = Harness(replicas=1, minReplicas=0, scaleToZeroIdleSeconds=30)
    h.reader.load = {n: (0.0, 0.0) for n in h.engines}
    decisions = []
    while not decisions or decisions[-1].action != "scale-down":
        assert len(decisions) < 10, [d.reason for d in decisions]
        decisions.append(await h.tick())
    assert decisions[-1].replicas == 0
    assert h.edge.replicas() == 0
    assert h.engines == []
    assert h.told[-1][1] == "ScaledToZero"
    assert "no request in flight, finished or held for 30s" in h.told[-1][2]
    assert h.status["autoscaling"]["desiredReplicas"] == 0
    await h.tick()  # at zero, nothing held: it rests
    ready = find(h.status["conditions"], "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "ScaledToZero")
    h.reader.held = 2
    woken = await h.tick()
    assert (woken.action, woken.replicas) == ("scale-up", 1)
    assert h.edge.replicas() == 1
    assert len(h.engines) == 1
    assert h.told[-1][1] == "ScaledFromZero"
    assert "2 request(s) held" in h.told[-1][2]
    held = h.controller.metrics.value("prefixroute_operator_held_requests", model_namespace="serving", model="llama")
    assert held == 2


async def test_models_due_together_are_read_in_one_call_and_decide_each_on_its_own() -> None:
    h = Harness()
    batches: list[int] = []
    read = h.reader

    def reader(requests, now):
        batches.append(len(requests))
        return read(requests, now)

    h.autoscaler.read = reader
    other = model_body(h.spec, name="mistral", uid="uid-2", status={})
    other_pods = [pod("mistral-engine-0", ip="10.0.2.1", model="mistral")]
    retrying = AutoscalerMemory(uid="uid-2", state=PolicyState(), unsynced=True)  # its last apply failed
    not_due = AutoscalerMemory(next_due=float("inf"))
    h.edge.fail["Deployment"] = ApplyFailed("Deployment mistral-engine: timed out", status=500)
    outcomes = await h.autoscaler.tick_many(
        [(h.body(), h.pods, h.memory), (other, other_pods, retrying), (other, other_pods, not_due)]
    )
    assert batches == [2]  # one read for both due models; the one not due is not asked for
    assert outcomes[0].action == "hold"
    assert isinstance(outcomes[1], ApplyFailed)
    assert outcomes[2] is None
    assert h.controller.metrics.value("prefixroute_operator_autoscale_tick_seconds_count") == 2


# --- Prometheus over https ---------------------------------------------------------------------

HTTPS = "https://prometheus:9090"


@pytest.fixture(scope="module")
def ca_pem(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    return make_authority(tmp_path_factory.mktemp("pki"), "prometheus-ca").pem


def _trusting(h: Harness, folder) -> list:
    """The harness's scripted signals behind the real trust over the fake edge, as
    PrometheusReader asks it before any query; returns the ``verify`` of each read."""
    trust, inner, verified = PrometheusTrust(read=h.edge.read_data, folder=folder), h.reader, []

    def read(requests, now):
        out = []
        for request in requests:
            try:
                verified.append(trust(request.namespace, request.settings.prometheus_tls))
            except MetricsUnavailable as exc:
                out.append(exc)
            else:
                out += inner([request], now)
        return out

    h.autoscaler.read = read
    return verified


async def test_a_prometheus_ca_that_cannot_be_used_holds_warns_once_per_reason_and_recovers(
    tmp_path, ca_pem: bytes
) -> None:
    h = Harness(prometheus=HTTPS, prometheusTLS={"ca": {"secretKeyRef": {"name": "prom-ca"}}})
    verified = _trusting(h, tmp_path)
    for _ in range(3):
        assert await h.tick() is None
    condition = find(h.status["conditions"], "MetricsAvailable")
    assert (condition["status"], condition["reason"]) == ("False", CA_UNAVAILABLE)
    assert condition["message"] == (
        "the Prometheus CA's Secret serving/prom-ca (spec.autoscaling.prometheusTLS.ca) does not exist"
    )
    assert h.told == [
        ("Warning", "MetricsUnavailable", f"holding 3 replicas: {condition['message']}")
    ]  # one Warning over three ticks, and nothing read without verification
    h.edge.data[("Secret", "serving", "prom-ca")] = {"ca.crt": b"not a certificate"}
    assert await h.tick() is None
    assert find(h.status["conditions"], "MetricsAvailable")["reason"] == CA_INVALID
    assert h.reasons() == ["MetricsUnavailable", "MetricsUnavailable"]
    h.edge.data[("Secret", "serving", "prom-ca")] = {"ca.crt": ca_pem}
    assert (await h.tick()).action == "hold"
    assert find(h.status["conditions"], "MetricsAvailable")["status"] == "True"
    assert h.reasons()[-1] == "MetricsRecovered"
    assert verified == [verified[0]]
    assert await asyncio.to_thread(Path(verified[0]).read_bytes) == ca_pem


async def test_reading_unverified_warns_once_per_change_not_per_tick() -> None:
    h = Harness(prometheus=HTTPS, prometheusTLS={"insecureSkipVerify": True}, scaleDownWindowSeconds=3600)

    def told() -> list[str]:
        return [m.split(" is not verified")[0] for t, r, m in h.told if (t, r) == ("Warning", "PrometheusNotVerified")]

    await h.run(40)
    assert h.reasons() == ["PrometheusNotVerified"]
    assert told() == [f"the certificate of Prometheus at {HTTPS}"]
    assert "not verified" in find(h.status["conditions"], "MetricsAvailable")["message"]
    h.spec["autoscaling"]["prometheusTLS"] = {"insecureSkipVerify": False}
    await h.run(20)
    assert len(told()) == 1
    assert "not verified" not in find(h.status["conditions"], "MetricsAvailable")["message"]
    h.spec["autoscaling"]["prometheusTLS"] = {"insecureSkipVerify": True}  # turned on again: said again
    await h.run(20)
    h.spec["autoscaling"]["prometheus"] = "https://prometheus-2:9090"  # another Prometheus: said for it
    await h.run(20)
    h.memory = AutoscalerMemory()  # an operator restart: said once more, by the new process
    await h.run(20)
    assert [t.rsplit(" ", 1)[1] for t in told()] == [
        HTTPS,
        HTTPS,
        "https://prometheus-2:9090",
        "https://prometheus-2:9090",
    ]
    assert h.reasons() == ["PrometheusNotVerified"] * 4
