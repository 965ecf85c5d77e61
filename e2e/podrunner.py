"""The pod runner: the kubelet for prefixroute's own containers on KWOK's fake nodes.

KWOK makes pods of every other image (vLLM, ...) Running and Ready on paper. A pod with
a container whose image repository is one of ``--image`` (default prefixroute/prefixroute,
any tag) is left to this runner instead (see e2e/kwokconfig.py): KWOK only gives it a
pod IP, and the runner

* runs each of our containers' command + args as a local process (``prefixroute``
  resolves to this interpreter's virtualenv), in a private mount namespace where the
  pod's volumes are mounted at their mountPaths — among them the service-account token
  from the TokenRequest API, bound to the pod, at /var/run/secrets/kubernetes.io/
  serviceaccount — and with the pod's environment (literal, fieldRef, resourceFieldRef,
  ConfigMap/Secret keys, envFrom) plus KUBERNETES_SERVICE_HOST/PORT of our API server;
* reports Running, restarts, exit codes and, from the container's real readiness probe,
  Ready in the pod's status — so anything built on pod readiness (EndpointSlices, the
  operator's ring) sees the truth;
* on deletion runs preStop, sends SIGTERM, waits out the grace period, sends SIGKILL,
  and only then removes the pod, as a kubelet does.

Containers must listen on their pod IP (``$(POD_IP)``): all pods share one network
namespace, so two pods binding 0.0.0.0 on the same port would collide.
Logs: ``<log-dir>/<namespace>_<pod>_<uid8>/<container>.log``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from e2e import podspec, probes, sandbox, scrapetargets, serviceproxy, volumes
from e2e.kube import ApiError, Kube

log = logging.getLogger("podrunner")

SA_MOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
CONTAINER_HOME = "/home/prefixroute"
"""Each container's own writable home, mounted here (the image has none; a home helps tools)."""
IMAGE_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "LANG": "C.UTF-8"}
"""The ENV lines of our Dockerfile: the image's environment."""
IMAGE_PASSWD = "prefixroute:x:10001:10001::/home/prefixroute:/usr/sbin/nologin\n"
IMAGE_GROUP = "prefixroute:x:10001:\n"
"""The user our Dockerfile adds (useradd --uid 10001 prefixroute): the image knows it by
name, so a process running as 10001 can look itself up (getpass.getuser(), say); any
other uid stays nameless, as in the image."""


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Settings:
    repositories: tuple[str, ...]
    state_dir: Path
    log_dir: Path
    api_host: str
    api_port: int
    host_ip: str
    venv_bin: Path
    entrypoint: tuple[str, ...] = ("prefixroute",)
    default_args: tuple[str, ...] = ("--help",)
    image_user: tuple[int, int] | None = (10001, 10001)
    backoff_base: float = 1.0
    backoff_cap: float = 30.0
    extra_hosts: Mapping[str, list[str]] = field(default_factory=dict)
    targets_file: Path | None = None
    service_proxy: bool = False


@dataclass
class Container:
    """One of our containers and its process, as the kubelet tracks it."""

    spec: Mapping[str, Any]
    proc: subprocess.Popen[bytes] | None = None
    started_at: str = ""
    started_mono: float = 0.0
    restarts: int = 0
    backoff_n: int = 0
    ready: bool = False
    started: bool = False  # startup probe passed (or none)
    last_terminated: dict[str, Any] | None = None
    terminated: dict[str, Any] | None = None  # current state when not restarting
    waiting_reason: str = "ContainerCreating"
    waiting_message: str = ""
    restart_at: float = 0.0
    env: dict[str, str] = field(default_factory=dict)
    probe_next: dict[str, float] = field(default_factory=dict)
    probe_ok: dict[str, int] = field(default_factory=dict)
    probe_fail: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class PodWorker(threading.Thread):
    """Runs one pod from IP assignment to removal."""

    def __init__(self, runner: Runner, pod: Mapping[str, Any]):
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.runner, self.kube, self.cfg = runner, runner.kube, runner.cfg
        self.uid: str = meta["uid"]
        self.ns: str = meta["namespace"]
        self.pod_name: str = meta["name"]
        self.pod: Mapping[str, Any] = pod
        self.gone = False
        self.wake = threading.Event()
        self.lock = threading.Lock()
        slug = f"{self.ns}_{self.pod_name}_{self.uid[:8]}"
        self.dir = self.cfg.state_dir / slug
        self.logs = self.cfg.log_dir / slug
        self.containers: list[Container] = []
        self.volumes: volumes.Volumes | None = None
        self.last_status: str = ""
        self.finished = False

    # ---------------------------------------------------------------- inputs

    def update(self, pod: Mapping[str, Any]) -> None:
        with self.lock:
            self.pod = pod
        self.wake.set()

    def mark_gone(self) -> None:
        self.gone = True
        self.wake.set()

    def _sleep(self, seconds: float) -> None:
        self.wake.wait(max(0.0, seconds))
        self.wake.clear()

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods/{self.pod_name}"

    def deleting(self) -> bool:
        return bool(self.pod["metadata"].get("deletionTimestamp"))

    # ---------------------------------------------------------------- main loop

    def run(self) -> None:
        try:
            self._run()
        except Exception:  # a bug here must not take the runner down with it
            log.exception("pod %s/%s: worker failed", self.ns, self.pod_name)
            self._kill_all(grace=2.0)
        finally:
            self.finished = True

    def _run(self) -> None:
        while not self.pod.get("status", {}).get("podIP"):
            if self.gone or self.deleting() or self.runner.stopping.is_set():
                return self._finish()
            self._sleep(0.5)
        if not self._prepare():
            return self._finish()
        ours = [c for c in self.pod["spec"]["containers"] if podspec.container_is_ours(c, self.cfg.repositories)]
        self.containers = [Container(c) for c in ours]
        if not self._run_init_containers():
            return self._finish()
        for c in self.containers:
            self._start(c)
        self._report()
        last_sync = time.monotonic()
        while not self.runner.stopping.is_set():
            if self.gone or self.deleting():
                return self._finish()
            now = time.monotonic()
            if now - last_sync > 10:
                self._sync_volumes()
                last_sync = now
            for c in self.containers:
                self._tend(c, now)
            self._report()
            if self._terminal():
                log.info("pod %s/%s: all containers finished", self.ns, self.pod_name)
                return
            self._sleep(self._next_wake(now))
        self._kill_all(grace=5.0)

    def _next_wake(self, now: float) -> float:
        times = [t for c in self.containers for t in c.probe_next.values()]
        times += [c.restart_at for c in self.containers if c.restart_at]
        return min([0.5] + [max(0.02, t - now) for t in times])

    # ---------------------------------------------------------------- setup

    def _prepare(self) -> bool:
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "volumes").mkdir(parents=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.dir / "hosts").write_text(self._hosts())
        for name, extra in (("passwd", IMAGE_PASSWD), ("group", IMAGE_GROUP)):
            (self.dir / name).write_text(Path(f"/etc/{name}").read_text() + extra)
        self.volumes = volumes.Volumes(self.pod, self.dir / "volumes", self.runner.lookup, self._token)
        user = self._user(None)
        if user:
            for d in (self.dir, self.dir / "volumes"):
                os.chown(d, *user)
        while True:
            try:
                self.volumes.sync(self.pod)
                break
            except (podspec.PodSpecError, ApiError, OSError) as e:  # OSError: requests' errors too
                self._waiting_all("CreateContainerConfigError", str(e))
                if self.gone or self.deleting() or self.runner.stopping.is_set():
                    return False
                self._sleep(2.0)
        for vol in self.pod["spec"].get("volumes", []):
            if "emptyDir" in vol:
                self.volumes.path(vol["name"]).chmod(0o777)  # as the kubelet makes emptyDirs
        return True

    def _hosts(self) -> str:
        extra = dict(self.cfg.extra_hosts)
        if self.runner.proxy is not None:
            extra.update(serviceproxy.host_names(self.runner.proxy.names, self.ns))
        return podspec.hosts_file(self.pod, extra)

    def _sync_volumes(self) -> None:
        if self.volumes is None:
            return
        hosts = self.dir / "hosts"
        content = self._hosts()
        if hosts.read_text() != content:
            # In place, not by rename: processes see this inode through a bind mount.
            with hosts.open("r+") as f:
                f.write(content)
                f.truncate()
        try:
            self.volumes.sync(self.pod)
        except (podspec.PodSpecError, ApiError, OSError) as e:
            log.warning("pod %s/%s: volume refresh failed: %s", self.ns, self.pod_name, e)

    def _token(self, sa: str, audiences: list[str], expiration: int) -> tuple[str, float]:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": audiences,
                "expirationSeconds": expiration,
                "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": self.pod_name, "uid": self.uid},
            },
        }
        out = self.kube.post(f"/api/v1/namespaces/{self.ns}/serviceaccounts/{sa}/token", body)
        expiry = datetime.strptime(out["status"]["expirationTimestamp"], "%Y-%m-%dT%H:%M:%SZ")
        return out["status"]["token"], expiry.replace(tzinfo=UTC).timestamp()

    def _user(self, container: Mapping[str, Any] | None) -> tuple[int, int] | None:
        """The uid/gid to run as: securityContext.runAsUser/Group, else the image's USER."""
        psc = self.pod["spec"].get("securityContext", {}) or {}
        csc = (container or {}).get("securityContext", {}) or {}
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup"))
        if uid is None:
            if self.cfg.image_user is None:
                return None
            uid, default_gid = self.cfg.image_user
            gid = default_gid if gid is None else gid
        return int(uid), int(gid if gid is not None else uid)

    def _mounts(self, container: Mapping[str, Any]) -> list[sandbox.Mount]:
        assert self.volumes is not None
        mounts = []
        for vm in container.get("volumeMounts", []):
            src = self.volumes.path(vm["name"])
            if vm.get("subPath"):
                src = src / vm["subPath"]
                if not src.exists():
                    src.mkdir(parents=True)
            mounts.append(sandbox.Mount(src, vm["mountPath"], bool(vm.get("readOnly"))))
        return mounts

    def _env(self, container: Mapping[str, Any]) -> dict[str, str]:
        status = self.pod.get("status", {})
        host, port = self.cfg.api_host, str(self.cfg.api_port)
        base = {
            "PATH": f"{self.cfg.venv_bin}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
            "HOME": CONTAINER_HOME,
            "HOSTNAME": self.pod["spec"].get("hostname") or self.pod_name,
            **IMAGE_ENV,
            "KUBERNETES_SERVICE_HOST": host,
            "KUBERNETES_SERVICE_PORT": port,
            "KUBERNETES_SERVICE_PORT_HTTPS": port,
            "KUBERNETES_PORT": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP": f"tcp://{host}:{port}",
            f"KUBERNETES_PORT_{port}_TCP_PROTO": "tcp",
            f"KUBERNETES_PORT_{port}_TCP_PORT": port,
            f"KUBERNETES_PORT_{port}_TCP_ADDR": host,
            "POD_IP": status.get("podIP", ""),
            "POD_NAME": self.pod_name,
            "POD_NAMESPACE": self.ns,
        }
        for vm in container.get("volumeMounts", []):
            if os.path.realpath(vm["mountPath"]) == os.path.realpath(SA_MOUNT):
                # Where the token, ca.crt and namespace are for this process: the standard
                # path, mounted in its own mount namespace (see e2e/sandbox.py).
                base["PREFIXROUTE_SERVICEACCOUNT_DIR"] = SA_MOUNT
        return podspec.container_env(self.pod, container, self.runner.lookup, base)

    # ---------------------------------------------------------------- processes

    def _launch(self, spec: Mapping[str, Any], env: dict[str, str], default_cmd: bool) -> subprocess.Popen[bytes]:
        entry = list(self.cfg.entrypoint)
        if default_cmd and not spec.get("command") and not spec.get("args"):
            entry += list(self.cfg.default_args)  # the image's CMD
        argv = podspec.command_line(spec, env, entry)
        name = spec["name"]
        home = self.dir / "home" / name
        home.mkdir(parents=True, exist_ok=True)
        user = self._user(spec)
        if user and self.runner.can_switch_user:
            os.chown(home, *user)
        workdir = Path(spec.get("workingDir") or CONTAINER_HOME)
        scratch = self.dir / "sandbox" / name
        scratch.mkdir(parents=True, exist_ok=True)
        logfile = self.logs / f"{name}.log"
        with logfile.open("ab") as out:
            out.write(f"--- {now_iso()} podrunner: start {name}: {json.dumps(argv)}\n".encode())
            out.flush()
            mounts = [
                sandbox.Mount(home, CONTAINER_HOME),
                sandbox.Mount(self.dir / "passwd", "/etc/passwd", True),
                sandbox.Mount(self.dir / "group", "/etc/group", True),
                *self._mounts(spec),
            ]
            proc = sandbox.start(
                argv,
                env,
                mounts,
                self.dir / "hosts",
                workdir,
                scratch,
                out,
                self.runner.created_top_dirs,
                user if self.runner.can_switch_user else None,
            )
        self.runner.track(proc.pid)
        log.info("pod %s/%s: started %s pid %d: %s", self.ns, self.pod_name, name, proc.pid, argv)
        return proc

    def _run_init_containers(self) -> bool:
        """Our init containers one after another (others count as done); False if the pod ends."""
        for spec in self.pod["spec"].get("initContainers", []):
            if not podspec.container_is_ours(spec, self.cfg.repositories):
                continue
            attempt = 0
            while True:
                try:
                    proc = self._launch(spec, self._env(spec), default_cmd=True)
                except podspec.PodSpecError as e:
                    self._waiting_all("CreateContainerConfigError", str(e))
                    self._sleep(2.0)
                    continue
                while proc.poll() is None:
                    if self.gone or self.deleting() or self.runner.stopping.is_set():
                        self._stop_proc(proc, 2.0)
                        return False
                    self._sleep(0.2)
                if proc.returncode == 0:
                    break
                if self.pod["spec"].get("restartPolicy", "Always") == "Never":
                    self._patch_status({"phase": "Failed"})
                    return False
                attempt += 1
                self._waiting_all("PodInitializing", f"init container {spec['name']} exited {proc.returncode}")
                self._sleep(min(self.cfg.backoff_cap, self.cfg.backoff_base * 2**attempt))
        return True

    def _start(self, c: Container) -> None:
        try:
            c.env = self._env(c.spec)
            c.proc = self._launch(c.spec, c.env, default_cmd=True)
        except (podspec.PodSpecError, OSError) as e:
            c.proc = None
            c.waiting_reason, c.waiting_message = (
                "CreateContainerConfigError" if isinstance(e, podspec.PodSpecError) else "RunContainerError",
                str(e),
            )
            c.restart_at = time.monotonic() + 2.0
            log.warning("pod %s/%s: cannot start %s: %s", self.ns, self.pod_name, c.name, e)
            return
        c.started_at, c.started_mono = now_iso(), time.monotonic()
        c.terminated, c.restart_at, c.waiting_reason, c.waiting_message = None, 0.0, "", ""
        c.ready = False
        c.started = podspec.probe(c.spec, "startupProbe") is None
        c.probe_ok, c.probe_fail = {}, {}
        c.probe_next = {}
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            p = podspec.probe(c.spec, kind)
            if p is not None:
                c.probe_next[kind] = c.started_mono + p.initial_delay

    def _tend(self, c: Container, now: float) -> None:
        if c.proc is not None and c.proc.poll() is not None:
            self._exited(c, now)
        if c.proc is None:
            if c.restart_at and now >= c.restart_at:
                self._start(c)
            return
        if not c.running():
            return
        if podspec.probe(c.spec, "readinessProbe") is None and c.started:
            c.ready = True
        for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
            due = c.probe_next.get(kind)
            if due is None or now < due:
                continue
            if kind != "startupProbe" and not c.started:
                c.probe_next[kind] = now + 0.5
                continue
            p = podspec.probe(c.spec, kind)
            assert p is not None
            ok, msg = probes.run(p, c.spec, self.pod["status"]["podIP"], c.env)
            c.probe_next[kind] = time.monotonic() + p.period
            if ok:
                c.probe_ok[kind], c.probe_fail[kind] = c.probe_ok.get(kind, 0) + 1, 0
            else:
                c.probe_fail[kind], c.probe_ok[kind] = c.probe_fail.get(kind, 0) + 1, 0
            if kind == "startupProbe":
                if ok:
                    c.started = True
                    c.probe_next.pop(kind)
                elif c.probe_fail[kind] >= p.failure_threshold:
                    self._restart(c, f"startup probe failed: {msg}")
                    return
            elif kind == "readinessProbe":
                if ok and c.probe_ok[kind] >= p.success_threshold:
                    c.ready = True
                elif not ok and (c.probe_fail[kind] >= p.failure_threshold or not c.ready):
                    if c.ready:
                        log.info("pod %s/%s: %s not ready: %s", self.ns, self.pod_name, c.name, msg)
                    c.ready = False
            elif kind == "livenessProbe" and not ok and c.probe_fail[kind] >= p.failure_threshold:
                self._restart(c, f"liveness probe failed: {msg}")
                return

    def _restart(self, c: Container, why: str) -> None:
        log.info("pod %s/%s: restarting %s: %s", self.ns, self.pod_name, c.name, why)
        if c.proc is not None:
            self._stop_proc(c.proc, self._grace())
        self._exited(c, time.monotonic())

    def _exited(self, c: Container, now: float) -> None:
        assert c.proc is not None
        code = c.proc.returncode if c.proc.returncode is not None else -9
        if code < 0:
            code = 128 - code  # killed by signal N: exit code 128+N, as container runtimes report
        state = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.started_at,
            "finishedAt": now_iso(),
        }
        log.info("pod %s/%s: %s exited with %d", self.ns, self.pod_name, c.name, code)
        c.proc, c.ready, c.started = None, False, False
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if policy == "Always" or (policy == "OnFailure" and code != 0):
            if now - c.started_mono > 600:
                c.backoff_n = 0  # ran ten minutes: forget earlier crashes, as the kubelet does
            c.last_terminated = state
            delay = min(self.cfg.backoff_cap, self.cfg.backoff_base * 2 ** min(c.backoff_n, 10))
            c.backoff_n += 1
            c.restarts += 1
            c.restart_at = now + delay
            c.waiting_reason, c.waiting_message = "CrashLoopBackOff", f"back-off {delay:.0f}s restarting {c.name}"
        else:
            c.terminated = state
            c.restart_at = 0.0

    def _terminal(self) -> bool:
        return bool(self.containers) and all(c.terminated is not None for c in self.containers)

    def _grace(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        g = meta.get("deletionGracePeriodSeconds")
        return float(g if g is not None else spec.get("terminationGracePeriodSeconds", 30))

    def _stop_proc(self, proc: subprocess.Popen[bytes], grace: float) -> None:
        if proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=max(0.1, grace))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
        self.runner.untrack(proc.pid)

    def _pre_stop(self, c: Container, deadline: float) -> None:
        hook = (c.spec.get("lifecycle") or {}).get("preStop")
        if not hook or not c.running():
            return
        budget = max(0.0, deadline - time.monotonic())
        if "sleep" in hook:
            time.sleep(min(budget, float(hook["sleep"].get("seconds", 0))))
        elif "exec" in hook:
            try:
                subprocess.run(
                    hook["exec"].get("command", []), env=c.env, timeout=budget, check=False, capture_output=True
                )
            except (OSError, subprocess.TimeoutExpired) as e:
                log.warning("pod %s/%s: preStop of %s: %s", self.ns, self.pod_name, c.name, e)
        elif "httpGet" in hook:
            p = podspec.Probe("httpGet", hook["httpGet"], 0, 0, budget, 1, 1)
            probes.run(p, c.spec, self.pod["status"]["podIP"], c.env)

    def _kill_all(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        threads = []
        for c in self.containers:
            if c.proc is not None:
                proc = c.proc
                t = threading.Thread(target=self._stop_proc, args=(proc, max(0.1, deadline - time.monotonic())))
                t.start()
                threads.append(t)
        for t in threads:
            t.join()

    def _finish(self) -> None:
        """The pod is being deleted (or is gone): stop gracefully, then remove it."""
        grace = self._grace()
        deadline = time.monotonic() + grace
        log.info("pod %s/%s: terminating (grace %.0fs)", self.ns, self.pod_name, grace)
        stoppers = []
        for c in self.containers:
            if c.running():

                def stop(c: Container = c) -> None:
                    self._pre_stop(c, deadline)
                    assert c.proc is not None
                    self._stop_proc(c.proc, max(0.1, deadline - time.monotonic()))

                t = threading.Thread(target=stop)
                t.start()
                stoppers.append(t)
        for t in stoppers:
            t.join()
        for c in self.containers:
            if c.proc is not None:
                self._exited(c, time.monotonic())
                c.terminated, c.restart_at = c.terminated or c.last_terminated, 0.0
        if not self.gone and not self.runner.stopping.is_set():
            self._report()
            try:
                self.kube.delete(
                    self.path,
                    {
                        "apiVersion": "v1",
                        "kind": "DeleteOptions",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": self.uid},
                    },
                )
            except ApiError as e:
                if e.status not in (404, 409):
                    log.warning("pod %s/%s: delete failed: %s", self.ns, self.pod_name, e)
        log.info("pod %s/%s: terminated", self.ns, self.pod_name)

    # ---------------------------------------------------------------- status

    def _container_status(self, c: Container) -> dict[str, Any]:
        st: dict[str, Any] = {
            "name": c.name,
            "image": c.spec.get("image", ""),
            "imageID": "",
            "restartCount": c.restarts,
            "ready": c.ready and c.running(),
            "started": c.started and c.running(),
        }
        if c.running():
            assert c.proc is not None
            st["state"] = {"running": {"startedAt": c.started_at}, "waiting": None, "terminated": None}
            st["containerID"] = f"prefixroute://{c.proc.pid}"
        elif c.terminated is not None:
            st["state"] = {"terminated": c.terminated, "waiting": None, "running": None}
        else:
            waiting = {"reason": c.waiting_reason or "ContainerCreating"}
            if c.waiting_message:
                waiting["message"] = c.waiting_message
            st["state"] = {"waiting": waiting, "running": None, "terminated": None}
        st["lastState"] = {"terminated": c.last_terminated} if c.last_terminated else {"terminated": None}
        return st

    def _report(self) -> None:
        ours = {c.name: c for c in self.containers}
        statuses = []
        for spec in self.pod["spec"]["containers"]:
            if spec["name"] in ours:
                statuses.append(self._container_status(ours[spec["name"]]))
            else:  # not ours: KWOK-style, running and ready on paper
                statuses.append(
                    {
                        "name": spec["name"],
                        "image": spec.get("image", ""),
                        "imageID": "",
                        "restartCount": 0,
                        "ready": True,
                        "started": True,
                        "state": {
                            "running": {"startedAt": self.pod["status"].get("startTime", now_iso())},
                            "waiting": None,
                            "terminated": None,
                        },
                    }
                )
        containers_ready = all(s["ready"] for s in statuses)
        gates = [g["conditionType"] for g in self.pod["spec"].get("readinessGates", [])]
        conds = {c["type"]: c.get("status") for c in self.pod.get("status", {}).get("conditions", [])}
        ready = containers_ready and all(conds.get(g) == "True" for g in gates)
        if self._terminal():
            phase = (
                "Succeeded"
                if all(c.terminated and c.terminated["exitCode"] == 0 for c in self.containers)
                else "Failed"
            )
        elif any(c.running() for c in self.containers) or any(c.restart_at for c in self.containers):
            phase = "Running"
        else:
            phase = "Pending"
        key = json.dumps([phase, containers_ready, ready, statuses], sort_keys=True)
        if key == self.last_status:
            return
        ts = now_iso()
        body = {
            "phase": phase,
            "containerStatuses": statuses,
            "conditions": [
                self._condition("ContainersReady", containers_ready, ts),
                self._condition("Ready", ready, ts),
            ],
        }
        if self._patch_status(body):
            self.last_status = key

    def _condition(self, kind: str, value: bool, ts: str) -> dict[str, Any]:
        old = next((c for c in self.pod.get("status", {}).get("conditions", []) if c["type"] == kind), {})
        status = "True" if value else "False"
        cond: dict[str, Any] = {
            "type": kind,
            "status": status,
            "lastTransitionTime": old.get("lastTransitionTime", ts) if old.get("status") == status else ts,
            "reason": None if value else "ContainersNotReady",
            "message": None,
        }
        return cond

    def _waiting_all(self, reason: str, message: str) -> None:
        for c in self.containers:
            c.waiting_reason, c.waiting_message = reason, message
        if not self.containers:
            self._patch_status(
                {
                    "containerStatuses": [
                        {
                            "name": s["name"],
                            "image": s.get("image", ""),
                            "imageID": "",
                            "ready": False,
                            "restartCount": 0,
                            "state": {"waiting": {"reason": reason, "message": message}},
                        }
                        for s in self.pod["spec"]["containers"]
                    ]
                }
            )
        else:
            self._report()

    def _patch_status(self, status: dict[str, Any]) -> bool:
        try:
            pod = self.kube.patch(self.path + "/status", {"status": status})
        except ApiError as e:
            if e.status != 404:
                log.warning("pod %s/%s: status patch failed: %s", self.ns, self.pod_name, e)
            return False
        except OSError as e:
            log.warning("pod %s/%s: status patch failed: %s", self.ns, self.pod_name, e)
            return False
        with self.lock:
            if int(pod["metadata"]["resourceVersion"]) >= int(self.pod["metadata"].get("resourceVersion", 0)):
                self.pod = pod
        return True


class Runner:
    def __init__(self, kube: Kube, cfg: Settings):
        self.kube, self.cfg = kube, cfg
        self.workers: dict[str, PodWorker] = {}
        self.pods: dict[str, Mapping[str, Any]] = {}  # every pod, for Prometheus' targets
        self._targets_dirty = threading.Event()
        self.stopping = threading.Event()
        self.created_top_dirs: set[str] = set()
        self._pids: set[int] = set()
        self._pid_lock = threading.Lock()
        self.can_switch_user = self._probe_user_switch()
        self.proxy = serviceproxy.ServiceProxy(kube) if cfg.service_proxy else None

    def _probe_user_switch(self) -> bool:
        """Running as the image's non-root user needs setpriv and a world-readable virtualenv."""
        if self.cfg.image_user is None or os.geteuid() != 0 or not shutil.which("setpriv"):
            return False
        uid, gid = self.cfg.image_user
        py = self.cfg.venv_bin / "python"
        ok = (
            subprocess.run(
                [
                    "setpriv",
                    f"--reuid={uid}",
                    f"--regid={gid}",
                    "--clear-groups",
                    "--",
                    str(py),
                    "-c",
                    "import prefixroute",
                ],
                capture_output=True,
                check=False,
            ).returncode
            == 0
        )
        if not ok:
            log.warning("cannot run as uid %d (virtualenv not readable?): containers run as root", uid)
        return ok

    # ------------------------------------------------------------ bookkeeping for `down`

    def track(self, pid: int) -> None:
        with self._pid_lock:
            self._pids.add(pid)
            self._write_pids()

    def untrack(self, pid: int) -> None:
        with self._pid_lock:
            self._pids.discard(pid)
            self._write_pids()

    def _write_pids(self) -> None:
        (self.cfg.state_dir / "processes.json").write_text(json.dumps(sorted(self._pids)))

    # ------------------------------------------------------------ API lookups

    def lookup(self, kind: str, ns: str, name: str) -> dict[str, str] | None:
        path = {"configmap": "configmaps", "secret": "secrets"}[kind]
        try:
            obj = self.kube.get(f"/api/v1/namespaces/{ns}/{path}/{name}")
        except ApiError as e:
            if e.status == 404:
                return None
            raise podspec.PodSpecError(str(e)) from e
        if kind == "secret":
            return podspec.decode_secret(obj.get("data"))
        data = dict(obj.get("data") or {})
        return data

    # ------------------------------------------------------------ watch

    def dispatch(self, kind: str, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        if kind == "DELETED":
            self.pods.pop(meta["uid"], None)
        else:
            self.pods[meta["uid"]] = pod
        self._targets_dirty.set()
        worker = self.workers.get(meta["uid"])
        if kind == "DELETED":
            if worker:
                self.workers.pop(meta["uid"], None)
                worker.mark_gone()
            return
        if not pod["spec"].get("nodeName") or not podspec.is_ours(pod, self.cfg.repositories):
            return
        if worker is not None and not worker.finished:
            worker.update(pod)
            return
        if meta.get("deletionTimestamp"):
            # Nothing of ours runs for it (finished, or from before this runner started):
            # KWOK leaves our pods alone, so finish the deletion as the kubelet would.
            threading.Thread(target=self._remove, args=(pod,), daemon=True).start()
        elif worker is None and pod.get("status", {}).get("phase") not in ("Succeeded", "Failed"):
            worker = PodWorker(self, pod)
            self.workers[meta["uid"]] = worker
            log.info("pod %s/%s: taking over", meta["namespace"], meta["name"])
            worker.start()

    def _remove(self, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        try:
            self.kube.delete(
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta["uid"]},
                },
            )
        except ApiError as e:
            if e.status not in (404, 409):
                log.warning("pod %s/%s: delete failed: %s", meta["namespace"], meta["name"], e)

    def watch_forever(self) -> None:
        while not self.stopping.is_set():
            try:
                listing = self.kube.get("/api/v1/pods")
                seen = set()
                for pod in listing["items"]:
                    seen.add(pod["metadata"]["uid"])
                    self.dispatch("MODIFIED", pod)
                for uid, w in list(self.workers.items()):
                    if uid not in seen:
                        w.mark_gone()
                for uid in [u for u in self.pods if u not in seen]:
                    self.pods.pop(uid)
                rv = listing["metadata"]["resourceVersion"]
                deadline = time.monotonic() + 300  # re-list now and then: nothing missed stays missed
                while not self.stopping.is_set() and time.monotonic() < deadline:
                    for event in self.kube.watch("/api/v1/pods", rv, timeout_seconds=60):
                        if event["type"] == "ERROR":
                            raise ApiError(
                                event["object"].get("code", 500), json.dumps(event["object"]), "WATCH", "/api/v1/pods"
                            )
                        rv = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] != "BOOKMARK":
                            self.dispatch(event["type"], event["object"])
                        if self.stopping.is_set():
                            break
            except Exception as e:  # network blips, 410 Gone: list again
                if self.stopping.is_set():
                    break
                log.warning("pod watch: %s; listing again", e)
                time.sleep(1.0)

    def write_targets_forever(self) -> None:
        while not self.stopping.is_set():
            if self._targets_dirty.wait(1.0) and self.cfg.targets_file is not None:
                self._targets_dirty.clear()
                try:
                    scrapetargets.write(self.cfg.targets_file, list(self.pods.values()))
                except OSError as e:
                    log.warning("writing %s: %s", self.cfg.targets_file, e)
                time.sleep(0.2)  # coalesce bursts of pod events

    def run(self) -> None:
        def on_signal(signum: int, frame: Any) -> None:
            self.stopping.set()

        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        watcher = threading.Thread(target=self.watch_forever, name="watch", daemon=True)
        watcher.start()
        threading.Thread(target=self.write_targets_forever, name="targets", daemon=True).start()
        if self.proxy is not None:
            self.proxy.start(self.stopping)
        log.info(
            "pod runner up: images %s, venv %s, user switch %s",
            ",".join(self.cfg.repositories),
            self.cfg.venv_bin,
            "on" if self.can_switch_user else "off",
        )
        while not self.stopping.wait(1.0):
            pass
        log.info("stopping: %d pod(s)", len(self.workers))
        for w in list(self.workers.values()):
            w.wake.set()
        deadline = time.monotonic() + 10
        for w in list(self.workers.values()):
            w.join(timeout=max(0.1, deadline - time.monotonic()))
        with self._pid_lock:
            leftover = list(self._pids)
        for pid in leftover:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for top in sorted(self.created_top_dirs, reverse=True):
            try:
                os.rmdir(top)
            except OSError:
                pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.podrunner", description=__doc__.splitlines()[0])
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--log-dir", type=Path, help="default: <state-dir>/../logs/pods")
    parser.add_argument("--server", required=True, help="https://HOST:PORT of the API server, for the pods")
    parser.add_argument("--ca", required=True)
    parser.add_argument("--host-ip", required=True)
    parser.add_argument("--image", action="append", help="image repository to run (repeatable)")
    parser.add_argument("--targets-file", type=Path, help="Prometheus file_sd targets to keep current")
    parser.add_argument(
        "--service-proxy", action="store_true", help="serve Service ClusterIPs (their CIDR must be a local route)"
    )
    parser.add_argument("--run-as-root", action="store_true", help="ignore the image's non-root USER")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    hostport = args.server.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    state = args.state_dir.resolve()
    state.mkdir(parents=True, exist_ok=True)
    names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"]
    prom = ["prometheus.monitoring", "prometheus.monitoring.svc", "prometheus.monitoring.svc.cluster.local"]
    cfg = Settings(
        repositories=tuple(args.image or ["prefixroute/prefixroute"]),
        state_dir=state,
        log_dir=(args.log_dir or state.parent / "logs" / "pods").resolve(),
        api_host=host,
        api_port=int(port),
        host_ip=args.host_ip,
        venv_bin=Path(sys.executable).parent,  # not resolved: the venv's bin, not the base interpreter's
        image_user=None if args.run_as_root else (10001, 10001),
        extra_hosts={args.host_ip: names + prom},
        targets_file=args.targets_file,
        service_proxy=args.service_proxy,
    )
    Runner(Kube(args.kubeconfig), cfg).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
