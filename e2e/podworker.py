"""One pod, from its IP assignment to its removal: the kubelet's loop for the pod runner.

Waits for KWOK's pod IP, materialises the volumes, runs our init containers one after
another, starts each container of ours as a process (e2e/sandbox.py; its environment,
user and mounts from e2e/podenv.py, its command from the image mapping in
e2e/images.py), restarts exits per restartPolicy (e2e/podcontainer.py), runs the probes
(e2e/prober.py), reports the status (e2e/podstatus.py), and on deletion runs preStop,
SIGTERM, waits out the grace period, SIGKILL, then deletes the pod with grace 0.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import partial
from typing import Any

from e2e import podenv, podprocess, podspec, podstatus, prober, sandbox, volumes
from e2e.images import Image
from e2e.kube import ApiError
from e2e.podcontainer import Container, now_iso
from e2e.podhost import PodHost

log = logging.getLogger("podrunner")
FAILED_MOUNT_REPEAT_SECONDS = 30.0  # a volume that still fails is reported again (the kubelet retries with backoff)


class PodWorker(threading.Thread):
    """Runs one pod from IP assignment to removal."""

    def __init__(self, runner: PodHost, pod: Mapping[str, Any]):
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
        self.inits: dict[str, dict[str, Any]] = {}  # init container name -> its status (podstatus.init_status)
        self.volumes: volumes.Volumes | None = None
        self.last_status: str = ""
        self.finished = False

    @property
    def where(self) -> str:
        return f"{self.ns}/{self.pod_name}"

    def container_running(self, name: str) -> bool:
        """Whether the container ``name``'s process runs now (the log endpoint's follow)."""
        return any(c.name == name and c.running() for c in self.containers)

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

    def _ending(self) -> bool:
        return self.gone or self.deleting() or self.runner.stopping.is_set()

    def _image(self, spec: Mapping[str, Any]) -> Image:
        return self.runner.image_of(spec)

    # ---------------------------------------------------------------- main loop

    def run(self) -> None:
        try:
            self._run()
        except Exception:  # a bug here must not take the runner down with it
            log.exception("pod %s: worker failed", self.where)
            self._kill_all(grace=2.0)
        finally:
            self.runner.release_cpus(self.uid)
            self.finished = True

    def _run(self) -> None:
        while not self.pod.get("status", {}).get("podIP"):
            if self._ending():
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
            if podstatus.terminal(self.containers):
                log.info("pod %s: all containers finished", self.where)
                return
            self._sleep(self._next_wake(now))
        self._kill_all(grace=5.0)

    def _next_wake(self, now: float) -> float:
        times = [t for c in self.containers for t in c.probe_next.values()]
        times += [c.restart_at for c in self.containers if c.restart_at]
        return min([0.5] + [max(0.02, t - now) for t in times])

    # ---------------------------------------------------------------- setup

    def _pod_user(self) -> tuple[int, int] | None:
        first = next(
            (c for c in self.pod["spec"]["containers"] if podspec.container_is_ours(c, self.cfg.repositories)), None
        )
        image_user = self._image(first).user if first is not None else None
        return podenv.user(self.pod, None, image_user)

    def _prepare(self) -> bool:
        shutil.rmtree(self.dir, ignore_errors=True)
        (self.dir / "volumes").mkdir(parents=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        (self.dir / "hosts").write_text(self._hosts())
        podenv.write_identity_files(self.dir)
        node = self.pod["spec"].get("nodeName") or "none"
        disk = self.cfg.state_dir.parent / "nodes" / node  # the fake node's own disk (volumes.NODE_STATE)
        self.volumes = volumes.Volumes(self.pod, self.dir / "volumes", self.runner.lookup, self._token, disk)
        user = self._pod_user()
        if user:
            for d in (self.dir, self.dir / "volumes"):
                os.chown(d, *user)
        reported: tuple[str, float] = ("", 0.0)  # the last FailedMount event: its message and when
        while True:
            try:
                self.volumes.sync(self.pod)
                break
            except volumes.VolumeError as e:
                # As the kubelet: the pod waits in ContainerCreating and a Warning event says why.
                self._waiting_all("ContainerCreating", "")
                now = time.monotonic()
                if str(e) != reported[0] or now - reported[1] > FAILED_MOUNT_REPEAT_SECONDS:
                    self._event("Warning", "FailedMount", str(e))
                    reported = (str(e), now)
                if self._ending():
                    return False
                self._sleep(2.0)
            except (podspec.PodSpecError, ApiError, OSError) as e:  # OSError: requests' errors too
                self._waiting_all("CreateContainerConfigError", str(e))
                if self._ending():
                    return False
                self._sleep(2.0)
        for vol in self.pod["spec"].get("volumes", []):
            if "emptyDir" in vol:
                self.volumes.path(vol["name"]).chmod(0o777)  # as the kubelet makes emptyDirs
        return True

    def _hosts(self) -> str:
        return podenv.hosts(self.pod, self.cfg.extra_hosts, self.runner.proxy)

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
            log.warning("pod %s: volume refresh failed: %s", self.where, e)

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

    def _env(self, spec: Mapping[str, Any]) -> dict[str, str]:
        api = (self.cfg.api_host, self.cfg.api_port)
        return podenv.environment(self.pod, spec, self._image(spec), api, self.runner.lookup)

    # ---------------------------------------------------------------- processes

    def _launch(self, spec: Mapping[str, Any], env: dict[str, str], default_cmd: bool) -> subprocess.Popen[bytes]:
        image = self._image(spec)
        switch = self.runner.can_switch_user
        proc, argv = podprocess.start(
            spec,
            env,
            image,
            self._where(),
            self._mounts(spec),
            user=podenv.user(self.pod, spec, image.user),
            switch_user=switch,
            created_top_dirs=self.runner.created_top_dirs,
            cpu=partial(self.runner.cpu_for, self.uid, spec["name"]),
            default_cmd=default_cmd,
        )
        self.runner.track(proc.pid)
        log.info("pod %s: started %s pid %d: %s", self.where, spec["name"], proc.pid, argv)
        return proc

    def _where(self) -> podprocess.Where:
        return podprocess.Where(self.dir, self.logs, self.pod["status"]["podIP"])

    def _mounts(self, spec: Mapping[str, Any]) -> list[sandbox.Mount]:
        assert self.volumes is not None
        return podenv.mounts(spec, self.volumes)

    def _run_init_containers(self) -> bool:
        """Our init containers one after another (others count as done), their states
        reported as the kubelet reports them; False if the pod ends."""
        for spec in self.pod["spec"].get("initContainers", []):
            if not podspec.container_is_ours(spec, self.cfg.repositories):
                continue
            attempt, last = 0, None
            while True:
                try:
                    proc = self._launch(spec, self._env(spec), default_cmd=True)
                except podspec.PodSpecError as e:
                    self._waiting_all("CreateContainerConfigError", str(e))
                    self._sleep(2.0)
                    continue
                self._init_state(spec, {"running": {"startedAt": now_iso()}}, last, attempt)
                while proc.poll() is None:
                    if self._ending():
                        self._stop_proc(proc, 2.0)
                        return False
                    self._sleep(0.2)
                code = proc.returncode
                ended = {"exitCode": code, "reason": "Completed" if code == 0 else "Error", "finishedAt": now_iso()}
                if code == 0:
                    self._init_state(spec, {"terminated": ended}, last, attempt)
                    break
                if self.pod["spec"].get("restartPolicy", "Always") == "Never":
                    self._init_state(spec, {"terminated": ended}, last, attempt)
                    self._patch_status({"phase": "Failed"})
                    return False
                attempt, last = attempt + 1, ended
                why = f"init container {spec['name']} exited {code}"
                self._init_state(spec, {"waiting": {"reason": "CrashLoopBackOff", "message": why}}, last, attempt)
                self._waiting_all("PodInitializing", why)
                self._sleep(min(self.cfg.backoff_cap, self.cfg.backoff_base * 2**attempt))
        return True

    def _init_state(
        self, spec: Mapping[str, Any], state: dict[str, Any], last: dict[str, Any] | None, restarts: int
    ) -> None:
        """Record an init container's new state and report the pod's status with it."""
        self.inits[spec["name"]] = podstatus.init_status(spec, state, last, restarts)
        self._report()

    def _start(self, c: Container) -> None:
        try:
            env = self._env(c.spec)
            proc = self._launch(c.spec, env, default_cmd=True)
        except (podspec.PodSpecError, OSError) as e:
            reason = "CreateContainerConfigError" if isinstance(e, podspec.PodSpecError) else "RunContainerError"
            c.on_start_failed(reason, str(e), time.monotonic())
            log.warning("pod %s: cannot start %s: %s", self.where, c.name, e)
            return
        c.on_started(proc, env)

    def _tend(self, c: Container, now: float) -> None:
        if c.proc is not None and c.proc.poll() is not None:
            self._exited(c, now)
        if c.proc is None:
            if c.restart_at and now >= c.restart_at:
                self._start(c)
            return
        if not c.running():
            return
        why = prober.tend(c, self.pod["status"]["podIP"], now, self.where)
        if why is not None:
            self._restart(c, why)

    def _restart(self, c: Container, why: str) -> None:
        log.info("pod %s: restarting %s: %s", self.where, c.name, why)
        if c.proc is not None:
            self._stop_proc(c.proc, self._grace())
        self._exited(c, time.monotonic())

    def _exited(self, c: Container, now: float) -> None:
        policy = self.pod["spec"].get("restartPolicy", "Always")
        message = podprocess.termination_message(c.spec, self._where(), c.exit_code())
        code = c.on_exited(policy, now, self.cfg.backoff_base, self.cfg.backoff_cap, message)
        log.info("pod %s: %s exited with %d", self.where, c.name, code)

    def _grace(self) -> float:
        meta, spec = self.pod["metadata"], self.pod["spec"]
        g = meta.get("deletionGracePeriodSeconds")
        return float(g if g is not None else spec.get("terminationGracePeriodSeconds", 30))

    def _stop_proc(self, proc: subprocess.Popen[bytes], grace: float) -> None:
        if podprocess.stop(proc, grace):
            self.runner.untrack(proc.pid)

    def _kill_all(self, grace: float) -> None:
        deadline = time.monotonic() + grace
        procs = [c.proc for c in self.containers if c.proc is not None]
        podprocess.in_parallel([partial(self._stop_proc, p, max(0.1, deadline - time.monotonic())) for p in procs])

    def _finish(self) -> None:
        """The pod is being deleted (or is gone): stop gracefully, then remove it."""
        grace = self._grace()
        deadline = time.monotonic() + grace
        log.info("pod %s: terminating (grace %.0fs)", self.where, grace)

        def stop(c: Container) -> None:
            podprocess.pre_stop(c, deadline, self.pod["status"]["podIP"], self.where)
            assert c.proc is not None
            self._stop_proc(c.proc, max(0.1, deadline - time.monotonic()))

        podprocess.in_parallel([partial(stop, c) for c in self.containers if c.running()])
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
                    log.warning("pod %s: delete failed: %s", self.where, e)
        log.info("pod %s: terminated", self.where)

    # ---------------------------------------------------------------- status

    def _report(self) -> None:
        key, body = podstatus.pod_status(self.pod, self.containers, list(self.inits.values()))
        if key == self.last_status:
            return
        if self._patch_status(body):
            self.last_status = key

    def _waiting_all(self, reason: str, message: str) -> None:
        for c in self.containers:
            c.waiting_reason, c.waiting_message = reason, message
        if not self.containers:
            self._patch_status(podstatus.all_waiting(self.pod, reason, message))
        else:
            self._report()

    def _event(self, type_: str, reason: str, message: str) -> None:
        """A core/v1 Event on the pod, from "kubelet", as a node's kubelet posts one."""
        stamp = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{self.pod_name}.", "namespace": self.ns},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": self.ns,
                "name": self.pod_name,
                "uid": self.uid,
            },
            "reason": reason,
            "message": message,
            "type": type_,
            "source": {"component": "kubelet", "host": self.pod.get("spec", {}).get("nodeName", "")},
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }
        try:
            self.kube.post(f"/api/v1/namespaces/{self.ns}/events", body)
        except (ApiError, OSError) as e:
            log.warning("pod %s: event %s not posted: %s", self.where, reason, e)

    def _patch_status(self, status: dict[str, Any]) -> bool:
        try:
            pod = self.kube.patch(self.path + "/status", {"status": status})
        except ApiError as e:
            if e.status != 404:
                log.warning("pod %s: status patch failed: %s", self.where, e)
            return False
        except OSError as e:
            log.warning("pod %s: status patch failed: %s", self.where, e)
            return False
        with self.lock:
            if int(pod["metadata"]["resourceVersion"]) >= int(self.pod["metadata"].get("resourceVersion", 0)):
                self.pod = pod
        return True
