"""``python -m e2e.operator_scale --models N [--replicas R] --json FILE``: the operator as it is
deployed, in front of N PrefixRoutedModels (issue #27).

On a local control plane of its own (``--cluster`` names another; it is taken down at the end
unless ``--keep``), with the operator installed as users install it (the kustomize overlay;
a real process under the pod runner, so its memory and CPU are measured), it

1. creates N models of R engine replicas and one router each, every pod a KWOK fake
   (``e2e.scale_fleet``), autoscaling on against the cluster's Prometheus, which scrapes
   one stand-in page of every engine's metrics; and waits until all are Ready;
2. churns the engine pods at a steady rate (``--churn-rate`` changes a second for
   ``--churn-seconds``): in turn it deletes a ring member, marks another not Ready (its
   status' Ready condition, as a failing probe would) and makes an earlier one Ready again,
   timing each change until status.ring shows it;
3. lets the fleet settle (``--settle-seconds`` after the last ring update, and until every
   ring weight is back to 1: every slow start over), then stays idle for ``--idle-seconds`` and
   counts the operator's requests in the API server's own metrics (a FlowSchema of its own);

and writes the figures as JSON (``e2e.scale_figures.REQUIRED``, and more):

- ``ready_seconds``: from the first create to the last model Ready;
- ``reconcile_p50_s`` / ``_p99_s``: from a model's create to its first status with an
  observedGeneration (its first reconcile done, the wait for its turn included);
  ``reconcile_duration_*`` is the operator's own histogram of one reconcile;
- ``ring_update_p50_s`` / ``_p99_s``: from a churn change (the call that made it) to the
  model event whose ring shows it, over the run's own changes; ``ring_join_*``: the
  replacement pods' joins, from the moment this run's watch saw them Ready;
  ``pod_watch_*``: from the change to this run's own pod watch seeing it, the control
  plane's share (the operator's watch waits as long before it can act);
  ``ring_after_pod_watch_*``: from there to the ring, per change: the operator's part (its
  own watch, its write and the write's way back to this run);
  ``op_*``: the operator's own histograms over the churn: ``op_ring_update`` (its handler
  starting to the ring written), ``op_lane_wait`` and ``op_status_write`` (a pod-watch write
  waiting for its lane's thread, and the API server answering it; ``op_background_*`` the
  same for writes that may wait), ``op_loop_lag`` (how late its event loop wakes);
- ``churn_cpu_seconds``: CPU seconds of each control-plane process, the operator, this run
  and the rest of the machine (``other``) from the first churn change to the last ring
  update; ``churn_machine_busy``: the share of all cores busy then;
- ``operator_rss_mib`` (peak, VmHWM), ``operator_cpu_seconds`` (from the first create to the
  end), ``idle_cpu_seconds_per_min``;
- ``idle_api_requests_per_min``: the operator's requests while nothing changes;
- ``autoscale_tick_p50_s`` / ``_p99_s``: the operator's histogram of its ticks, from every
  model's first fresh signals to the end (churn and idle); the first ticks after Ready write
  every model's first decision and belong to the start, as its first reconcile does.
  ``autoscale_read_*``: the same rounds' reads of the signals from Prometheus (each round
  one read for every due model), the part of a tick that is Prometheus'.

Figures depend on the machine and its load: ``load_average`` is recorded at the start and the
end. Needs root (the cluster lives in a network namespace).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import random
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e import build, daemon_records, netns, pins, product, scale_figures, scale_fleet
from e2e.kube import ApiError, Kube
from e2e.layout import HOST_IP, Cluster
from e2e.scale_watch import Expectation, Fleet, Watch
from e2e.waiting import absent, wait_for

LOG = logging.getLogger("operator_scale")
OPERATOR_METRICS_PORT = 8080
DOWN_SECONDS = 2.0
TICK = "prefixroute_operator_autoscale_tick_seconds"
RECONCILE = "prefixroute_operator_reconcile_seconds"
READ = "prefixroute_operator_autoscale_read_seconds"
IDLE_AFTER_RAMPS = 10.0  # seconds between the last ring weight reaching 1 and the idle window
PAGE_MAX_AGE = 10.0  # the operator renders /metrics at most this often (controller.metrics)
INSIDE = (  # (figure, histogram, labels): where a ring update's time goes inside the operator
    ("op_ring_update", "prefixroute_operator_ring_update_seconds", {}),
    ("op_lane_wait", "prefixroute_operator_status_lane_wait_seconds", {"lane": "watch"}),
    ("op_status_write", "prefixroute_operator_status_write_seconds", {"lane": "watch"}),
    ("op_background_lane_wait", "prefixroute_operator_status_lane_wait_seconds", {"lane": "background"}),
    ("op_background_write", "prefixroute_operator_status_write_seconds", {"lane": "background"}),
    ("op_loop_lag", "prefixroute_operator_loop_lag_seconds", {}),
)


@dataclass(frozen=True)
class Settings:
    models: int
    replicas: int = 4
    churn_rate: float = 10.0
    churn_seconds: float = 60.0
    settle_seconds: float = 70.0  # past the engines' 60 s slow start, so idle is idle
    idle_seconds: float = 60.0
    interval_seconds: int = 15  # spec.autoscaling.intervalSeconds (the default)
    ready_timeout: float | None = None  # default: 120 s + 2 s a model
    create_threads: int = 4


# --- the operator's process and its figures ------------------------------------------------------


def operator_pid(pod_name: str) -> int:
    """The operator's Python process under the pod runner: the one process with the pod's
    name in its environment whose command line runs ``operator`` (the largest, should the
    runner's wrappers match too)."""
    marker = f"POD_NAME={pod_name}".encode()
    found: list[tuple[int, int]] = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            status = Path(f"/proc/{entry}/status").read_text()
        except OSError:
            continue
        if marker in environ and b"operator" in argv:
            found.append((scale_figures.proc_memory_kib(status).get("VmRSS", 0), int(entry)))
    if not found:
        raise RuntimeError(f"no process of the operator pod {pod_name}")
    return max(found)[1]


def cpu_seconds(pid: int) -> float:
    return scale_figures.proc_cpu_seconds(Path(f"/proc/{pid}/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def memory_mib(pid: int) -> dict[str, float]:
    kib = scale_figures.proc_memory_kib(Path(f"/proc/{pid}/status").read_text())
    return {"rss": kib.get("VmRSS", 0) / 1024, "peak": kib.get("VmHWM", 0) / 1024}


def cpu_readings(pids: Mapping[str, int]) -> dict[str, float]:
    """Each named process' CPU seconds so far (those still running)."""
    out = {}
    for name, pid in pids.items():
        with contextlib.suppress(OSError, ValueError, IndexError):
            out[name] = cpu_seconds(pid)
    return out


def machine_cpu() -> tuple[float, float]:
    return scale_figures.machine_cpu_seconds(Path("/proc/stat").read_text(), os.sysconf("SC_CLK_TCK"))


def load_average() -> list[float]:
    return scale_figures.load_average(Path("/proc/loadavg").read_text())


def get_text(url: str, timeout: float = 30) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return str(resp.read().decode())


# --- the run ----------------------------------------------------------------------------------


@contextlib.contextmanager
def _watching(kube: Kube, namespace: str, fleet: Fleet) -> Iterator[None]:
    watches = [
        Watch(kube, f"/apis/{product.GROUP}/{product.VERSION}/namespaces/{namespace}/{product.PLURAL}", fleet.on_model),
        Watch(kube, f"/api/v1/namespaces/{namespace}/pods", fleet.on_pod),
    ]
    for w in watches:
        w.start()
    try:
        for w in watches:
            if not w.listed.wait(60):
                raise RuntimeError(f"{w.path}: no listing in 60 s")
        yield
    finally:
        for w in watches:
            w.stopping.set()


@contextlib.contextmanager
def _exporting(state: Path, namespace: str, fleet: Fleet) -> Iterator[None]:
    """The engines' metrics page, kept to the engine pods the watch knows."""
    stop = threading.Event()
    with scale_fleet.EngineExporter(HOST_IP, state / "exporters.json") as exporter:

        def follow() -> None:
            while not stop.is_set():
                if fleet.engines_changed.wait(1.0):
                    fleet.engines_changed.clear()
                    exporter.set_pods((namespace, name) for name, _ in fleet.engine_pods())
                    stop.wait(5.0)  # a page at most every 5 s, however fast pods come

        thread = threading.Thread(target=follow, name="exporter pods", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join(5)


def _create_models(kube: Kube, namespace: str, s: Settings, fleet: Fleet, prometheus: str) -> None:
    def create(i: int) -> None:
        doc = scale_fleet.model(f"m-{i:04d}", s.replicas, prometheus, s.interval_seconds)
        kube.post(product.prm_path(namespace), doc)
        fleet.created(doc["metadata"]["name"], time.monotonic())

    with ThreadPoolExecutor(s.create_threads) as pool:
        list(pool.map(create, range(s.models)))


def _set_ready(kube: Kube, namespace: str, pod: str, ready: bool) -> None:
    """What a kubelet reports when a readiness probe starts failing, or passes again."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    value = "True" if ready else "False"
    conditions = [
        {"type": kind, "status": value, "lastTransitionTime": now, **({} if ready else {"reason": "ScaleTest"})}
        for kind in ("Ready", "ContainersReady")
    ]
    kube.patch(f"/api/v1/namespaces/{namespace}/pods/{pod}/status", {"status": {"conditions": conditions}})


def _churn(kube: Kube, namespace: str, s: Settings, fleet: Fleet, say: Callable[[str], None]) -> dict[str, Any]:
    """``churn_rate`` changes a second, in turn: delete a ring member, make one not Ready,
    make an earlier one Ready again — one whose leaving the ring was seen, DOWN_SECONDS ago at
    least (a pod back before its ring was written would make a change no ring ever shows);
    a delete when none waits. The calls go out from a pool, so a slow answer does not slow the
    rate. Returns what was done."""
    rng = random.Random(27)
    down: list[tuple[str, str, float]] = []  # (model, pod, when) made not Ready, oldest first
    busy: set[str] = set()
    done = Counter({"delete": 0, "unready": 0, "ready": 0, "skipped": 0})
    lock = threading.Lock()

    def call(kind: str, pod: str) -> None:
        try:
            if kind == "delete":
                kube.delete(f"/api/v1/namespaces/{namespace}/pods/{pod}")
            else:
                _set_ready(kube, namespace, pod, kind == "ready")
        except ApiError as exc:  # a pod gone under us: count it, go on
            LOG.info("churn %s %s: %s", kind, pod, exc)
            with lock:
                done["skipped"] += 1

    fleet.time_joins = True
    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        for i in range(int(s.churn_rate * s.churn_seconds)):
            time.sleep(max(0.0, start + i / s.churn_rate - time.monotonic()))
            kind = ("delete", "unready", "ready")[i % 3]
            back = next(
                (d for d in down if time.monotonic() - d[2] >= DOWN_SECONDS and not fleet.in_ring(d[0], d[1])), None
            )
            if kind == "ready" and back is None:
                kind = "delete"
            if kind == "ready" and back is not None:
                down.remove(back)
                model, pod, _ = back
                busy.discard(pod)
            else:
                members = [
                    (name, p.model)
                    for name, p in fleet.engine_pods()
                    if p.ready and not p.terminating and name not in busy and fleet.in_ring(p.model, name)
                ]
                if not members:
                    with lock:
                        done["skipped"] += 1
                    continue
                pod, model = rng.choice(members)
                busy.add(pod)
                if kind == "unready":
                    down.append((model, pod, time.monotonic()))
            fleet.expect(Expectation(model, pod, kind == "ready", time.monotonic(), kind))
            pool.submit(call, kind, pod)
            done[kind] += 1
        elapsed = time.monotonic() - start
        with contextlib.suppress(AssertionError):  # their leaving the ring seen first, as above
            wait_for(lambda: not any(fleet.in_ring(m, p) for m, p, _ in down), 60, 0.2, what="the last not Ready")
        for model, pod, _ in down:  # every pod ends Ready, so the idle fleet is whole
            fleet.expect(Expectation(model, pod, True, time.monotonic(), "ready"))
            pool.submit(call, "ready", pod)
            done["ready"] += 1
    say(f"churn: {dict(done)} in {elapsed:.1f}s")
    changes = done["delete"] + done["unready"] + done["ready"] - done["skipped"]
    return {"churn_changes": changes, "churn_seconds": elapsed, "churn": dict(done)}


def _operator_metrics(pod: dict[str, Any]) -> str:
    return get_text(f"http://{pod['status']['podIP']}:{OPERATOR_METRICS_PORT}/metrics")


def _quantiles(prefix: str, after: str, before: str, histogram: str, **labels: str) -> dict[str, Any]:
    counted = scale_figures.bucket_increase(
        scale_figures.buckets(after, histogram, **labels), scale_figures.buckets(before, histogram, **labels)
    )
    return {
        f"{prefix}_p50_s": scale_figures.histogram_quantile(0.5, counted),
        f"{prefix}_p99_s": scale_figures.histogram_quantile(0.99, counted),
        f"{prefix}_count": counted.get(float("inf"), 0.0),
    }


def _operator_requests(kube: Kube) -> float:
    text = kube.request("GET", "/metrics").text
    return scale_figures.total(text, scale_figures.APF_DISPATCHED, flow_schema=scale_fleet.FLOW_SCHEMA)


def _apply_flow_schema(kube: Kube) -> None:
    path = f"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{scale_fleet.FLOW_SCHEMA}"
    with contextlib.suppress(ApiError):
        kube.delete(path)
    kube.post("/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", scale_fleet.flow_schema())


def _add_nodes(kube: Kube, count: int) -> list[str]:
    names = []
    for i in range(count):
        node = scale_fleet.scale_node(i)
        try:
            kube.post("/api/v1/nodes", node)
        except ApiError as exc:
            if exc.status != 409:
                raise
        names.append(node["metadata"]["name"])
    wait_for(
        lambda: all(product.pod_ready(kube.get(f"/api/v1/nodes/{n}")) for n in names), 60, 0.5, what="scale nodes Ready"
    )
    return names


def run(
    kube: Kube,
    kubectl: product.Kubectl,
    state: Path,
    prometheus: str,
    s: Settings,
    say: Callable[[str], None] = print,
    clean: bool = True,
    daemons: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """One measurement on a running cluster (this process inside its network namespace).
    ``daemons``: the control plane's processes by name, whose CPU under churn is recorded
    beside the operator's and this run's own."""
    result: dict[str, Any] = {"models": s.models, "replicas": s.replicas, "settings": asdict(s)}
    result["load_average_start"] = load_average()
    operator = product.install_operator(kubectl, kube)
    pid = operator_pid(operator["metadata"]["name"])
    say(f"operator pod {operator['metadata']['name']}, pid {pid}")
    _apply_flow_schema(kube)
    nodes = _add_nodes(kube, scale_fleet.nodes_for(s.models * (s.replicas + 1)))
    namespace = f"opscale-{uuid.uuid4().hex[:5]}"
    kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default"), 30, what="default SA")
    fleet = Fleet()
    try:
        with _watching(kube, namespace, fleet), _exporting(state, namespace, fleet):
            before, before_at = _operator_metrics(operator), time.monotonic()
            cpu_start = cpu_seconds(pid)
            started = time.monotonic()
            _create_models(kube, namespace, s, fleet, prometheus)
            say(f"{s.models} models created in {time.monotonic() - started:.1f}s")
            timeout = s.ready_timeout or 120 + 2 * s.models
            try:
                wait_for(
                    lambda: sum(m.ready is not None for m in fleet.snapshot().values()) >= s.models,
                    timeout,
                    1.0,
                    what=f"{s.models} models Ready",
                )
            except AssertionError:
                return _unfinished(result, fleet, pid, timeout, say)
            seen, ready_at = fleet.snapshot(), time.monotonic()
            result["ready_seconds"] = max(m.ready for m in seen.values() if m.ready) - started
            reconciles = [m.observed - m.created for m in seen.values() if m.observed and m.created]
            result["reconcile_p50_s"] = scale_figures.percentile(reconciles, 50)
            result["reconcile_p99_s"] = scale_figures.percentile(reconciles, 99)
            # A page rendered after the last reconcile ended (all Ready), not merely after `before`:
            # a cached page from before the last ones counted 3 of 5 reconciles in a CI run.
            time.sleep(max(0.0, max(before_at, ready_at) + PAGE_MAX_AGE + 1 - time.monotonic()))
            after_ready = _operator_metrics(operator)
            result.update(_quantiles("reconcile_duration", after_ready, before, RECONCILE))
            say(
                f"all Ready after {result['ready_seconds']:.1f}s; first reconcile p50 "
                f"{result['reconcile_p50_s']:.2f}s p99 {result['reconcile_p99_s']:.2f}s"
            )
            try:
                wait_for(
                    lambda: all(m.metrics == "True/SignalsFresh" for m in fleet.snapshot().values()),
                    max(120, 8 * s.interval_seconds),
                    1.0,
                    what="every model's autoscaler reading fresh signals",
                )
            except AssertionError as exc:
                say(str(exc))
            steady = _operator_metrics(operator)  # ticks from here: the first ones, writing it all, are startup
            pids = {**(daemons or {}), "operator": pid, "this run": os.getpid()}
            cpu_before, machine_before, churn_start = cpu_readings(pids), machine_cpu(), time.monotonic()
            result.update(_churn(kube, namespace, s, fleet, say))
            try:
                wait_for(lambda: fleet.waiting_for() == 0, 120, 0.5, what="every churn change in status.ring")
            except AssertionError as exc:
                say(f"{exc}: {[(w.kind, w.model, w.pod) for w in fleet.unsettled()][:10]}")
            settled, unsettled = time.monotonic(), fleet.waiting_for()
            machine_after, cpu_after = machine_cpu(), cpu_readings(pids)
            machine = (machine_after[0] - machine_before[0], machine_after[1] - machine_before[1])
            result["churn_cpu_seconds"] = scale_figures.cpu_shares(cpu_before, cpu_after, machine)
            result["churn_wall_seconds"] = time.monotonic() - churn_start
            time.sleep(PAGE_MAX_AGE + 1)  # the operator's page, rendered after the last ring update
            churned = _operator_metrics(operator)
            for figure, histogram, labels in INSIDE:
                result.update(_quantiles(figure, churned, steady, histogram, **labels))
            result["churn_machine_busy"] = machine[0] / machine[1] if machine[1] > 0 else None
            say(
                f"CPU seconds under churn ({result['churn_wall_seconds']:.0f}s, "
                f"{os.cpu_count()} cores {100 * (result['churn_machine_busy'] or 0):.0f}% busy): "
                + ", ".join(
                    f"{k} {v:.0f}" for k, v in sorted(result["churn_cpu_seconds"].items(), key=lambda kv: -kv[1])
                )
            )
            own = [secs for want, secs in fleet.settled if want.kind != "join"]
            joins = [secs for want, secs in fleet.settled if want.kind == "join"]
            result["ring_update_p50_s"] = scale_figures.percentile(own, 50)
            result["ring_update_p99_s"] = scale_figures.percentile(own, 99)
            result["ring_update_max_s"] = max(own, default=None)
            result["ring_updates"] = len(own)
            result["ring_updates_unsettled"] = unsettled
            echoed = list(fleet.echoed)
            result["pod_watch_p50_s"] = scale_figures.percentile(echoed, 50)
            result["pod_watch_p99_s"] = scale_figures.percentile(echoed, 99)
            after_echo = fleet.after_echo()
            result["ring_after_pod_watch_p50_s"] = scale_figures.percentile(after_echo, 50)
            result["ring_after_pod_watch_p99_s"] = scale_figures.percentile(after_echo, 99)
            result["ring_join_p50_s"] = scale_figures.percentile(joins, 50)
            result["ring_join_p99_s"] = scale_figures.percentile(joins, 99)
            result["ring_joins"] = len(joins)
            say(
                f"ring updates: {len(own)}, p50 {result['ring_update_p50_s']}, p99 {result['ring_update_p99_s']} "
                f"({result['ring_updates_unsettled']} unsettled); replacement joins: {len(joins)}; the changes "
                f"seen by this run's own pod watch: p50 {result['pod_watch_p50_s']}, p99 {result['pod_watch_p99_s']}; "
                f"from there to the ring: p50 {result['ring_after_pod_watch_p50_s']}, "
                f"p99 {result['ring_after_pod_watch_p99_s']}"
            )
            say(
                "inside the operator (p50/p99 s): "
                + ", ".join(
                    f"{f} {result[f'{f}_p50_s']}/{result[f'{f}_p99_s']} (n={result[f'{f}_count']:.0f})"
                    for f, _, _ in INSIDE
                )
            )
            fleet.time_joins = False
            try:  # idle is idle only once the last replacement's slow start is over
                wait_for(lambda: not any(m.ramping for m in fleet.snapshot().values()), 300, 1.0, what="slow starts")
            except AssertionError as exc:
                say(str(exc))
            result["ramps_over_seconds"] = time.monotonic() - settled
            time.sleep(max(IDLE_AFTER_RAMPS, settled + s.settle_seconds - time.monotonic()))
            requests_before, cpu_before, idle_start = _operator_requests(kube), cpu_seconds(pid), time.monotonic()
            time.sleep(s.idle_seconds)
            requests_after, cpu_after = _operator_requests(kube), cpu_seconds(pid)
            idle = time.monotonic() - idle_start
            result["idle_api_requests_per_min"] = scale_figures.per_minute(requests_before, requests_after, idle)
            result["idle_cpu_seconds_per_min"] = scale_figures.per_minute(cpu_before, cpu_after, idle)
            end = _operator_metrics(operator)
            result.update(_quantiles("autoscale_tick", end, steady, TICK))
            result.update(_quantiles("autoscale_read", end, steady, READ))
            result["operator_cpu_seconds"] = cpu_seconds(pid) - cpu_start
            memory = memory_mib(pid)
            result["operator_rss_mib"] = memory["peak"]
            result["operator_rss_end_mib"] = memory["rss"]
            result["load_average_end"] = load_average()
            result["metrics_available"] = dict(Counter(m.metrics for m in fleet.snapshot().values()))
            say(
                f"idle: {result['idle_api_requests_per_min']:.1f} operator requests/min, "
                f"{result['idle_cpu_seconds_per_min']:.2f} CPU s/min; ticks p50 {result['autoscale_tick_p50_s']} "
                f"p99 {result['autoscale_tick_p99_s']} (the rounds' reads p50 {result['autoscale_read_p50_s']} "
                f"p99 {result['autoscale_read_p99_s']}); RSS peak {memory['peak']:.0f} MiB; "
                f"CPU {result['operator_cpu_seconds']:.0f}s"
            )
    finally:
        if clean:
            _clean(kube, namespace, nodes, s)
    return result


def _unfinished(
    result: dict[str, Any], fleet: Fleet, pid: int, timeout: float, say: Callable[[str], None]
) -> dict[str, Any]:
    """Not every model was Ready in time: what is known, the other figures None."""
    seen = fleet.snapshot().values()
    result["ready_models"] = sum(m.ready is not None for m in seen)
    result["reconciled_models"] = sum(m.observed is not None for m in seen)
    result["note"] = f"only {result['ready_models']} models Ready after {timeout:.0f}s; the run stopped there"
    memory = memory_mib(pid)
    result["operator_rss_mib"], result["operator_rss_end_mib"] = memory["peak"], memory["rss"]
    result["load_average_end"] = load_average()
    say(result["note"])
    return {key: None for key in scale_figures.REQUIRED} | result


def _clean(kube: Kube, namespace: str, nodes: list[str], s: Settings) -> None:
    """The namespace first (KWOK deletes its pods at once), then the nodes they were on."""
    with contextlib.suppress(ApiError):
        kube.delete(f"/api/v1/namespaces/{namespace}")
    wait_for(lambda: absent(kube, f"/api/v1/namespaces/{namespace}"), 120 + s.models, 1.0, what=f"{namespace} gone")
    for node in nodes:
        with contextlib.suppress(ApiError):
            kube.delete(f"/api/v1/nodes/{node}")
    with contextlib.suppress(ApiError):
        kube.delete(f"/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/{scale_fleet.FLOW_SCHEMA}")


class _Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path) -> None:
        self.binary, self.kubeconfig = binary, kubeconfig

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(
            [str(self.binary), *args],
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            env=dict(os.environ, KUBECONFIG=str(self.kubeconfig)),
        )
        if check and out.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)} failed ({out.returncode}):\n{out.stderr}")
        return out


def _commit() -> str:
    """The commit measured, read when the run starts (the operator runs the tree's code as it
    is then), with ``-dirty`` when the operator's or this run's code differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=pins.REPO_ROOT).stdout.strip()

    dirty = git("status", "--porcelain", "--", "operator", "e2e")
    return git("rev-parse", "--short", "HEAD") + ("-dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.operator_scale", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--models", type=int, required=True, help="PrefixRoutedModels to create")
    parser.add_argument("--replicas", type=int, default=4, help="engine replicas of each (default 4)")
    parser.add_argument("--json", type=Path, required=True, help="write the figures here")
    parser.add_argument("--churn-rate", type=float, default=10.0, help="pod changes a second (default 10)")
    parser.add_argument("--churn-seconds", type=float, default=60.0, help="how long to churn (default 60)")
    parser.add_argument("--settle-seconds", type=float, default=70.0, help="after churn, before idle (default 70)")
    parser.add_argument("--idle-seconds", type=float, default=60.0, help="the idle window (default 60)")
    parser.add_argument("--cluster", default=None, help="a cluster (network namespace) to use; default: a fresh one")
    parser.add_argument("--keep", action="store_true", help="leave the cluster running (and clean the run's objects)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        raise SystemExit("needs root: the cluster lives in a network namespace")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    settings = Settings(
        models=args.models,
        replicas=args.replicas,
        churn_rate=args.churn_rate,
        churn_seconds=args.churn_seconds,
        settle_seconds=args.settle_seconds,
        idle_seconds=args.idle_seconds,
    )
    cluster = Cluster.from_env(args.cluster or f"pr-opscale-{os.getpid()}")

    def say(message: str) -> None:
        print(f"operator_scale: {message}", file=sys.stderr, flush=True)

    commit = _commit()
    say(f"cluster {cluster.name!r}: up")
    up = [sys.executable, "-m", "e2e.cluster", "--name", cluster.name, "up"] + ([] if args.cluster else ["--restart"])
    subprocess.run(up, check=True, cwd=pins.REPO_ROOT, stdout=sys.stderr)
    netns.enter(cluster.name)
    kube = Kube(str(cluster.admin_kubeconfig))
    kubectl = _Kubectl(build.binaries()["kubectl"], cluster.admin_kubeconfig)
    try:
        daemons = {r.name: r.pid for r in daemon_records.load(cluster.pids) if r.alive()}
        result = run(
            kube,
            kubectl,
            cluster.state,
            cluster.prometheus_url,
            settings,
            say,
            clean=args.keep or bool(args.cluster),
            daemons=daemons,
        )
    finally:
        netns.leave()
        if not (args.keep or args.cluster):
            subprocess.run(
                [sys.executable, "-m", "e2e.cluster", "--name", cluster.name, "down"],
                cwd=pins.REPO_ROOT,
                stdout=sys.stderr,
            )
    result.update({"commit": commit, "finished": datetime.now(UTC).isoformat(timespec="seconds")})
    scale_figures.write_json(args.json, result)
    say(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
