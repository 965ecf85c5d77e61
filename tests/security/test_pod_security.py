"""Our containers run as the operator builds them: non-root, no capabilities, no privilege
escalation, RuntimeDefault seccomp, and a read-only root file system with a scratch /tmp.

The builders are checked for those fields; then, because the local pod runner (e2e/) does
not enforce readOnlyRootFilesystem, the real `prefixroute router` and `prefixroute
engine-sim` processes are run the way such a container runs them — every mount of this
machine read-only in a mount namespace of their own, a tmpfs on /tmp, UID 65532, every
capability dropped, no_new_privs — and must serve streamed and non-streamed requests with
nothing in their logs. That part needs root (mount namespaces) and is skipped without it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from prefixroute.controller.builders.engine import engine_pod_template
from prefixroute.controller.builders.router import router_pod_template
from prefixroute.controller.engines.factory import make_adapter
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec import parse_engine, parse_router, parse_routing
from prefixroute.controller.spec.model import ModelRef
from prefixroute.processes import Child, free_port

REF = ModelRef("m", "ns", "uid")
REPO = Path(__file__).resolve().parents[2]
PYBASE, VENV = os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix)  # what the confined root mounts
RESTRICTED = {
    "runAsNonRoot": True,
    "runAsUser": 65532,
    "allowPrivilegeEscalation": False,
    "readOnlyRootFilesystem": True,
    "capabilities": {"drop": ["ALL"]},
    "seccompProfile": {"type": "RuntimeDefault"},
}
SCRATCH = (
    {"name": "prefixroute-tmp", "emptyDir": {"sizeLimit": "64Mi"}},
    {"name": "prefixroute-tmp", "mountPath": "/tmp"},
)


def engine_pod(**engine: Any) -> dict[str, Any]:
    spec = parse_engine({"model": "m", **engine})
    template, _ = engine_pod_template(REF, spec, make_adapter(spec.kind).render(spec))
    return dict(template["spec"])


def test_router_and_engine_sim_pods_are_restricted_with_a_read_only_root() -> None:
    router, _ = router_pod_template(REF, parse_routing({}), parse_router({}))
    for pod in (router["spec"], engine_pod(kind="sim")):
        (container,) = pod["containers"]
        assert container["securityContext"] == RESTRICTED
        assert SCRATCH[0] in pod["volumes"]
        assert SCRATCH[1] in container["volumeMounts"]


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_third_party_engines_get_no_capabilities_and_no_escalation(kind: str) -> None:
    (container,) = engine_pod(kind=kind)["containers"]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert "volumes" not in engine_pod(kind=kind)  # their images' own user and file system (docs/security.md)


def test_a_user_tmp_mount_replaces_the_scratch_volume_and_its_name_is_reserved() -> None:
    pod = engine_pod(
        kind="sim", volumes=[{"name": "big", "emptyDir": {}}], volumeMounts=[{"name": "big", "mountPath": "/tmp"}]
    )
    assert pod["volumes"] == [{"name": "big", "emptyDir": {}}]
    with pytest.raises(SpecError, match="must not name a volume 'prefixroute-tmp'"):
        engine_pod(kind="sim", volumes=[{"name": "prefixroute-tmp", "emptyDir": {}}])


# --- the real processes on a read-only root -----------------------------------------------------

CONFINE = r"""
set -e
# Python's own installation may sit under a home that UID 65532 cannot enter (/root is 0700
# here): keep just that directory visible, on an otherwise empty /root
case "$PYBASE" in /root/*)
    stash=/dev/shm/prefixroute-stash-$$; mkdir -p "$stash"; mount --bind "$PYBASE" "$stash"
    mount -t tmpfs -o mode=755,size=1m tmpfs /root; mkdir -p "$PYBASE"; mount --bind "$stash" "$PYBASE"
    umount "$stash"; rmdir "$stash";;
esac
# every mount read-only in this private mount namespace (proc, sys and dev stay as they are)
for m in $(awk '{print $2}' /proc/self/mounts | sort -u); do
    case "$m" in /proc*|/sys*|/dev*) continue;; esac
    mount -o remount,bind,ro "$m" 2>/dev/null || true
done
# the scratch /tmp; a checkout or virtualenv under /tmp (a CI clone in /tmp/...) stays
# visible, read-only, on top of it
i=0
for d in "$REPO" "$VENV"; do
    case "$d" in /tmp/*) i=$((i+1)); mkdir -p /dev/shm/prefixroute-keep-$$-$i
                         mount --bind "$d" /dev/shm/prefixroute-keep-$$-$i;; esac
done
mount -t tmpfs -o size=64m,mode=1777 tmpfs /tmp
i=0
for d in "$REPO" "$VENV"; do
    case "$d" in /tmp/*) i=$((i+1)); keep=/dev/shm/prefixroute-keep-$$-$i
                         mkdir -p "$d"; mount --bind "$keep" "$d"; mount -o remount,bind,ro "$d"
                         umount "$keep"; rmdir "$keep";; esac
done
if touch /.prefixroute-rw-probe 2>/dev/null || touch "$REPO/.prefixroute-rw-probe" 2>/dev/null; then
    echo "the root file system is still writable" >&2; exit 97
fi
exec setpriv --reuid 65532 --regid 65532 --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs \
    env -i PATH=/usr/bin:/bin HOME=/home/prefixroute PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 \
    PYTHONPATH="$PYTHONPATH" "$@"
"""


def confined(name: str, tmp: Path, *args: str) -> Child:
    port = free_port()
    argv = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        CONFINE,
        "confine",
        sys.executable,
        "-m",
        "prefixroute",
        *args,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    return Child(name, argv, tmp / f"{name}.log", port)


def _status(pid: int) -> dict[str, str]:
    # the python process: sh execs setpriv, which execs env, which execs python — one pid
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("setpriv"),
    reason="needs root, unshare and setpriv (util-linux) for a read-only mount namespace",
)
async def test_router_and_engine_sim_serve_from_a_read_only_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPO", str(REPO))
    monkeypatch.setenv("PYBASE", PYBASE)
    monkeypatch.setenv("VENV", VENV)
    engine = confined("engine", tmp_path, "engine-sim", "--model", "sim", "--time-scale", "100")
    router = None
    try:
        engine.start()
        await engine.wait_http_async("/health")
        router = confined("router", tmp_path, "router", "--backends", engine.url, "--log-level", "WARNING")
        router.start()
        await router.wait_http_async("/ready")
        async with aiohttp.ClientSession() as session:
            for stream in (False, True):
                body = {"model": "sim", "prompt": "read-only " * 100, "max_tokens": 8, "stream": stream}
                async with session.post(router.url + "/v1/completions", json=body) as r:
                    assert r.status == 200
                    data = await r.read()
                    assert data.endswith(b"data: [DONE]\n\n") if stream else b'"usage"' in data
            async with session.get(router.url + "/metrics") as r:
                assert r.status == 200
        for proc in (engine, router):
            status = _status(proc.pid)
            assert status["Uid"].split()[:2] == ["65532", "65532"]
            assert status["CapEff"] == "0" * 16
            assert status["NoNewPrivs"] == "1"
            assert proc.popen is not None
            assert proc.popen.poll() is None
        await asyncio.sleep(0.2)
    finally:
        for proc in (router, engine):
            if proc is not None:
                proc.stop()
    for proc in (engine, router):
        log = proc.log.read_text()
        assert "Error" not in log, log[-2000:]
        assert "Traceback" not in log, log[-2000:]
        assert "Read-only" not in log, log[-2000:]
    assert not (REPO / ".prefixroute-rw-probe").exists()
