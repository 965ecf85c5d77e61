"""Bring the local Kubernetes control plane up or down, inside its own network namespace.

    python -m e2e.cluster up        # build if needed, start everything, wait until Ready
    python -m e2e.cluster status
    python -m e2e.cluster exec -- kubectl get pods -A     # any command, inside the netns
    python -m e2e.cluster env       # export lines: KUBECONFIG, PATH (kubectl, helm)
    python -m e2e.cluster logs NS/POD [-c CONTAINER] [-f]   # our pods' logs
    python -m e2e.cluster down      # stop every process started, delete the netns

Inside the namespace ``$PREFIXROUTE_NETNS`` (default ``prefixroute``) the pod CIDR
10.244.0.0/16 is a local route on lo: every address in it is bindable. 10.244.0.1 is the
"host": the API server (:6443), Prometheus (:9090) and the nodes' InternalIP; fake node
*i* hands out pod IPs from 10.244.<i+1>.0/24. Nothing listens outside the namespace.

State (certificates, etcd data, logs, PID records, pod runtime dirs) lives in
``$PREFIXROUTE_CACHE/clusters/<netns>``; see docs/control-plane.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from e2e import build, kwokconfig, netns, pins, pki, procs
from prefixroute.cache_folder import cache_dir

POD_CIDR = "10.244.0.0/16"
HOST_IP = "10.244.0.1"
API_PORT = 6443
SERVICE_CIDR = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
PROMETHEUS_PORT = 9090
KWOK_DEFAULT_CIDR = "10.244.128.0/17"
"""For nodes without spec.podCIDR; ours all have one (10.244.<i+1>.0/24)."""

DEFAULT_IMAGES = ("prefixroute/prefixroute",)
API_NAMES = (
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
    "localhost",
)

# Start order; `down` stops in reverse.
DAEMONS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "podrunner", "prometheus")


@dataclass(frozen=True)
class NodeSpec:
    name: str
    gpus: int
    cpu: str
    memory: str


def default_nodes() -> list[NodeSpec]:
    cpu = [NodeSpec(f"kwok-cpu-{i}", 0, "32", "128Gi") for i in range(2)]
    gpu = [NodeSpec(f"kwok-gpu-{i}", 8, "192", "2048Gi") for i in range(4)]
    return cpu + gpu


@dataclass(frozen=True)
class Cluster:
    """Where one cluster's files are; derived from the netns name and the cache dir."""

    name: str

    @classmethod
    def from_env(cls, name: str | None = None) -> Cluster:
        return cls(name or os.environ.get("PREFIXROUTE_NETNS", "prefixroute"))

    @property
    def state(self) -> Path:
        return cache_dir() / "clusters" / self.name

    @property
    def pki(self) -> Path:
        return self.state / "pki"

    @property
    def logs(self) -> Path:
        return self.state / "logs"

    @property
    def pids(self) -> Path:
        return self.state / "pids"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.state / "admin.kubeconfig"

    @property
    def server(self) -> str:
        return f"https://{HOST_IP}:{API_PORT}"

    @property
    def prometheus_url(self) -> str:
        return f"http://{HOST_IP}:{PROMETHEUS_PORT}"

    def kubeconfig(self, stem: str) -> Path:
        return self.state / f"{stem}.kubeconfig"

    @property
    def images(self) -> tuple[str, ...]:
        env = os.environ.get("PREFIXROUTE_RUNNER_IMAGES")
        return tuple(i.strip() for i in env.split(",") if i.strip()) if env else DEFAULT_IMAGES

    def info(self) -> dict[str, str]:
        """What other tools need, also written to ``cluster.json`` in the state dir."""
        bins = build.binaries()
        return {
            "netns": self.name,
            "server": self.server,
            "kubeconfig": str(self.admin_kubeconfig),
            "ca": str(self.pki / "ca.crt"),
            "prometheus": self.prometheus_url,
            "host_ip": HOST_IP,
            "pod_cidr": POD_CIDR,
            "state": str(self.state),
            "logs": str(self.logs),
            "kubectl": str(bins["kubectl"]),
            "helm": str(bins["helm"]),
            "images": ",".join(self.images),
        }


def _say(msg: str) -> None:
    print(msg, flush=True)


# --------------------------------------------------------------------------- health


def _ssl_context(c: Cluster) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(c.pki / "ca.crt"))
    ctx.load_cert_chain(str(c.pki / "admin.crt"), str(c.pki / "admin.key"))
    return ctx


def _get(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ssl.SSLError) as e:
        return 0, str(e)


def _wait(what: str, check, timeout: float, rec: procs.Record | None = None) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        ok, last = check()
        if ok:
            return
        if rec is not None and not rec.alive():
            raise SystemExit(f"{rec.name} exited while waiting for {what}; see {rec.log}\n" + _tail(Path(rec.log)))
        time.sleep(0.25)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}: {last}")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return ""


def api_healthy(c: Cluster) -> bool:
    if not netns.inside(c.name):
        raise RuntimeError("api_healthy must run inside the cluster's network namespace")
    status, _ = _get(f"{c.server}/readyz", _ssl_context(c))
    return status == 200


# --------------------------------------------------------------------------- kubectl


def kubectl(c: Cluster, *args: str, input: str | None = None, check: bool = True) -> str:
    bins = build.binaries()
    env = dict(os.environ, KUBECONFIG=str(c.admin_kubeconfig))
    out = subprocess.run(
        [str(bins["kubectl"]), *args], input=input, env=env, capture_output=True, text=True, check=False
    )
    if check and out.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout


_RBAC = """\
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "prefixroute:prometheus"}
rules:
- apiGroups: [""]
  resources: [pods, services, endpoints, nodes]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- nonResourceURLs: [/metrics]
  verbs: [get]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "prefixroute:prometheus"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "prefixroute:prometheus"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "prefixroute:prometheus"}]
---
# What a kubelet needs for the pods it runs (the runner acts for every fake node).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: "prefixroute:podrunner"}
rules:
- apiGroups: [""]
  resources: [pods]
  verbs: [get, list, watch, delete]
- apiGroups: [""]
  resources: [pods/status]
  verbs: [get, patch, update]
- apiGroups: [""]
  resources: [serviceaccounts/token]
  verbs: [create]
- apiGroups: [""]
  resources: [configmaps, secrets, services, nodes]
  verbs: [get, list, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [get, list, watch]
- apiGroups: ["", events.k8s.io]
  resources: [events]
  verbs: [create, patch, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: "prefixroute:podrunner"}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: "prefixroute:podrunner"}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: "prefixroute:podrunner"}]
"""


def _node_manifest(i: int, n: NodeSpec) -> dict:
    labels = {
        "kubernetes.io/hostname": n.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "type": "kwok",
        "topology.kubernetes.io/zone": "local-a",
        "node.kubernetes.io/instance-type": "gpu-8x" if n.gpus else "cpu-32",
    }
    capacity = {"cpu": n.cpu, "memory": n.memory, "pods": "110", "ephemeral-storage": "1Ti"}
    taints = []
    if n.gpus:
        # What the NVIDIA GPU operator / cloud GPU node pools put on GPU nodes.
        labels.update(
            {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(n.gpus),
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.memory": "81559",
            }
        )
        capacity["nvidia.com/gpu"] = str(n.gpus)
        taints.append({"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": n.name,
            "labels": labels,
            "annotations": {
                kwokconfig.FAKE_NODE_ANNOTATION[0]: kwokconfig.FAKE_NODE_ANNOTATION[1],
                "node.alpha.kubernetes.io/ttl": "0",
            },
        },
        "spec": {"podCIDR": f"10.244.{i + 1}.0/24", "podCIDRs": [f"10.244.{i + 1}.0/24"], "taints": taints},
        "status": {"capacity": capacity, "allocatable": capacity, "phase": "Running"},
    }


# --------------------------------------------------------------------------- up


def _daemon_argv(c: Cluster, bins: dict[str, Path]) -> dict[str, list[str]]:
    p = c.pki
    kc = {s: str(c.kubeconfig(s)) for s in ("kube-controller-manager", "kube-scheduler", "admin", "podrunner")}
    return {
        "etcd": [
            str(bins["etcd"]),
            "--name=default",
            f"--data-dir={c.state / 'etcd'}",
            "--listen-client-urls=http://127.0.0.1:2379",
            "--advertise-client-urls=http://127.0.0.1:2379",
            "--listen-peer-urls=http://127.0.0.1:2380",
            "--initial-advertise-peer-urls=http://127.0.0.1:2380",
            "--initial-cluster=default=http://127.0.0.1:2380",
            "--initial-cluster-state=new",
            "--unsafe-no-fsync",  # a throwaway test cluster: durability buys nothing, fsync costs seconds
            "--log-level=warn",
            "--quota-backend-bytes=2147483648",
        ],
        "kube-apiserver": [
            str(bins["kube-apiserver"]),
            "--etcd-servers=http://127.0.0.1:2379",
            f"--advertise-address={HOST_IP}",
            f"--bind-address={HOST_IP}",
            f"--secure-port={API_PORT}",
            f"--tls-cert-file={p / 'apiserver.crt'}",
            f"--tls-private-key-file={p / 'apiserver.key'}",
            f"--client-ca-file={p / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            "--enable-admission-plugins=NodeRestriction",
            "--anonymous-auth=true",  # as kubeadm: /healthz, /readyz, /version for anyone
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={p / 'sa.pub'}",
            f"--service-account-signing-key-file={p / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            f"--kubelet-client-certificate={p / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={p / 'apiserver-kubelet-client.key'}",
            "--allow-privileged=true",
            "--profiling=false",
            "--event-ttl=1h",
            "--v=1",
        ],
        "kube-controller-manager": [
            str(bins["kube-controller-manager"]),
            f"--kubeconfig={kc['kube-controller-manager']}",
            f"--authentication-kubeconfig={kc['kube-controller-manager']}",
            f"--authorization-kubeconfig={kc['kube-controller-manager']}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--controllers=*",
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={p / 'sa.key'}",
            f"--root-ca-file={p / 'ca.crt'}",
            f"--cluster-signing-cert-file={p / 'ca.crt'}",
            f"--cluster-signing-key-file={p / 'ca.key'}",
            f"--cluster-cidr={POD_CIDR}",
            "--allocate-node-cidrs=false",
            f"--service-cluster-ip-range={SERVICE_CIDR}",
            "--cluster-name=prefixroute",
            "--v=1",
        ],
        "kube-scheduler": [
            str(bins["kube-scheduler"]),
            f"--kubeconfig={kc['kube-scheduler']}",
            f"--authentication-kubeconfig={kc['kube-scheduler']}",
            f"--authorization-kubeconfig={kc['kube-scheduler']}",
            "--bind-address=127.0.0.1",
            "--leader-elect=false",
            "--v=1",
        ],
        "kwok": [
            str(bins["kwok"]),
            f"--kubeconfig={kc['admin']}",
            f"--config={c.state / 'kwok.yaml'}",
        ],
        "podrunner": [
            sys.executable,
            "-m",
            "e2e.podrunner",
            f"--kubeconfig={kc['podrunner']}",
            f"--state-dir={c.state / 'pods'}",
            f"--server={c.server}",
            f"--ca={p / 'ca.crt'}",
            f"--host-ip={HOST_IP}",
            f"--targets-file={c.state / 'targets.json'}",
            f"--log-dir={c.logs / 'pods'}",
            "--service-proxy",
            *[f"--image={i}" for i in c.images],
        ],
        "prometheus": [
            shutil.which("prometheus") or "/usr/bin/prometheus",
            f"--config.file={c.state / 'prometheus.yml'}",
            f"--storage.tsdb.path={c.state / 'prometheus'}",
            f"--web.listen-address={HOST_IP}:{PROMETHEUS_PORT}",
            "--web.enable-lifecycle",
            "--storage.tsdb.retention.time=1d",
            "--log.level=warn",
        ],
    }


def _prometheus_config(c: Cluster) -> str:
    """Scrape what the pod runner lists in targets.json (Debian's build lacks Kubernetes SD)."""
    cfg = {
        "global": {"scrape_interval": "2s", "scrape_timeout": "1s", "evaluation_interval": "2s"},
        "scrape_configs": [
            {
                "job_name": "kubernetes-pods",
                "file_sd_configs": [{"files": [str(c.state / "targets.json")], "refresh_interval": "5s"}],
            }
        ],
    }
    return json.dumps(cfg, indent=2)  # JSON is YAML


def _prepare(c: Cluster, bins: dict[str, Path]) -> None:
    """Fresh state: certificates, kubeconfigs, KWOK and Prometheus configuration."""
    if c.logs.exists():
        prev = c.state / "logs.prev"
        shutil.rmtree(prev, ignore_errors=True)
        c.logs.rename(prev)
    for sub in ("pki", "etcd", "pids", "pods", "prometheus"):
        shutil.rmtree(c.state / sub, ignore_errors=True)
    c.state.mkdir(parents=True, exist_ok=True)
    c.logs.mkdir()
    pki.generate(c.pki, [HOST_IP, "127.0.0.1", KUBERNETES_SERVICE_IP], list(API_NAMES))
    for client in pki.CLIENTS:
        pki.kubeconfig(c.kubeconfig(client.stem), c.pki, c.server, client.stem, client.user)
    (c.state / "kwok.yaml").write_text(
        kwokconfig.render(bins["kwok"].parent / "stages", c.images, default_cidr=KWOK_DEFAULT_CIDR, node_ip=HOST_IP)
    )
    (c.state / "prometheus.yml").write_text(_prometheus_config(c))
    (c.state / "targets.json").write_text("[]")
    (c.state / "kwok-home").mkdir(exist_ok=True)


def is_up(c: Cluster) -> bool:
    """Every daemon recorded and alive, and the API server ready."""
    recs = {r.name: r for r in procs.load(c.pids)}
    if not netns.exists(c.name) or set(recs) != set(DAEMONS) or not all(r.alive() for r in recs.values()):
        return False
    netns.enter(c.name)
    return api_healthy(c)


def up(c: Cluster, nodes: list[NodeSpec] | None = None, restart: bool = False) -> None:
    t0 = time.monotonic()
    bins = build.ensure(quiet=True)
    if not restart and is_up(c):
        _say(f"cluster {c.name!r} is already up ({c.server})")
        _print_env(c)
        return
    if netns.exists(c.name) or procs.load(c.pids):
        _say(f"cluster {c.name!r} is partly up or being restarted: taking it down first")
        down(c)
    _prepare(c, bins)
    netns.create(c.name, [POD_CIDR, SERVICE_CIDR])
    netns.enter(c.name)
    argv = _daemon_argv(c, bins)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    timings: dict[str, float] = {}

    def start(name: str, **kw) -> procs.Record:
        return procs.spawn(name, argv[name], c.logs / f"{name}.log", c.pids, env=kw.get("env", env), cwd=kw.get("cwd"))

    try:
        s = time.monotonic()
        rec = start("etcd")
        _wait("etcd", lambda: (_get("http://127.0.0.1:2379/health")[0] == 200, "not healthy"), 30, rec)
        timings["etcd"] = time.monotonic() - s

        s = time.monotonic()
        rec = start("kube-apiserver")
        ctx = _ssl_context(c)
        _wait(
            "kube-apiserver /readyz",
            lambda: (lambda r: (r[0] == 200, r[1][-300:]))(_get(f"{c.server}/readyz", ctx)),
            120,
            rec,
        )
        timings["kube-apiserver"] = time.monotonic() - s

        s = time.monotonic()
        kubectl(c, "apply", "--server-side", "-f", "-", input=_RBAC)
        for name in ("kube-controller-manager", "kube-scheduler"):
            start(name)
        kwok_env = dict(env, HOME=str(c.state / "kwok-home"))  # never pick up ~/.kwok/kwok.yaml
        start("kwok", env=kwok_env)
        for i, n in enumerate(nodes or default_nodes()):
            kubectl(c, "create", "-f", "-", input=json.dumps(_node_manifest(i, n)))
        kubectl(c, "wait", "--for=condition=Ready", "node", "--all", "--timeout=60s")
        timings["nodes Ready"] = time.monotonic() - s

        s = time.monotonic()
        runner_env = dict(env, PYTHONPATH=os.pathsep.join(filter(None, [str(pins.REPO_ROOT), env.get("PYTHONPATH")])))
        start("podrunner", env=runner_env, cwd=pins.REPO_ROOT)
        start("prometheus")
        _wait("Prometheus", lambda: (_get(f"{c.prometheus_url}/-/ready")[0] == 200, "not ready"), 30)
        # The controller-manager is serving once it has made the default ServiceAccount.
        _wait(
            "ServiceAccount default/default",
            lambda: (kubectl(c, "get", "serviceaccount", "default", "-n", "default", check=False) != "", "absent"),
            60,
        )
        _wait(
            "ConfigMap default/kube-root-ca.crt",
            lambda: (kubectl(c, "get", "configmap", "kube-root-ca.crt", "-n", "default", check=False) != "", "absent"),
            60,
        )
        timings["runner, Prometheus, controllers"] = time.monotonic() - s
        for r in procs.load(c.pids):
            if not r.alive():
                raise SystemExit(f"{r.name} exited during start-up; see {r.log}\n{_tail(Path(r.log))}")
    except BaseException:
        _say("start-up failed; stopping what was started (logs kept in " + str(c.logs) + ")")
        down(c, keep_state=True)
        raise
    (c.state / "cluster.json").write_text(json.dumps(c.info(), indent=2) + "\n")
    detail = ", ".join(f"{k} {v:.1f}s" for k, v in timings.items())
    _say(f"cluster {c.name!r} up in {time.monotonic() - t0:.1f}s ({detail})")
    _print_env(c)


def restart_daemon(c: Cluster, name: str, down_seconds: float = 0.0) -> procs.Record:
    """Stop one daemon of a running cluster and start it again with the same command line and
    log (fault tests: an API server restart). Call from inside the cluster's namespace; the
    new process is recorded like the old one, so `down` stops it. Waits until the API
    server is ready again when that is what restarted."""
    rec = next(r for r in procs.load(c.pids) if r.name == name)
    procs.stop(rec)
    time.sleep(down_seconds)
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    new = procs.spawn(name, rec.argv, Path(rec.log), c.pids, env=env)
    if name == "kube-apiserver":
        ctx = _ssl_context(c)
        _wait(
            "kube-apiserver /readyz",
            lambda: (lambda r: (r[0] == 200, r[1][-300:]))(_get(f"{c.server}/readyz", ctx)),
            120,
            new,
        )
    return new


# --------------------------------------------------------------------------- down


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


def down(c: Cluster, keep_state: bool = False) -> None:
    records = {r.name: r for r in procs.load(c.pids)}
    for name in reversed(DAEMONS):
        rec = records.pop(name, None)
        if rec and procs.stop(rec, grace=20.0 if name == "podrunner" else 10.0):
            _say(f"stopped {name} (pid {rec.pid})")
    for rec in records.values():
        procs.stop(rec)
    # Whatever else still lives in the namespace (pod processes of a runner that died) is
    # ours too: the namespace is created by `up` and nothing else is started in it.
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
    netns.delete(c.name)
    shutil.rmtree(c.pids, ignore_errors=True)
    if not keep_state and c.state.is_dir():
        for entry in c.state.iterdir():  # everything but the logs of this and the previous run
            if entry.name not in ("logs", "logs.prev"):
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    _say(f"cluster {c.name!r} is down (logs in {c.logs})")


# --------------------------------------------------------------------------- status / env / exec


def _print_env(c: Cluster) -> None:
    bins = build.binaries()
    _say("# run commands inside the cluster's network namespace:  python -m e2e.cluster exec -- CMD")
    _say(f"export KUBECONFIG={c.admin_kubeconfig}")
    _say(f"export PATH={bins['kubectl'].parent}:$PATH")
    _say(f"export PREFIXROUTE_NETNS={c.name}")
    _say(f"# API server {c.server}   Prometheus {c.prometheus_url}   logs {c.logs}")


def status(c: Cluster) -> int:
    recs = procs.load(c.pids)
    _say(f"netns {c.name}: {'present' if netns.exists(c.name) else 'absent'}")
    for r in recs:
        _say(f"  {r.name:<24} pid {r.pid:<8} {'running' if r.alive() else 'DEAD'}   log {r.log}")
    if not netns.exists(c.name):
        return 1
    netns.enter(c.name)
    healthy = (c.pki / "admin.crt").exists() and api_healthy(c)
    _say(f"API server {c.server}: {'ready' if healthy else 'NOT ready'}")
    if healthy:
        _say(kubectl(c, "get", "nodes", "-o", "wide", check=False).rstrip())
        _say(f"version: {json.loads(_get(c.server + '/version', _ssl_context(c))[1]).get('gitVersion')}")
    return 0 if healthy and all(r.alive() for r in recs) else 1


def exec_in(c: Cluster, cmd: list[str]) -> int:
    """Replace this process with ``cmd`` run inside the namespace, KUBECONFIG and PATH set."""
    if not netns.exists(c.name):
        raise SystemExit(f"cluster {c.name!r} is not up: python -m e2e.cluster up")
    bins = build.binaries()
    env = dict(
        os.environ,
        KUBECONFIG=str(c.admin_kubeconfig),
        PREFIXROUTE_NETNS=c.name,
        PATH=f"{bins['kubectl'].parent}{os.pathsep}{os.environ.get('PATH', '')}",
    )
    os.execvpe("ip", ["ip", "netns", "exec", c.name, *(cmd or [os.environ.get("SHELL", "/bin/bash")])], env)
    return 127  # not reached


def logs(c: Cluster, pod: str, container: str | None, follow: bool) -> int:
    """Print a runner-managed pod's container log (``kubectl logs`` cannot reach it)."""
    ns, _, name = pod.rpartition("/")
    dirs = sorted((c.logs / "pods").glob(f"{ns or 'default'}_{name}_*"), key=lambda d: d.stat().st_mtime)
    if not dirs:
        raise SystemExit(
            f"no logs for pod {ns or 'default'}/{name} under {c.logs / 'pods'} "
            "(only pods of the runner's images have them)"
        )
    files = sorted(dirs[-1].glob(f"{container or '*'}.log"))
    if len(files) != 1:
        raise SystemExit(f"choose a container with -c: {', '.join(f.stem for f in files) or 'none'}")
    argv = ["tail", "-n", "+1"] + (["-F"] if follow else []) + [str(files[0])]
    os.execvp("tail", argv)
    return 127  # not reached


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.cluster", description=__doc__.splitlines()[0])
    parser.add_argument("--name", help="network namespace / cluster name (default $PREFIXROUTE_NETNS or prefixroute)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", help="start (no-op when already up)")
    p_up.add_argument("--restart", action="store_true", help="take it down first if it is up")
    sub.add_parser("down", help="stop everything and delete the namespace")
    sub.add_parser("status", help="processes, API health, nodes")
    sub.add_parser("env", help="print export lines")
    sub.add_parser("info", help="print paths and URLs as JSON")
    p_logs = sub.add_parser("logs", help="a runner-managed pod's container log")
    p_logs.add_argument("pod", help="[NAMESPACE/]POD")
    p_logs.add_argument("-c", "--container")
    p_logs.add_argument("-f", "--follow", action="store_true")
    p_exec = sub.add_parser("exec", help="run a command inside the namespace")
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `... | head` ends quietly
    c = Cluster.from_env(args.name)
    if os.geteuid() != 0 and args.cmd in ("up", "down", "exec"):
        raise SystemExit("network namespaces need root (or CAP_SYS_ADMIN + CAP_NET_ADMIN)")
    if args.cmd == "up":
        up(c, restart=args.restart)
    elif args.cmd == "down":
        down(c)
    elif args.cmd == "status":
        return status(c)
    elif args.cmd == "env":
        _print_env(c)
    elif args.cmd == "info":
        print(json.dumps(c.info(), indent=2))
    elif args.cmd == "logs":
        return logs(c, args.pod, args.container, args.follow)
    elif args.cmd == "exec":
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        return exec_in(c, cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
