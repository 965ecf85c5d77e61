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
Logs: ``<log-dir>/<namespace>_<pod>_<uid8>/<container>.log``, served as a kubelet serves
them (``kubectl logs``, ``get pods/log``) on ``--host-ip``:``--kubelet-port``, the address
every fake node advertises (e2e/kubeletserver.py).

This module is the runner itself (the pod watch, which pods it takes, Prometheus'
targets, the processes ``down`` must stop); one pod's life is e2e/podworker.py, what a
worker asks of the runner (and the runner's settings) is e2e/podhost.py, and what each
image runs as (our own image; the real vLLM's CPU build) is e2e/images.py.
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
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from e2e import images, kubeletserver, podspec, runnernodes, scrapetargets, serviceproxy
from e2e.kube import ApiError, Kube
from e2e.kwokconfig import image_repository
from e2e.podhost import RunnerSettings
from e2e.podworker import PodWorker

log = logging.getLogger("podrunner")


class Runner:
    def __init__(self, kube: Kube, cfg: RunnerSettings, nodes: runnernodes.NodeKeeper | None = None):
        self.kube, self.cfg = kube, cfg
        self.nodes = nodes
        """Without KWOK (``--keep-nodes``): keeps the nodes alive and gives pods their IPs."""
        self.workers: dict[str, PodWorker] = {}
        self.pods: dict[str, Mapping[str, Any]] = {}  # every pod, for Prometheus' targets
        self._targets_dirty = threading.Event()
        self.stopping = threading.Event()
        self.created_top_dirs: set[str] = set()
        self._pids: set[int] = set()
        self._pid_lock = threading.Lock()
        self.can_switch_user = self._probe_user_switch()
        self.proxy = serviceproxy.ServiceProxy(kube) if cfg.service_proxy else None
        ours = images.prefixroute(cfg.venv_bin, cfg.entrypoint, cfg.default_args, cfg.image_user)
        self.images = images.table(cfg.repositories, ours)
        self._cpus: dict[tuple[str, str], int] = {}
        self._cpu_lock = threading.Lock()

    def image_of(self, container: Mapping[str, Any]) -> images.Image:
        return self.images[image_repository(container.get("image", ""))]

    def cpu_for(self, pod_uid: str, container: str) -> int:
        """A CPU for one container, the least taken one, kept across its restarts (vLLM's
        CPU build binds its threads to it, so two servers do not share a core)."""
        with self._cpu_lock:
            key = (pod_uid, container)
            if key not in self._cpus:
                taken = Counter(self._cpus.values())
                self._cpus[key] = min(range(os.cpu_count() or 1), key=lambda cpu: taken[cpu])
            return self._cpus[key]

    def log_source(self, namespace: str, name: str) -> kubeletserver.PodLogs | None:
        """The logs of the pod ``namespace/name`` this runner runs or ran (the newest of that
        name: a deleted pod's worker is gone), None for any other pod."""
        found = [w for w in list(self.workers.values()) if w.ns == namespace and w.pod_name == name]
        return kubeletserver.PodLogs(found[-1].logs, found[-1].container_running) if found else None

    def _kubelet_endpoint(self) -> kubeletserver.KubeletServer | None:
        if self.cfg.kubelet_port is None or self.cfg.kubelet_tls is None:
            return None
        tls = kubeletserver.tls_context(*self.cfg.kubelet_tls)
        server = kubeletserver.KubeletServer(self.cfg.host_ip, self.cfg.kubelet_port, tls, self.log_source)
        log.info("kubelet endpoint (container logs) on %s:%d", self.cfg.host_ip, server.port)
        return server.start()

    def release_cpus(self, pod_uid: str) -> None:
        with self._cpu_lock:
            for key in [k for k in self._cpus if k[0] == pod_uid]:
                del self._cpus[key]

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
        if kind == "pvc":
            return self._claim_host_path(ns, name)
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

    def _claim_host_path(self, ns: str, name: str) -> dict[str, str] | None:
        """{"path": the directory} of a claim bound to a hostPath PersistentVolume (what a
        test makes, there being no provisioner here); None for any other claim."""
        try:
            claim = self.kube.get(f"/api/v1/namespaces/{ns}/persistentvolumeclaims/{name}")
            bound = (claim.get("spec") or {}).get("volumeName")
            volume = self.kube.get(f"/api/v1/persistentvolumes/{bound}") if bound else {}
        except ApiError as e:
            if e.status == 404:
                return None
            raise podspec.PodSpecError(str(e)) from e
        host = (volume.get("spec") or {}).get("hostPath") or {}
        return {"path": host["path"]} if host.get("path") else None

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
            if self.nodes is not None:
                self.nodes.forget(meta["uid"])
            if worker:
                self.workers.pop(meta["uid"], None)
                worker.mark_gone()
            return
        if not pod["spec"].get("nodeName") or not podspec.is_ours(pod, self.cfg.repositories):
            return
        if self.nodes is not None:
            self.nodes.observe(pod)
            self.nodes.assign(pod)  # what KWOK's assign stage does in the e2e suite's cluster
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
                    if self.nodes is not None:
                        self.nodes.forget(uid)
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
                    # A copy first: the watch thread adds and removes pods meanwhile, and a
                    # dict changed during iteration once ended this thread (and with it every
                    # later scrape) for the cluster's whole life.
                    pods = list(self.pods.values())
                    # only pods it runs: nothing listens on the IP of a pod KWOK plays
                    ours = [p for p in pods if podspec.is_ours(p, self.cfg.repositories)]
                    scrapetargets.write(self.cfg.targets_file, ours)
                except Exception:  # one bad write must not stop discovery; the next event retries
                    log.exception("writing %s", self.cfg.targets_file)
                    self._targets_dirty.set()
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
        if self.nodes is not None:
            self.nodes.start(self.stopping)
        endpoint = self._kubelet_endpoint()
        for image in self.images.values():
            if image.missing:
                log.warning("image %s: %s", image.repository, image.missing)
        log.info(
            "pod runner up: images %s, venv %s, user switch %s",
            ",".join(f"{i.repository} ({i.bin})" for i in self.images.values()),
            self.cfg.venv_bin,
            "on" if self.can_switch_user else "off",
        )
        while not self.stopping.wait(1.0):
            pass
        log.info("stopping: %d pod(s)", len(self.workers))
        if endpoint is not None:
            endpoint.close()
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
    parser.add_argument("--kubelet-port", type=int, help="serve container logs on --host-ip at this port")
    parser.add_argument("--kubelet-cert", type=Path, help="the log endpoint's serving certificate")
    parser.add_argument("--kubelet-key", type=Path, help="its key (clients: certificates of --ca)")
    parser.add_argument(
        "--keep-nodes", action="store_true", help="no KWOK: keep the nodes Ready, give pods their IPs (runnernodes)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    hostport = args.server.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    state = args.state_dir.resolve()
    state.mkdir(parents=True, exist_ok=True)
    names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"]
    prom = ["prometheus.monitoring", "prometheus.monitoring.svc", "prometheus.monitoring.svc.cluster.local"]
    cfg = RunnerSettings(
        repositories=tuple(args.image or ["prefixroute/prefixroute"]),
        state_dir=state,
        log_dir=(args.log_dir or state.parent / "logs" / "pods").resolve(),
        api_host=host,
        api_port=int(port),
        host_ip=args.host_ip,
        venv_bin=Path(sys.executable).parent,  # not resolved: the venv's bin, not the base interpreter's
        image_user=None if args.run_as_root else (65532, 65532),
        extra_hosts={args.host_ip: names + prom},
        targets_file=args.targets_file,
        service_proxy=args.service_proxy,
        kubelet_port=args.kubelet_port,
        kubelet_tls=(args.kubelet_cert, args.kubelet_key, Path(args.ca))
        if args.kubelet_cert and args.kubelet_key
        else None,
    )
    kube = Kube(args.kubeconfig)
    nodes = runnernodes.NodeKeeper(kube, args.host_ip, args.kubelet_port) if args.keep_nodes else None
    Runner(kube, cfg, nodes).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
