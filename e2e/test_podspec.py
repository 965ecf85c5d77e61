"""What the pod runner derives from a pod spec (pure functions; no cluster needed)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e import pins, podspec, sandbox, scrapetargets
from e2e.kwokconfig import image_repository


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("prefixroute/prefixroute", "prefixroute/prefixroute"),
        ("prefixroute/prefixroute:0.1.0", "prefixroute/prefixroute"),
        ("docker.io/prefixroute/prefixroute:dev", "prefixroute/prefixroute"),
        ("prefixroute/prefixroute@sha256:abc", "prefixroute/prefixroute"),
        ("localhost:5000/prefixroute/prefixroute:x", "localhost:5000/prefixroute/prefixroute"),
        ("docker.io/library/python:3.11", "python"),
        ("vllm/vllm-openai:latest", "vllm/vllm-openai"),
    ],
)
def test_image_repository(image: str, repo: str) -> None:
    assert image_repository(image) == repo


@pytest.mark.parametrize(
    ("text", "out"),
    [
        ("--host $(POD_IP)", "--host 10.244.1.2"),
        ("$(UNDEFINED) stays", "$(UNDEFINED) stays"),
        ("$$(POD_IP) escaped", "$(POD_IP) escaped"),
        ("a$(POD_IP)$(PORT)b", "a10.244.1.28000b"),
    ],
)
def test_expand_follows_kubernetes_rules(text: str, out: str) -> None:
    assert podspec.expand(text, {"POD_IP": "10.244.1.2", "PORT": "8000"}) == out


def _pod(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": "u",
            "labels": {"app": "x", "a.b/c": "d"},
            "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9100"},
        },
        "spec": {
            "nodeName": "kwok-cpu-0",
            "containers": [
                {
                    "name": "main",
                    "image": "prefixroute/prefixroute",
                    "ports": [{"containerPort": 8000}],
                    "env": [
                        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
                        {"name": "URL", "value": "http://$(POD_IP):8000"},
                        {"name": "MODE", "valueFrom": {"configMapKeyRef": {"name": "cm", "key": "mode"}}},
                        {"name": "OPT", "valueFrom": {"secretKeyRef": {"name": "no", "key": "k", "optional": True}}},
                    ],
                    "resources": {"limits": {"cpu": "2", "memory": "1Gi"}},
                }
            ],
        },
        "status": {"phase": "Running", "podIP": "10.244.1.2", **status},
    }


def test_container_env_resolves_refs_in_order() -> None:
    def lookup(kind: str, ns: str, name: str) -> dict[str, str] | None:
        return {"mode": "fast"} if (kind, ns, name) == ("configmap", "ns", "cm") else None

    pod = _pod()
    env = podspec.container_env(pod, pod["spec"]["containers"][0], lookup, {"PATH": "/bin"})
    assert env["URL"] == "http://10.244.1.2:8000"
    assert env["MODE"] == "fast"
    assert "OPT" not in env
    assert env["PATH"] == "/bin"


def test_missing_required_key_is_a_config_error() -> None:
    pod = _pod()
    with pytest.raises(podspec.PodSpecError, match="cm"):
        podspec.container_env(pod, pod["spec"]["containers"][0], lambda *a: None, {})


def test_resource_field_ref_rounds_up_in_divisor_units() -> None:
    c = {"resources": {"limits": {"cpu": "250m", "memory": "1Gi"}}}
    assert podspec.resource_field_ref(c, {"resource": "limits.cpu", "divisor": "1m"}) == "250"
    assert podspec.resource_field_ref(c, {"resource": "limits.cpu"}) == "1"
    assert podspec.resource_field_ref(c, {"resource": "limits.memory", "divisor": "1Mi"}) == "1024"


def test_scrape_target_from_annotations() -> None:
    group = scrapetargets.target_group(_pod())
    assert group is not None
    assert group["targets"] == ["10.244.1.2:9100"]
    assert group["labels"]["a_b_c"] == "d"
    assert group["labels"]["pod"] == "p"
    assert group["labels"]["__metrics_path__"] == "/metrics"
    assert scrapetargets.target_group(_pod(phase="Pending")) is None


def test_sandbox_keeps_the_runners_code_visible_under_a_volume(tmp_path: Any) -> None:
    """A volume mounted above the checkout (an emptyDir at /tmp, the checkout in /tmp/prx)
    must not hide the command: the kept paths are set aside first and put back last."""
    from e2e import sandbox

    volume = tmp_path / "volume"
    volume.mkdir()
    mounts = [sandbox.Mount(volume, "/tmp"), sandbox.Mount(volume, "/data")]
    lines = sandbox.plan(mounts, tmp_path / "scratch", set(), keep=["/tmp/prx", "/opt/python"])
    stash = str(tmp_path / "scratch" / "keep-0")
    assert lines[0] == f"mount --bind /tmp/prx {stash}"  # before anything is mounted over it
    assert lines[-2:] == ["mkdir -p /tmp/prx", f"mount --bind {stash} /tmp/prx"]  # after everything
    assert lines.index(f"mount --bind {volume} /tmp") < len(lines) - 2
    assert not any("/opt/python" in line for line in lines)  # not under a volume: left alone
    assert sandbox.plan(mounts[1:], tmp_path / "scratch2", set(), keep=["/tmp/prx"]) == sandbox.plan(
        mounts[1:], tmp_path / "scratch3", set(), keep=[]
    )
    root = str(pins.REPO_ROOT.resolve())
    assert any(root == p or root.startswith(p + "/") for p in sandbox.runner_paths())


def test_a_cache_under_tmp_is_refused_with_the_reason() -> None:
    problem = sandbox.cache_problem("/tmp/prefixroute-cache")
    assert problem is not None
    assert "under /tmp" in problem
    assert "PREFIXROUTE_CACHE" in problem
    assert sandbox.cache_problem("/root/.cache/prefixroute") is None
    assert sandbox.cache_problem("/tmpfiles/cache") is None
