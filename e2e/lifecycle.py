"""Bring a cluster up, restart one of its daemons, take it down.

``up`` writes fresh state (certificates, kubeconfigs, KWOK and Prometheus configuration),
creates the network namespace and starts the daemons in order, each waited on until it
serves. With ``runner_nodes`` there is no KWOK: the pod runner starts before the nodes are
made and keeps them itself (e2e/runnernodes.py), and `up` on a cluster running the other
way takes it down first, so KWOK and the runner never both keep nodes; a failure stops whatever was started and keeps the logs. ``down`` stops the
recorded daemons in reverse order, then anything else left in the namespace (it is ours:
``up`` made it and nothing else starts there), deletes the namespace and the state but the
logs of this and the previous run.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path

from e2e import build, clusterapi, credentials, daemon_records, daemons, kwokconfig, netns, promconfig, sandbox, seed
from e2e.daemon_records import Record
from e2e.layout import HOST_IP, KUBELET_PORT, KWOK_DEFAULT_CIDR, KWOK_SERVER_ADDRESS, POD_CIDR, SERVICE_CIDR, Cluster
from e2e.pins import REPO_ROOT
from prefixroute.cache_folder import cache_dir
from prefixroute.processes import ProcessError, wait_until


def say(msg: str) -> None:
    print(msg, flush=True)


def print_env(c: Cluster) -> None:
    """Export lines for a shell that wants to reach the cluster."""
    bins = build.binaries()
    say("# run commands inside the cluster's network namespace:  python -m e2e.cluster exec -- CMD")
    say(f"export KUBECONFIG={c.admin_kubeconfig}")
    say(f"export PATH={bins['kubectl'].parent}:$PATH")
    say(f"export PREFIXROUTE_NETNS={c.name}")
    say(f"# API server {c.server}   Prometheus {c.prometheus_url}   logs {c.logs}")


def is_up(c: Cluster, runner_nodes: bool = False) -> bool:
    """Every daemon of this kind of cluster recorded and alive, and the API server ready."""
    recs = {r.name: r for r in daemon_records.load(c.pids)}
    if (
        not netns.exists(c.name)
        or set(recs) != set(daemons.names(runner_nodes))
        or not all(r.alive() for r in recs.values())
    ):
        return False
    netns.enter(c.name)
    return clusterapi.api_healthy(c)


def _prepare(c: Cluster, bins: dict[str, Path], runner_nodes: bool) -> None:
    """Fresh state: certificates, kubeconfigs, KWOK (unless ``runner_nodes``) and Prometheus
    configuration."""
    if c.logs.exists():
        prev = c.state / "logs.prev"
        shutil.rmtree(prev, ignore_errors=True)
        c.logs.rename(prev)
    for sub in ("pki", "etcd", "pids", "pods", "prometheus"):
        shutil.rmtree(c.state / sub, ignore_errors=True)
    c.state.mkdir(parents=True, exist_ok=True)
    c.logs.mkdir()
    credentials.write(c)
    if not runner_nodes:
        _write_kwok_config(c, bins)
    (c.state / "prometheus.yml").write_text(promconfig.render(c))
    (c.state / "targets.json").write_text("[]")
    (c.state / "exporters.json").write_text("[]")


def _write_kwok_config(c: Cluster, bins: dict[str, Path]) -> None:
    (c.state / "kwok.yaml").write_text(
        kwokconfig.render(
            bins["kwok"].parent / "stages",
            c.images,
            default_cidr=KWOK_DEFAULT_CIDR,
            node_ip=HOST_IP,
            node_port=KUBELET_PORT,
            server_address=KWOK_SERVER_ADDRESS,
        )
    )
    (c.state / "kwok-home").mkdir(exist_ok=True)


def _daemon_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)  # every daemon is told its own kubeconfig
    return env


def _wait_api_ready(c: Cluster, rec: Record) -> None:
    ctx = credentials.admin_tls(c)
    last = [""]

    def ready() -> bool:
        status, body = clusterapi.get(f"{c.server}/readyz", ctx)
        last[0] = body[-300:]
        return status == 200

    wait_until("kube-apiserver /readyz", ready, 120, rec, detail=lambda: last[0], interval=0.25)


def _exists(c: Cluster, *what: str) -> Callable[[], bool]:
    """A check that `kubectl get <what>` finds something."""
    return lambda: clusterapi.kubectl(c, "get", *what, check=False) != ""


def up(c: Cluster, nodes: list[seed.NodeSpec] | None = None, restart: bool = False, runner_nodes: bool = False) -> None:
    t0 = time.monotonic()
    problem = sandbox.cache_problem(str(cache_dir()))
    if problem:
        raise RuntimeError(f"this cluster's pods could not run: {problem}")
    bins = build.ensure(list(build.DEMO if runner_nodes else build.CLUSTER), quiet=True)
    if not restart and is_up(c, runner_nodes):
        say(f"cluster {c.name!r} is already up ({c.server})")
        print_env(c)
        return
    if netns.exists(c.name) or daemon_records.load(c.pids):
        say(f"cluster {c.name!r} is partly up or being restarted: taking it down first")
        down(c)
    _prepare(c, bins, runner_nodes)
    netns.create(c.name, [POD_CIDR, SERVICE_CIDR])
    netns.enter(c.name)
    argv = daemons.argv(c, bins, runner_nodes)
    env = _daemon_env()
    timings: dict[str, float] = {}

    def start(name: str, env: dict[str, str] = env, cwd: Path | None = None) -> Record:
        return daemon_records.spawn(name, argv[name], c.logs / f"{name}.log", c.pids, env=env, cwd=cwd)

    try:
        s = time.monotonic()
        rec = start("etcd")
        wait_until("etcd", lambda: clusterapi.get("http://127.0.0.1:2379/health")[0] == 200, 30, rec, interval=0.25)
        timings["etcd"] = time.monotonic() - s

        s = time.monotonic()
        _wait_api_ready(c, start("kube-apiserver"))
        timings["kube-apiserver"] = time.monotonic() - s

        s = time.monotonic()
        clusterapi.kubectl(c, "apply", "--server-side", "-f", "-", input=seed.RBAC)
        for name in ("kube-controller-manager", "kube-scheduler"):
            start(name)
        runner_env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")])))
        if runner_nodes:  # it makes the nodes Ready
            start("podrunner", env=runner_env, cwd=REPO_ROOT)
        else:
            start("kwok", env=dict(env, HOME=str(c.state / "kwok-home")))  # never pick up ~/.kwok/kwok.yaml
        for i, n in enumerate(nodes or seed.default_nodes()):
            clusterapi.kubectl(c, "create", "-f", "-", input=json.dumps(seed.node_manifest(i, n, runner_nodes)))
        clusterapi.kubectl(c, "wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")
        timings["nodes Ready"] = time.monotonic() - s

        s = time.monotonic()
        if not runner_nodes:
            start("podrunner", env=runner_env, cwd=REPO_ROOT)
        start("prometheus")
        wait_until("Prometheus", lambda: clusterapi.get(f"{c.prometheus_url}/-/ready")[0] == 200, 30, interval=0.25)
        # The controller-manager is serving once it has made the default ServiceAccount.
        for what in (("serviceaccount", "default"), ("configmap", "kube-root-ca.crt")):
            wait_until(f"{' '.join(what)} in default", _exists(c, *what, "-n", "default"), 60, interval=0.25)
        timings["runner, Prometheus, controllers"] = time.monotonic() - s
        for r in daemon_records.load(c.pids):
            if not r.alive():
                raise ProcessError(f"{r.name} exited during start-up; see {r.log}\n{r.tail()}")
    except BaseException:
        say("start-up failed; stopping what was started (logs kept in " + str(c.logs) + ")")
        down(c, keep_state=True)
        raise
    info = dict(c.info(), node_keeper="podrunner" if runner_nodes else "kwok")
    (c.state / "cluster.json").write_text(json.dumps(info, indent=2) + "\n")
    detail = ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
    say(f"cluster {c.name!r} up in {time.monotonic() - t0:.1f}s ({detail})")
    print_env(c)


def restart_daemon(c: Cluster, name: str, down_seconds: float = 0.0) -> Record:
    """Stop one daemon of a running cluster and start it again with the same command line and
    log (fault tests: an API server restart). Call from inside the cluster's namespace; the
    new process is recorded like the old one, so `down` stops it. Waits until the API
    server is ready again when that is what restarted."""
    rec = next(r for r in daemon_records.load(c.pids) if r.name == name)
    daemon_records.stop(rec)
    time.sleep(down_seconds)
    new = daemon_records.spawn(name, rec.argv, Path(rec.log), c.pids, env=_daemon_env())
    if name == "kube-apiserver":
        _wait_api_ready(c, new)
    return new


def _ancestors() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1:
        pids.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat[stat.rindex(")") + 2 :].split()[1])
    return pids


def _stop_stragglers(c: Cluster) -> None:
    """Whatever else still lives in the namespace (pod processes of a runner that died) is
    ours too: the namespace is created by `up` and nothing else is started in it."""
    spare = _ancestors()  # `up` itself, or a shell that ran `down` from inside, may be in there

    def stragglers_now() -> list[int]:
        return [p for p in netns.pids(c.name) if p not in spare]

    stragglers = stragglers_now()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in stragglers:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while (stragglers := stragglers_now()) and time.monotonic() < deadline:
            time.sleep(0.1)
        if not stragglers:
            break


def down(c: Cluster, keep_state: bool = False) -> None:
    records = {r.name: r for r in daemon_records.load(c.pids)}
    for name in reversed(daemons.ORDER):  # every kind's daemons: whichever ran
        rec = records.pop(name, None)
        if rec and daemon_records.stop(rec, grace=20.0 if name == "podrunner" else 10.0):
            say(f"stopped {name} (pid {rec.pid})")
    for rec in records.values():
        daemon_records.stop(rec)
    _stop_stragglers(c)
    netns.delete(c.name)
    shutil.rmtree(c.pids, ignore_errors=True)
    if not keep_state and c.state.is_dir():
        for entry in c.state.iterdir():  # everything but the logs of this and the previous run
            if entry.name not in ("logs", "logs.prev"):
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    say(f"cluster {c.name!r} is down (logs in {c.logs})")
