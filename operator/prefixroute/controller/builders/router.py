"""The router Deployment: `prefixroute router` following this resource's status.ring."""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import (
    labels,
    object_meta,
    scrape_annotations,
    selector_labels,
    with_spec_hash,
)
from prefixroute.controller.builders.pod import downward_env, restricted_security_context, scratch_mount, scratch_volume
from prefixroute.controller.engines.base import HEALTH_PATH, METRICS_PATH, POD_IP_ARG
from prefixroute.controller.names import (
    COMPONENT_ROUTER,
    IMAGE,
    PEER_PORT,
    PEER_PORT_NAME,
    ROUTER_PORT,
    ROUTER_PORT_NAME,
    router_name,
)
from prefixroute.controller.precise import PreciseRouting
from prefixroute.controller.spec.adapters import LoraSlots
from prefixroute.controller.spec.auth import AuthSpec
from prefixroute.controller.spec.model import ModelRef
from prefixroute.controller.spec.router import RouterSpec
from prefixroute.controller.spec.routing import RoutingSpec
from prefixroute.routing.knobs import BLOCK_SIZE, MODE, SPEC_KNOBS, Knob

DEFAULT_RESOURCES = {"requests": {"cpu": "100m", "memory": "128Mi"}}
API_KEYS_VOLUME = "api-keys"  # the kubelet's FailedMount events name it (controller/auth_status.py)
API_KEYS_DIR = "/etc/prefixroute/api-keys"
NO_AUTH = AuthSpec()  # API keys off
# A hub tokenizer's files, fetched by the front itself: a cache of its own, larger than the
# scratch /tmp, since one tokenizer.json runs to tens of megabytes (Gemma 3's: 33 MB).
TOKENIZER_CACHE_VOLUME = "tokenizer-cache"
TOKENIZER_CACHE_DIR = "/var/cache/prefixroute/huggingface"
TOKENIZER_CACHE_SIZE = "256Mi"


def _number(value: float) -> str:
    """1.25 → '1.25', 2.0 → '2': flags read the same as the spec."""
    return format(value, "g")


def knob_args(knob: Knob[Any], value: Any) -> list[str]:
    """How a front's flag for `knob` says `value`: nothing for an unset value or a switch
    left at its default."""
    if value is None:
        return []
    if knob.kind is bool:
        return [knob.flag] if value != knob.default else []
    return [knob.flag, _number(value) if knob.kind is float else str(value)]


def routing_flags(routing: RoutingSpec, precise: PreciseRouting | None = None) -> list[str]:
    """The flags of spec.routing's knobs, which both fronts (`prefixroute router` and
    `prefixroute epp`) take; every one explicit, so a front never falls back to a default
    that differs from the spec. They come in declaration order (routing/knobs.py), so the
    arguments, and the pod template's hash, stay the same while the spec does.

    The mode comes with precise mode's own flags (`front_routing_flags`); in precise mode
    blocks are the engine's, so spec.routing.blockSize (characters) is not rendered."""
    flags = []
    for knob in SPEC_KNOBS:
        if knob.crd_section == "routing" and knob is not MODE and not (precise and knob is BLOCK_SIZE):
            holder = routing.config if knob.owner == "routing" else routing
            flags += knob_args(knob, getattr(holder, knob.name))
    return flags


def front_routing_flags(
    routing: RoutingSpec, precise: PreciseRouting | None = None, lora: LoraSlots | None = None
) -> list[str]:
    """spec.routing's flags and, in precise mode, precise mode's (mode, tokenizer, served
    model, block size, event ports): what the router and the endpoint picker both take, so
    both fronts key and follow the engines alike. With spec.engine.lora, the engines'
    adapter slots, which a front weighs when an adapter must be loaded to serve a request."""
    flags = routing_flags(routing, precise)
    if precise is not None:
        flags += precise.front_flags()
    return flags if lora is None else [*flags, "--adapter-slots", str(lora.max_loras)]


def model_folder_volumes(precise: PreciseRouting | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(mounts, volumes) a front adds in precise mode over a model folder: the engine's
    volume, read-only at the engine's path, for the tokenizer and chat template."""
    if precise is None or precise.model_volume is None or precise.model_mount is None:
        return [], []
    return [dict(precise.model_mount)], [dict(precise.model_volume)]


def auth_flags(auth: AuthSpec) -> list[str]:
    """The front door's flags: the key file where the Secret volume puts it, trusted fronts."""
    if not auth.keys_on:
        return []
    flags = ["--api-keys", f"{API_KEYS_DIR}/{auth.api_keys_key}"]
    if auth.trusted_fronts:
        flags += ["--trusted-fronts", ",".join(auth.trusted_fronts)]
    return flags


def api_keys_volume(auth: AuthSpec) -> dict[str, Any]:
    """The Secret as a volume of the one key: a missing Secret or key keeps the pod from
    starting (the kubelet says why in a FailedMount event) rather than a router that starts
    without keys. Mounted whole, never by subPath, so the kubelet's atomic updates of the
    Secret reach the running router."""
    key = auth.api_keys_key
    return {
        "name": API_KEYS_VOLUME,
        "secret": {"secretName": auth.api_keys_secret, "items": [{"key": key, "path": key}]},
    }


def front_volumes(auth: AuthSpec, precise: PreciseRouting | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(volumeMounts, volumes) of a front's pod, the router's or the picker's: scratch, the
    API-key Secret (the whole volume, so the kubelet updates the file in place) when keys are
    on, and in precise mode the model folder with the tokenizer to read, or the cache a hub
    tokenizer is fetched into."""
    mounts, volumes = [scratch_mount()], [scratch_volume()]
    if auth.keys_on:
        mounts.append({"name": API_KEYS_VOLUME, "mountPath": API_KEYS_DIR, "readOnly": True})
        volumes.append(api_keys_volume(auth))
    if precise is not None and precise.from_hub:
        mounts.append({"name": TOKENIZER_CACHE_VOLUME, "mountPath": TOKENIZER_CACHE_DIR})
        volumes.append({"name": TOKENIZER_CACHE_VOLUME, "emptyDir": {"sizeLimit": TOKENIZER_CACHE_SIZE}})
    folder_mounts, folder_volumes = model_folder_volumes(precise)
    return mounts + folder_mounts, volumes + folder_volumes


def front_env(precise: PreciseRouting | None) -> list[dict[str, Any]]:
    """A front container's env: the downward API's, and for a hub tokenizer the hub library's
    home on the cache volume (the root file system is read-only) and the engine's own way to
    the hub (its HF_TOKEN and HF_ENDPOINT entries, a Secret reference staying a reference)."""
    env = downward_env()
    if precise is not None and precise.from_hub:
        env += [{"name": "HF_HOME", "value": TOKENIZER_CACHE_DIR}, *(dict(e) for e in precise.hub_env)]
    return env


def peer_flags(service: str) -> list[str]:
    """A front replica's reports to the others (front.peers): published on PEER_PORT, the
    others found from `service`'s endpoints (the front's own Service), in the pod's namespace."""
    return ["--peer-port", str(PEER_PORT), "--peers-service", f"$(POD_NAMESPACE)/{service}"]


def peer_port() -> dict[str, Any]:
    return {"name": PEER_PORT_NAME, "containerPort": PEER_PORT, "protocol": "TCP"}


def router_args(
    ref: ModelRef,
    routing: RoutingSpec,
    router: RouterSpec,
    auth: AuthSpec = NO_AUTH,
    precise: PreciseRouting | None = None,
    lora: LoraSlots | None = None,
) -> list[str]:
    """The command line from docs/contracts.md: spec.routing's knobs (and precise mode's
    flags), the replicas' peers, then spec.router's (and its objects', tracing and
    fairSharing), then spec.auth's."""
    args = ["router", "--host", POD_IP_ARG, "--port", str(ROUTER_PORT), "--resource", f"$(POD_NAMESPACE)/{ref.name}"]
    args += front_routing_flags(routing, precise, lora) + peer_flags(router_name(ref.name))
    for knob in SPEC_KNOBS:
        if knob.crd_section.split(".")[0] == "router":
            args += knob_args(knob, getattr(router, knob.name))
    return args + auth_flags(auth) + list(router.args)


def _probe(**timing: int) -> dict[str, Any]:
    return {"httpGet": {"path": HEALTH_PATH, "port": ROUTER_PORT_NAME}, **timing}


def router_pod_template(
    ref: ModelRef,
    routing: RoutingSpec,
    router: RouterSpec,
    auth: AuthSpec = NO_AUTH,
    precise: PreciseRouting | None = None,
    lora: LoraSlots | None = None,
) -> tuple[dict[str, Any], str]:
    mounts, volumes = front_volumes(auth, precise)
    container: dict[str, Any] = {
        "name": "router",
        "image": router.image or IMAGE,
        "args": router_args(ref, routing, router, auth, precise, lora),
        "ports": [{"name": ROUTER_PORT_NAME, "containerPort": ROUTER_PORT, "protocol": "TCP"}, peer_port()],
        "env": front_env(precise),
        "resources": dict(router.resources) if router.resources else DEFAULT_RESOURCES,
        "readinessProbe": _probe(periodSeconds=5, timeoutSeconds=2, failureThreshold=3),
        "livenessProbe": _probe(periodSeconds=10, timeoutSeconds=2, failureThreshold=3),
        "securityContext": restricted_security_context(),
        "volumeMounts": mounts,
    }
    return front_pod_template(
        ref, COMPONENT_ROUTER, container, volumes, router.image_pull_policy, ROUTER_PORT, router_name(ref.name)
    )


def router_deployment(ref: ModelRef, template: dict[str, Any], replicas: int) -> dict[str, Any]:
    return front_deployment(ref, COMPONENT_ROUTER, router_name(ref.name), template, replicas)


def front_pod_template(
    ref: ModelRef,
    component: str,
    container: dict[str, Any],
    volumes: list[dict[str, Any]],
    pull_policy: str | None,
    metrics_port: int,
    account: str,
) -> tuple[dict[str, Any], str]:
    """A front's pod (the router's or the EPP's): its one container, scraped on `metrics_port`,
    running as its own service account, without Service links in its environment."""
    if pull_policy:
        container["imagePullPolicy"] = pull_policy
    template = {
        "metadata": {"labels": labels(ref, component), "annotations": scrape_annotations(metrics_port, METRICS_PATH)},
        "spec": {
            "serviceAccountName": account,
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": volumes,
        },
    }
    return with_spec_hash(template)


def front_deployment(
    ref: ModelRef, component: str, name: str, template: dict[str, Any], replicas: int
) -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": object_meta(ref, name, component),
        "spec": {
            "replicas": replicas,
            "revisionHistoryLimit": 3,
            "selector": {"matchLabels": selector_labels(ref, component)},
            "template": template,
        },
    }
