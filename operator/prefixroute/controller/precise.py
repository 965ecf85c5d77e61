"""spec.routing.mode: whether the routers follow the engines' KV cache events, and what that adds.

Precise mode needs two things from the engine pods and one from the router pods:

- the engine publishes its KV cache events: vLLM's own `--kv-events-config` (engine-sim
  takes the same flag), a ZMQ publisher bound on every address of the pod at
  `KV_EVENTS_PORT`, a replay endpoint at `KV_REPLAY_PORT` (a router that missed messages
  asks for them there), and a topic naming the pod; both ports are in the pod spec, so a
  NetworkPolicy can let the routers in;
- the engine's KV block size is known to the router, because the router cuts a request's
  tokens into the same blocks: the size in `spec.engine.args` (`--block-size` for vLLM,
  `--block-tokens` for engine-sim), else `DEFAULT_BLOCK_TOKENS`, which is then set on the
  engine too, so the two cannot differ whatever the platform's default;
- the router has the engine's tokenizer (vLLM's `--tokenizer` in `spec.engine.args`, else
  the model, at vLLM's `--tokenizer-revision`, else its `--revision`): for engine-sim its
  byte tokenizer, or the model folder its `--tokenizer` names (an absolute path on one of
  its volumes, mounted by the routers alike), so a simulated fleet can pay what a real
  tokenizer costs; for vLLM a folder — an absolute path on one of the engine's volumes,
  which the router pods mount read-only at the same path — or a hub id (`org/name`), whose
  tokenizer and chat template files the routers fetch from the hub themselves
  (front.tokenizer_source), never the weights. For a hub id the fronts get what the engine
  has to reach the hub: its `HF_TOKEN` (or `HUGGING_FACE_HUB_TOKEN`) and `HF_ENDPOINT`
  entries of `spec.engine.env`, copied as they are (a `secretKeyRef` stays a reference to
  the same Secret key), and a cache volume of their own. `spec.engine.envFrom` is not
  copied: it would hand the routers every key of the Secret, not only the token. A router
  that cannot fetch the tokenizer serves approximately and says why on /metrics; the
  operator shows it in the Degraded condition (controller/tokenizer_status.py).

A per-node model cache (spec.model.cache.perNode) keeps the model folder on each engine's
node, where no router can mount it: its fronts fetch the tokenizer of the hub source from
the hub instead, as for a hub id (``tokenizer_hub``), with the same env entries.

Unset, the mode is precise wherever those hold (sim; vllm with its tokenizer in a folder on
a volume or named by hub id) and approximate elsewhere. Asked for where they cannot hold, it
is a SpecError (the CRD's CEL rule refuses sglang and custom engines outright):

- sglang: SGLang publishes KV events too, but per radix-tree page (one token per page by
  default, so one event per token), with block hashes that changed meaning between its
  releases, and no cache_salt; no SGLang runs here to prove a follower against, so its
  models are routed approximately;
- custom: the operator cannot know what the engine publishes;
- vllm whose tokenizer is neither a hub id nor a folder on one of its volumes (a relative
  path, a folder reached by subPath): the router would have no way to its files.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.fields import Obj
from prefixroute.controller.spec.model_source import HubSource, ModelSource
from prefixroute.controller.spec.routing import RoutingSpec
from prefixroute.hub_ids import is_hub_id

KV_EVENTS_PORT = 5557  # vLLM's documented example port
KV_EVENTS_PORT_NAME = "kv-events"
KV_REPLAY_PORT = 5558
KV_REPLAY_PORT_NAME = "kv-replay"
DEFAULT_BLOCK_TOKENS = 16  # vLLM's default KV block size on GPUs, and engine-sim's
ENGINE_SIM_TOKENIZER = "engine-sim"
SIM_TOKENIZER_FLAG = "--tokenizer"  # engine-sim's: engine-sim or byte (its own), else a model folder
# The flag that sets the KV block size, per engine kind that publishes events.
BLOCK_FLAGS = {"vllm": "--block-size", "sim": "--block-tokens"}
EVENTS_FLAG = "--kv-events-config"
SERVED_NAME_FLAG = "--served-model-name"
# vLLM's own flags naming the tokenizer and its revision (unset: the model's, at --revision)
TOKENIZER_FLAG, TOKENIZER_REVISION_FLAG, REVISION_FLAG = "--tokenizer", "--tokenizer-revision", "--revision"
# What the engine has to reach the hub, which the fronts get too for a hub tokenizer
HUB_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_ENDPOINT")


@dataclass(frozen=True)
class PreciseRouting:
    """What precise mode adds: to the engine's args and ports, and to the fronts (the routers
    and the gateway's endpoint pickers alike)."""

    block_size: int  # tokens per KV block, the engine's and the router's
    served_model: str  # the model name the engine serves (other names in requests are adapters)
    tokenizer: str  # the fronts' --tokenizer: engine-sim, the model folder's path, or a hub id
    engine_args: tuple[str, ...]  # appended to the engine's command line
    model_volume: Obj | None = None  # the engine's volume holding the model folder (vllm)
    model_mount: Obj | None = None  # where the fronts mount it (read-only, the engine's path)
    tokenizer_revision: str | None = None  # a hub tokenizer's revision (None: the default branch)
    hub_env: tuple[Obj, ...] = ()  # the engine's env entries the fronts need to reach the hub

    @property
    def from_hub(self) -> bool:
        """The fronts fetch the tokenizer from the hub (and need a cache for it)."""
        return is_hub_id(self.tokenizer)

    def front_flags(self) -> list[str]:
        """`prefixroute router`'s and `prefixroute epp`'s precise flags (front/precise.py)."""
        revision = ["--tokenizer-revision", self.tokenizer_revision] if self.tokenizer_revision else []
        return [
            "--mode", "precise", "--tokenizer", self.tokenizer, *revision, "--served-model", self.served_model,
            "--block-size", str(self.block_size),
            "--kv-events-port", str(KV_EVENTS_PORT), "--kv-events-replay-port", str(KV_REPLAY_PORT),
        ]  # fmt: skip


def _flag_value(args: Sequence[str], flag: str) -> str | None:
    """The value of `flag` (`--flag V` or `--flag=V`) in `args`, or None."""
    for i, arg in enumerate(args):
        if arg == flag:
            return args[i + 1] if i + 1 < len(args) else None
        if arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


def events_config(pod_name_ref: str = "$(POD_NAME)") -> str:
    """vLLM's --kv-events-config JSON: bound on every address, replayable, the topic naming the pod."""
    return json.dumps(
        {
            "enable_kv_cache_events": True,
            "publisher": "zmq",
            "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
            "replay_endpoint": f"tcp://*:{KV_REPLAY_PORT}",
            "topic": f"kv@{pod_name_ref}",
        },
        separators=(",", ":"),
    )


def tokenizer_source(engine: EngineSpec) -> tuple[str, str | None]:
    """The tokenizer vLLM loads and its revision: `--tokenizer` else the model, at
    `--tokenizer-revision` else `--revision` (vLLM's own rule)."""
    tokenizer = _flag_value(engine.args, TOKENIZER_FLAG) or engine.model or ""
    return tokenizer, _flag_value(engine.args, TOKENIZER_REVISION_FLAG) or _flag_value(engine.args, REVISION_FLAG)


def _model_folder(engine: EngineSpec) -> tuple[Obj, Obj] | None:
    """The engine volume and mount holding the tokenizer's folder, when it is a folder on one."""
    return _folder_on_volume(engine, tokenizer_source(engine)[0])


def _folder_on_volume(engine: EngineSpec, folder: str) -> tuple[Obj, Obj] | None:
    """The engine volume and mount holding `folder` when it is an absolute path on one."""
    if not folder.startswith("/"):
        return None
    path = posixpath.normpath(folder)
    volumes = {v.get("name"): v for v in engine.volumes}
    best: tuple[Obj, Obj] | None = None
    for mount in engine.volume_mounts:
        at = posixpath.normpath(str(mount.get("mountPath", "")))
        under = path == at or path.startswith(at.rstrip("/") + "/")
        if under and mount.get("name") in volumes and not mount.get("subPath") and not mount.get("subPathExpr"):
            if best is None or len(at) > len(str(best[1]["mountPath"])):
                best = (volumes[mount["name"]], mount)
    return best


def _unsupported(engine: EngineSpec) -> str | None:
    """Why precise mode cannot run for this engine, or None when it can."""
    if engine.kind == "sglang":
        return (
            "SGLang's KV events come per radix page (one token per page by default), with block hashes "
            "that changed meaning between releases and no cache_salt; SGLang models are routed approximately"
        )
    if engine.kind not in BLOCK_FLAGS:
        return f"the operator cannot know what a {engine.kind} engine publishes"
    if engine.kind == "vllm" and not is_hub_id(tokenizer_source(engine)[0]) and _model_folder(engine) is None:
        return (
            "the router needs the model's tokenizer: give spec.engine.model (or --tokenizer) as a hub id "
            "(org/name), or as an absolute path to the model folder on one of spec.engine.volumes (mounted by "
            "spec.engine.volumeMounts, not by subPath); the router pods mount that volume read-only"
        )
    return None


def hub_env(engine: EngineSpec) -> tuple[Obj, ...]:
    """The engine's env entries that reach the hub (HUB_ENV), for the fronts, as written."""
    return tuple(dict(e) for e in engine.env if e.get("name") in HUB_ENV)


def tokenizer_hub(model: ModelSource | None) -> HubSource | None:
    """The hub source whose tokenizer the fronts fetch although the engine reads a folder: a
    per-node cache's, whose folder is on the engines' nodes only."""
    if model is not None and model.per_node and isinstance(model.source, HubSource):
        return model.source
    return None


def precise_routing(engine: EngineSpec, routing: RoutingSpec, hub: HubSource | None = None) -> PreciseRouting | None:
    """Precise mode's additions for this spec, or None for approximate routing; SpecError when
    precise is asked for where it cannot run. `hub` (``tokenizer_hub``): the fronts fetch
    that source's tokenizer from the hub, whatever folder the engine reads."""
    reason = _unsupported(engine)
    if routing.mode == "approximate" or (routing.mode is None and reason is not None):
        return None
    if reason is not None:
        raise SpecError(f"spec.routing.mode precise is not possible for engine kind {engine.kind}: {reason}")
    if _flag_value(engine.args, EVENTS_FLAG) is not None:
        raise SpecError(
            f"spec.engine.args must not set {EVENTS_FLAG} in precise mode: the operator sets it so the routers "
            "find the events (set spec.routing.mode approximate to publish your own)"
        )
    block_flag = BLOCK_FLAGS[engine.kind]
    given = _flag_value(engine.args, block_flag)
    extra: list[str] = [EVENTS_FLAG, events_config()]
    if given is None:
        block_size = DEFAULT_BLOCK_TOKENS
        extra += [block_flag, str(block_size)]
    else:
        try:
            block_size = int(given)
        except ValueError:
            raise SpecError(f"spec.engine.args: {block_flag} must be a whole number, not {given!r}") from None
        if block_size <= 0:
            raise SpecError(f"spec.engine.args: {block_flag} must be positive")
    model = engine.model or ""
    served = _flag_value(engine.args, SERVED_NAME_FLAG) if engine.kind == "vllm" else None
    if hub is not None:
        tokens = (block_size, served or model, hub.repo, tuple(extra))
        return PreciseRouting(*tokens, tokenizer_revision=hub.revision, hub_env=hub_env(engine))
    if engine.kind == "sim":
        return _sim_routing(engine, block_size, tuple(extra))
    tokenizer, revision = tokenizer_source(engine)
    if is_hub_id(tokenizer):
        return PreciseRouting(
            block_size, served or model, tokenizer, tuple(extra), tokenizer_revision=revision, hub_env=hub_env(engine)
        )
    folder = _model_folder(engine)
    assert folder is not None  # _unsupported said so
    volume, mount = folder
    router_mount: dict[str, Any] = {"name": mount["name"], "mountPath": mount["mountPath"], "readOnly": True}
    return PreciseRouting(block_size, served or model, tokenizer, tuple(extra), dict(volume), router_mount)


def _sim_routing(engine: EngineSpec, block_size: int, extra: tuple[str, ...]) -> PreciseRouting:
    """engine-sim's precise routing: its byte tokenizer, or the folder its --tokenizer names,
    which the routers mount from the same volume (SpecError when they could not)."""
    model = engine.model or ""
    given = _flag_value(engine.args, SIM_TOKENIZER_FLAG)
    if given is None or given in (ENGINE_SIM_TOKENIZER, "byte"):
        return PreciseRouting(block_size, model, ENGINE_SIM_TOKENIZER, extra)
    folder = _folder_on_volume(engine, given)
    if folder is None:
        raise SpecError(
            f"spec.engine.args: {SIM_TOKENIZER_FLAG} {given} in precise mode needs the routers to read the same "
            "folder: give an absolute path on one of spec.engine.volumes (mounted by spec.engine.volumeMounts, "
            "not by subPath), or set spec.routing.mode approximate"
        )
    volume, mount = folder
    router_mount: dict[str, Any] = {"name": mount["name"], "mountPath": mount["mountPath"], "readOnly": True}
    return PreciseRouting(block_size, model, posixpath.normpath(given), extra, dict(volume), router_mount)
