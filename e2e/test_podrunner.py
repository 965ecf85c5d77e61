"""Pods of the prefixroute image run as real processes on their pod IPs, with the pod's
environment, volumes and service-account token; readiness follows the real probe;
deletion stops the process gracefully before the pod goes away."""

from __future__ import annotations

import json
import textwrap
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import config

from e2e import layout, pins
from e2e.conftest import Cluster, wait_for
from e2e.kube import ApiError, Kube
from prefixroute.controller.edge import KubeEdge

IMAGE = "prefixroute/prefixroute:e2e"


def _pod(name: str, command: list[str], **spec: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": IMAGE,
        "command": command,
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
    }
    container.update(spec.pop("container", {}))
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {"containers": [container], **spec},
    }


def _python(code: str) -> list[str]:
    return ["python3", "-c", textwrap.dedent(code)]


def _get_pod(kube: Kube, ns: str, name: str) -> dict[str, Any]:
    return kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")


def _ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def _wait_ready(kube: Kube, ns: str, name: str, timeout: float = 30) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        pod = _get_pod(kube, ns, name)
        return pod if _ready(pod) else None

    return wait_for(check, timeout, what=f"pod {ns}/{name} Ready")


def _http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


def _log_lines(cluster: Cluster, ns: str, pod: dict[str, Any]) -> list[str]:
    log = cluster.pod_log_dir(ns, pod) / "main.log"
    return log.read_text().splitlines() if log.exists() else []


def test_readiness_follows_the_real_probe_and_endpoints_follow_readiness(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    deploy = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {
                            "name": "web",
                            "image": IMAGE,
                            "command": ["python3", "-m", "http.server", "--bind", "$(POD_IP)", "8000"],
                            "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
                            "ports": [{"name": "http", "containerPort": 8000}],
                            "readinessProbe": {
                                "httpGet": {"path": "/ready.txt", "port": "http"},
                                "periodSeconds": 1,
                                "failureThreshold": 1,
                            },
                        }
                    ]
                },
            },
        },
    }
    kube.post(f"/apis/apps/v1/namespaces/{namespace}/deployments", deploy)
    kube.post(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": "http"}]},
        },
    )
    pods = f"/api/v1/namespaces/{namespace}/pods?labelSelector=app%3Dweb"

    def running() -> dict[str, Any] | None:
        items = kube.get(pods)["items"]
        return items[0] if items and items[0]["status"].get("phase") == "Running" else None

    pod = wait_for(running, 30, what="web pod Running")
    ip = pod["status"]["podIP"]
    assert ip.startswith("10.244.")
    assert ip != "10.244.0.1"
    # The process really listens on the pod IP (this test runs inside the netns).
    assert wait_for(lambda: _http_status(f"http://{ip}:8000/") == 200, 15, what="HTTP on the pod IP")

    def slice_ready() -> bool | None:
        slices = kube.get(
            f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
            "?labelSelector=kubernetes.io%2Fservice-name%3Dweb"
        )["items"]
        eps = [e for s in slices for e in (s.get("endpoints") or []) if ip in e["addresses"]]
        return eps[0]["conditions"].get("ready") if eps else None

    # /ready.txt does not exist yet: the probe fails, so the pod is Running but not Ready.
    time.sleep(2.5)
    pod = _get_pod(kube, namespace, pod["metadata"]["name"])
    assert not _ready(pod)
    assert wait_for(lambda: slice_ready() is False, 15, what="endpoint listed as not ready")
    # The container serves its home directory: creating the file makes the probe pass.
    home = (
        cluster.state / "pods" / f"{namespace}_{pod['metadata']['name']}_{pod['metadata']['uid'][:8]}" / "home" / "web"
    )
    (home / "ready.txt").write_text("ok")
    wait_for(lambda: _ready(_get_pod(kube, namespace, pod["metadata"]["name"])), 15, what="Ready by probe")
    assert wait_for(lambda: slice_ready() is True, 15, what="endpoint ready")
    (home / "ready.txt").unlink()
    wait_for(lambda: not _ready(_get_pod(kube, namespace, pod["metadata"]["name"])), 15, what="not Ready again")
    assert wait_for(lambda: slice_ready() is False, 15, what="endpoint not ready again")


def test_process_gets_pod_env_volumes_and_its_own_token(cluster: Cluster, kube: Kube, namespace: str) -> None:
    ns = namespace
    kube.post(
        f"/api/v1/namespaces/{ns}/configmaps",
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"mode": "fast", "file": "x=1"}},
    )
    kube.post(
        f"/api/v1/namespaces/{ns}/secrets",
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sec"}, "stringData": {"password": "hunter2"}},
    )
    kube.post(
        f"/api/v1/namespaces/{ns}/serviceaccounts",
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app"}},
    )
    kube.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "get-pods"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}],
        },
    )
    kube.post(
        f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "app"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "get-pods"},
            "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": ns}],
        },
    )
    code = """
        import getpass, json, os, time
        from kubernetes import client, config
        config.load_incluster_config()   # the standard in-cluster paths and env, unmodified
        api = client.CoreV1Api()
        me = api.read_namespaced_pod(os.environ["POD_NAME"], os.environ["POD_NAMESPACE"])
        try:
            api.list_namespaced_secret(os.environ["POD_NAMESPACE"])
            secrets = 200
        except client.ApiException as e:
            secrets = e.status
        keys = ("POD_IP", "POD_NAME", "POD_NAMESPACE", "GREETING", "MODE", "PASSWORD", "CPU_MILLIS",
                "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "PREFIXROUTE_SERVICEACCOUNT_DIR")
        report = {k: os.environ.get(k) for k in keys}
        report.update(uid=os.getuid(), user=getpass.getuser(), my_ip=me.status.pod_ip, secrets=secrets,
                      config=open("/etc/e2e/config/file").read(),
                      hosts=open("/etc/hosts").read(),
                      ns_file=open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read())
        print("REPORT " + json.dumps(report), flush=True)
        time.sleep(3600)
    """
    pod = _pod(
        "probe-env",
        _python(code),
        serviceAccountName="app",
        container={
            "env": [
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "GREETING", "value": "hello $(POD_NAME)"},
                {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "mode"}}},
                {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}},
                {"name": "CPU_MILLIS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1m"}}},
            ],
            "resources": {"limits": {"cpu": "250m", "memory": "64Mi"}},
            "volumeMounts": [{"name": "config", "mountPath": "/etc/e2e/config", "readOnly": True}],
        },
        volumes=[{"name": "config", "configMap": {"name": "cfg"}}],
    )
    kube.post(f"/api/v1/namespaces/{ns}/pods", pod)

    def report() -> dict[str, Any] | None:
        p = _get_pod(kube, ns, "probe-env")
        for line in _log_lines(cluster, ns, p):
            if line.startswith("REPORT "):
                return dict(json.loads(line[len("REPORT ") :]), _pod=p)
        return None

    r = wait_for(report, 30, what="the process' report in its log")
    pod_ip = r["_pod"]["status"]["podIP"]
    assert r["POD_IP"] == r["my_ip"] == pod_ip
    assert (r["POD_NAME"], r["POD_NAMESPACE"]) == ("probe-env", ns)
    assert r["GREETING"] == "hello probe-env"
    assert (r["MODE"], r["PASSWORD"], r["CPU_MILLIS"]) == ("fast", "hunter2", "250")
    assert (r["KUBERNETES_SERVICE_HOST"], r["KUBERNETES_SERVICE_PORT"]) == ("10.244.0.1", "6443")
    assert r["PREFIXROUTE_SERVICEACCOUNT_DIR"] == "/var/run/secrets/kubernetes.io/serviceaccount"
    assert r["ns_file"] == ns
    assert r["config"] == "x=1"
    assert (r["uid"], r["user"]) == (65532, "prefixroute")  # the image's USER, known by name
    assert r["secrets"] == 403  # the token is the pod's ServiceAccount's: RBAC allows get pods only
    assert f"{pod_ip}\tprobe-env" in r["hosts"]
    assert Path("/etc/e2e").exists() is False  # mounts live in the process' own mount namespace


def test_deleted_pod_is_terminated_gracefully_before_it_disappears(
    cluster: Cluster, kube: Kube, namespace: str
) -> None:
    code = """
        import http.server, os, signal, sys, threading, time
        def term(*_):
            print("SIGTERM received, draining", flush=True)
            time.sleep(2)
            print("bye", flush=True)
            os._exit(0)
        signal.signal(signal.SIGTERM, term)
        srv = http.server.HTTPServer((os.environ["POD_IP"], 8080), http.server.SimpleHTTPRequestHandler)
        srv.serve_forever()
    """
    kube.post(f"/api/v1/namespaces/{namespace}/pods", _pod("graceful", _python(code), terminationGracePeriodSeconds=20))
    pod = _wait_ready(kube, namespace, "graceful")
    ip = pod["status"]["podIP"]
    wait_for(lambda: _http_status(f"http://{ip}:8080/") == 200, 15, what="serving")
    started = time.monotonic()
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/graceful")
    terminating = _get_pod(kube, namespace, "graceful")
    assert terminating["metadata"].get("deletionTimestamp")  # KWOK did not just drop it

    def gone() -> bool:
        try:
            _get_pod(kube, namespace, "graceful")
        except ApiError as e:
            return e.status == 404
        return False

    wait_for(gone, 30, what="pod removed")
    took = time.monotonic() - started
    assert 1.5 < took < 15, took  # waited for the 2 s drain, not the whole grace period
    lines = _log_lines(cluster, namespace, pod)
    assert "SIGTERM received, draining" in lines
    assert "bye" in lines
    try:
        status = _http_status(f"http://{ip}:8080/")
    except OSError:
        status = 0
    assert status == 0, "the process still answers after its pod is gone"


def test_crashing_container_is_restarted_with_backoff(kube: Kube, namespace: str) -> None:
    kube.post(f"/api/v1/namespaces/{namespace}/pods", _pod("crasher", _python("import sys; sys.exit(3)")))

    def restarted() -> dict[str, Any] | None:
        st = _get_pod(kube, namespace, "crasher")["status"].get("containerStatuses", [{}])[0]
        return st if st.get("restartCount", 0) >= 2 else None

    st = wait_for(restarted, 30, what="two restarts")
    assert st["lastState"]["terminated"]["exitCode"] == 3
    assert not st["ready"]


def test_other_images_are_left_to_kwok(cluster: Cluster, kube: Kube, namespace: str) -> None:
    kube.post(
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "vllm"},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
        },
    )
    pod = _wait_ready(kube, namespace, "vllm")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["podIP"].startswith("10.244.")
    assert not cluster.pod_log_dir(namespace, pod).exists()  # the runner never touched it


def test_image_entrypoint_is_the_prefixroute_console_script(cluster: Cluster, kube: Kube, namespace: str) -> None:
    # No command and no args: the image's ENTRYPOINT ["prefixroute"] and CMD ["--help"].
    kube.post(
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "help"},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": IMAGE}]},
        },
    )
    pod = wait_for(
        lambda: (p := _get_pod(kube, namespace, "help"))["status"].get("phase") == "Succeeded" and p,
        30,
        what="pod Succeeded",
    )
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    lines = _log_lines(cluster, namespace, pod)
    assert any("/.venv/bin/prefixroute" in line for line in lines[:1]), lines[:1]
    assert any(line.startswith("usage: prefixroute") for line in lines)


def test_a_volume_above_the_checkout_leaves_the_command_visible(cluster: Cluster, kube: Kube, namespace: str) -> None:
    # An emptyDir at /tmp (as the Helm chart mounts for the operator) with the checkout in
    # /tmp/prx would hide the virtualenv the command runs from; here: the checkout's parent.
    above = str(pins.REPO_ROOT.resolve().parent)
    if above == "/":
        pytest.skip("the checkout sits right under /")
    kube.post(
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "above"},
            "spec": {
                "restartPolicy": "Never",
                "volumes": [{"name": "scratch", "emptyDir": {}}],
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "command": _python(f"""
                                     import os, prefixroute.cli  # the virtualenv and the source, still there
                                     print("LISTED", sorted(os.listdir({above!r})), flush=True)
                                 """),
                        "volumeMounts": [{"name": "scratch", "mountPath": above}],
                    }
                ],
            },
        },
    )
    pod = wait_for(
        lambda: (p := _get_pod(kube, namespace, "above"))["status"].get("phase") in ("Succeeded", "Failed") and p,
        30,
        what="pod done",
    )
    lines = _log_lines(cluster, namespace, pod)
    assert pod["status"]["phase"] == "Succeeded", lines
    # The volume is there, holding only the checkout put back into it.
    assert f"LISTED {[pins.REPO_ROOT.resolve().name]!r}" in lines, lines


def test_service_cluster_ip_and_name_reach_ready_endpoints(cluster: Cluster, kube: Kube, namespace: str) -> None:
    server = ["python3", "-m", "http.server", "--bind", "$(POD_IP)", "8000"]
    kube.post(
        f"/api/v1/namespaces/{namespace}/pods",
        _pod("backend", server, metadata={"labels": {"app": "b"}}, container={"ports": [{"containerPort": 8000}]}),
    )
    svc = kube.post(
        f"/api/v1/namespaces/{namespace}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "backend"},
            "spec": {"selector": {"app": "b"}, "ports": [{"name": "http", "port": 80, "targetPort": 8000}]},
        },
    )
    ip = svc["spec"]["clusterIP"]
    assert ip.startswith("10.96.")
    _wait_ready(kube, namespace, "backend")
    assert wait_for(lambda: _http_status(f"http://{ip}:80/") == 200, 20, what="the ClusterIP answers")
    # From a pod, by name, through its /etc/hosts.
    client = """
        import time, urllib.request
        while True:
            try:
                print("STATUS", urllib.request.urlopen("http://backend/", timeout=2).status, flush=True)
                break
            except OSError as e:
                print("retry", e, flush=True)
                time.sleep(1)
        time.sleep(3600)
    """
    kube.post(f"/api/v1/namespaces/{namespace}/pods", _pod("client", _python(client)))
    wait_for(
        lambda: "STATUS 200" in _log_lines(cluster, namespace, _get_pod(kube, namespace, "client")),
        30,
        what="the client pod reached http://backend/",
    )


def test_kubectl_logs_reads_a_pods_output_through_the_api_server(
    cluster: Cluster, kube: Kube, namespace: str, say: Callable[[str], None]
) -> None:
    """The API server asks the node's kubelet endpoint (the runner's) for the log: `kubectl logs`
    with --tail and --limit-bytes, -f until the process ends, the operator's own read; a pod the
    runner does not run has no log there."""
    code = """
        import sys, time
        for i in range(1, 21):
            print(f"line {i}", flush=True)
        print("to stderr", file=sys.stderr, flush=True)
        time.sleep(3600)
    """
    kube.post(f"/api/v1/namespaces/{namespace}/pods", _pod("talker", _python(code)))
    node = wait_for(lambda: _get_pod(kube, namespace, "talker")["spec"].get("nodeName"), 30, what="talker scheduled")
    advertised = kube.get(f"/api/v1/nodes/{node}")["status"]
    assert {"type": "InternalIP", "address": layout.HOST_IP} in advertised["addresses"]
    assert advertised["daemonEndpoints"]["kubeletEndpoint"]["Port"] == layout.KUBELET_PORT
    ns = ["-n", namespace]

    def whole_log() -> str | None:
        out = cluster.kubectl("logs", "talker", *ns, check=False)
        return out.stdout if out.returncode == 0 and "to stderr" in out.stdout else None

    started = time.monotonic()
    lines = [f"line {i}\n" for i in range(1, 21)]
    assert wait_for(whole_log, 30, what="kubectl logs talker") == "".join(lines) + "to stderr\n"
    say(f"kubectl logs answered {time.monotonic() - started:.1f}s after the pod was made (node {node})")
    assert cluster.kubectl("logs", "talker", *ns, "--tail=3").stdout == "line 19\nline 20\nto stderr\n"
    assert cluster.kubectl("logs", "talker", *ns, "--limit-bytes=10").stdout == "line 1\nlin"
    assert cluster.kubectl("logs", "talker", *ns, "--tail=2", "--limit-bytes=4").stdout == "line"
    refused = cluster.kubectl("logs", "talker", *ns, "--timestamps", check=False)
    assert refused.returncode != 0
    assert "no time per log line" in refused.stderr, refused.stderr

    # The operator's read of a download's progress (controller/edge.py), as it makes it.
    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    assert KubeEdge(api, api).pod_log_tail(namespace, "talker", "main", 2) == "line 20\nto stderr\n"

    kube.post(
        f"/api/v1/namespaces/{namespace}/pods",
        _pod("short", _python('import time; print("a", flush=True); time.sleep(2); print("b")'), restartPolicy="Never"),
    )
    wait_for(lambda: "a" in cluster.kubectl("logs", "short", *ns, check=False).stdout, 30, what="pod short's log")
    following = time.monotonic()
    assert cluster.kubectl("logs", "-f", "short", *ns, timeout=30).stdout == "a\nb\n"
    say(f"kubectl logs -f ended {time.monotonic() - following:.1f}s after it began, with the process")

    kube.post(
        f"/api/v1/namespaces/{namespace}/pods",
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "played"},
            "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai:v0.11.0"}]},
        },
    )
    _wait_ready(kube, namespace, "played")
    missing = cluster.kubectl("logs", "played", *ns, check=False)
    assert missing.returncode != 0
    say(f"a KWOK pod's log: {missing.stderr.strip()}")


def test_a_termination_message_reaches_the_containers_terminated_state(kube: Kube, namespace: str) -> None:
    """What the process writes to its terminationMessagePath, or with FallbackToLogsOnError the
    end of its log when it failed, is the message of its terminated state (as the downloader's
    record reaches the operator: status.modelCache.bytes once Ready)."""
    pods = {
        "wrote": _pod(
            "wrote",
            _python('open("/dev/termination-log", "w").write("all done"); print("bye")'),
            restartPolicy="Never",
            securityContext={"runAsUser": 65532, "runAsGroup": 65532},
        ),
        "fallback": _pod(
            "fallback",
            _python('print("the reason it failed"); raise SystemExit(4)'),
            restartPolicy="Never",
            container={"terminationMessagePolicy": "FallbackToLogsOnError"},
        ),
    }
    for pod in pods.values():
        kube.post(f"/api/v1/namespaces/{namespace}/pods", pod)

    def terminated(name: str) -> dict[str, Any] | None:
        statuses = _get_pod(kube, namespace, name)["status"].get("containerStatuses") or [{}]
        return (statuses[0].get("state") or {}).get("terminated")

    wrote = wait_for(lambda: terminated("wrote"), 30, what="pod wrote terminated")
    assert (wrote["exitCode"], wrote.get("message")) == (0, "all done")
    failed = wait_for(lambda: terminated("fallback"), 30, what="pod fallback terminated")
    assert (failed["exitCode"], failed.get("message")) == (4, "the reason it failed\n")


def test_targets_are_written_while_the_watch_changes_the_pods(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Prometheus' targets come from a thread that reads the pods while the watch thread
    changes them; a pod added mid-write must neither end that thread (every later scrape in
    the cluster would fail) nor cost the write."""
    from e2e import podrunner, podspec
    from e2e.podhost import RunnerSettings

    targets = tmp_path / "targets.json"
    cfg = RunnerSettings(
        repositories=("prefixroute/prefixroute",),
        state_dir=tmp_path,
        log_dir=tmp_path,
        api_host="127.0.0.1",
        api_port=6443,
        host_ip="127.0.0.1",
        venv_bin=tmp_path,
        image_user=None,
        targets_file=targets,
    )
    runner = podrunner.Runner(Kube.__new__(Kube), cfg)

    def scraped(name: str, ip: str) -> dict[str, Any]:
        pod = _pod(name, ["true"], metadata={"namespace": "ns", "annotations": {"prometheus.io/scrape": "true"}})
        pod["metadata"]["uid"] = name
        pod["spec"]["containers"][0]["ports"] = [{"containerPort": 9100}]
        pod["status"] = {"phase": "Running", "podIP": ip}
        return pod

    runner.pods["a"] = scraped("a", "10.244.1.2")
    real_is_ours = podspec.is_ours

    def is_ours_while_a_pod_arrives(pod: Any, repositories: tuple[str, ...]) -> bool:
        runner.pods.setdefault("b", scraped("b", "10.244.1.3"))  # as the watch thread would
        return real_is_ours(pod, repositories)

    monkeypatch.setattr(podspec, "is_ours", is_ours_while_a_pod_arrives)
    writer = threading.Thread(target=runner.write_targets_forever, daemon=True)
    writer.start()
    try:
        runner._targets_dirty.set()
        wait_for(lambda: targets.exists(), 10, what="the first targets")
        runner._targets_dirty.set()  # b is known now: the next write lists both
        wait_for(lambda: len(json.loads(targets.read_text())) == 2, 10, what="both pods")
        written = json.loads(targets.read_text())
        assert [g["targets"] for g in written] == [["10.244.1.2:9100"], ["10.244.1.3:9100"]]
        assert writer.is_alive()
    finally:
        runner.stopping.set()
        writer.join(5)
