"""API keys on the local cluster (manifests/examples/api-keys.yaml): the router's key file is a
Secret the operator mounts, and the kubelet (the pod runner, as a kubelet does: one atomic
swap of the volume's ``..data`` symlink) keeps it current in the running router.

- Before the Secret exists the router pod cannot start (the kubelet's FailedMount event) and
  the model says so: Degraded, reason AuthSecretMissing, the kubelet's words — not a crash loop.
- With it: no key is a 401, a key is a 200 and its tenant is the one whose cache_salt the
  engine receives (engine-sim's per-salt counters).
- `kubectl apply` of a new Secret (one key replaced, one kept) takes effect in the running
  router without a restart, while clients keep calling with the kept key: no request lost.
- Neither a key nor its digest appears in the router's log or /metrics.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from e2e import product
from e2e.conftest import Cluster
from e2e.kube import Kube
from e2e.test_faults import container_pid, restarts
from prefixroute.bench import prom
from prefixroute.front.tenant import cache_salt, named_tenant

EXAMPLE = product.EXAMPLES / "api-keys.yaml"
ACME, GLOBEX = "sk-example-acme-7f3a9c", "sk-example-globex-2b8e41"  # the example's demo keys
INITECH = "sk-e2e-initech-rotated-in"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def digest(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def ask(router: str, key: str | None, prompt: str = "a question for the keyed assistant " * 20) -> int:
    status, _ = product.completion(router, prompt, "assistant", headers=bearer(key) if key else {})
    return status


def salts(url: str) -> dict[str, float]:
    status, _, body = product.http("GET", url + "/metrics")
    assert status == 200
    return prom.by_label(prom.samples(body.decode()), "engine_sim_prefix_cache_queries_by_salt_total", "cache_salt")


def test_api_keys_from_a_secret_decide_the_tenant_and_rotate_under_load(
    cluster: Cluster,
    kube: Kube,
    namespace: str,
    operator: dict[str, Any],
    say: Callable[[str], None],
    tmp_path: Path,
) -> None:
    secret, model = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    name = model["metadata"]["name"]
    only_model = tmp_path / "model.yaml"
    only_model.write_text(yaml.safe_dump(model))

    # 1. The model before its Secret: Degraded with the kubelet's words, the router waiting, not crashing.
    cluster.kubectl("apply", "-n", namespace, "-f", str(only_model))

    def missing() -> dict[str, Any] | None:
        found = product.get_model(kube, namespace, name)
        return found if product.condition(found, "Degraded").get("reason") == "AuthSecretMissing" else None

    prm = product.wait_until(missing, 90, what="Degraded AuthSecretMissing")
    degraded = product.condition(prm, "Degraded")
    assert degraded["status"] == "True"
    assert 'secret "keyed-assistant-keys" not found' in degraded["message"]

    def event() -> bool:  # the operator posts its Events apart from the status patch: either may land first
        events = kube.get(f"/api/v1/namespaces/{namespace}/events")["items"]
        return any(e["reason"] == "AuthSecretMissing" and e["involvedObject"]["name"] == name for e in events)

    product.wait_until(event, 30, what="an AuthSecretMissing Event on the model")
    (router_pod,) = product.live(product.pods(kube, namespace, name, "router"))
    waiting = router_pod["status"]["containerStatuses"][0]["state"].get("waiting", {})
    assert waiting.get("reason") == "ContainerCreating"
    assert restarts(router_pod) == 0
    say(f"without the Secret: {degraded['message']}")

    # 2. The whole example: the Secret appears, the kubelet mounts it, the router starts.
    cluster.kubectl("apply", "-n", namespace, "-f", str(EXAMPLE))
    prm = product.wait_serving(kube, namespace, name, model["spec"]["replicas"], timeout=120)
    assert product.condition(prm, "Degraded")["status"] == "False"
    router = product.router_url(kube, namespace, name)
    engines = product.engine_urls(prm)
    assert ask(router, None) == 401
    assert ask(router, "sk-not-a-key") == 401
    assert ask(router, ACME) == 200
    assert ask(router, GLOBEX) == 200
    seen = {s for url in engines.values() for s in salts(url)}
    assert seen == {cache_salt(named_tenant("acme")), cache_salt(named_tenant("globex"))}  # the keys' tenants

    # 3. Rotation under load: globex's key replaced by initech's, acme's kept and in use throughout.
    (router_pod,) = [p for p in product.live(product.pods(kube, namespace, name, "router")) if product.pod_ready(p)]
    pid = container_pid(router_pod)
    rotated = json.loads(json.dumps(secret))
    rotated["stringData"]["keys.yaml"] = yaml.safe_dump(
        [{"sha256": digest(ACME), "tenant": "acme"}, {"sha256": digest(INITECH), "tenant": "initech"}]
    )
    rotated_file = tmp_path / "rotated.yaml"
    rotated_file.write_text(yaml.safe_dump(rotated))
    with product.ClientLoop(router, model="assistant", clients=2, headers=bearer(ACME)) as load:
        load.wait_for_requests(20)
        applied = time.monotonic()
        cluster.kubectl("apply", "-n", namespace, "-f", str(rotated_file))
        product.wait_until(lambda: ask(router, INITECH) == 200, 60, 0.5, what="the new key accepted")
        took = time.monotonic() - applied
        assert ask(router, GLOBEX) == 401
        load.wait_for_requests(20)
    assert load.failures == [], load.failures[:5]
    (after,) = [p for p in product.live(product.pods(kube, namespace, name, "router")) if product.pod_ready(p)]
    assert after["metadata"]["uid"] == router_pod["metadata"]["uid"]
    assert restarts(after) == 0
    assert container_pid(after) == pid  # the same router process read the new keys
    say(f"rotation took effect in {took:.1f} s with {load.ok} requests under load and 0 lost")

    # 4. No key and no digest in the router's log or /metrics.
    texts = {
        f"log {p.name}": p.read_text(errors="replace") for p in cluster.pod_log_dir(namespace, after).glob("*.log")
    }
    texts["metrics"] = product.http("GET", router + "/metrics")[2].decode()
    assert texts["metrics"]
    assert any(t for k, t in texts.items() if k.startswith("log "))
    for key in (ACME, GLOBEX, INITECH, "sk-not-a-key"):
        for where, text in texts.items():
            assert key not in text, (key, where)
            assert digest(key) not in text, (key, where)
