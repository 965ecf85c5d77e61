"""Talking to a running cluster from inside its namespace: HTTP(S) GETs, the API server's
readiness, and kubectl as the admin."""

from __future__ import annotations

import os
import ssl
import subprocess
import urllib.error
import urllib.request

from e2e import build, credentials, netns
from e2e.layout import Cluster


def get(url: str, ctx: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[int, str]:
    """(status, body) of GET `url`; status 0 and the error when nothing answers."""
    try:
        with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
            return resp.status, resp.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except (OSError, ssl.SSLError) as e:
        return 0, str(e)


def api_healthy(c: Cluster) -> bool:
    if not netns.inside(c.name):
        raise RuntimeError("api_healthy must run inside the cluster's network namespace")
    status, _ = get(f"{c.server}/readyz", credentials.admin_tls(c))
    return status == 200


def kubectl(c: Cluster, *args: str, input: str | None = None, check: bool = True) -> str:
    """kubectl's output, as the cluster's admin; SystemExit with its stderr when it fails and `check`."""
    bins = build.binaries()
    env = dict(os.environ, KUBECONFIG=str(c.admin_kubeconfig))
    out = subprocess.run(
        [str(bins["kubectl"]), *args], input=input, env=env, capture_output=True, text=True, check=False
    )
    if check and out.returncode != 0:
        raise SystemExit(f"kubectl {' '.join(args)} failed:\n{out.stderr}")
    return out.stdout
