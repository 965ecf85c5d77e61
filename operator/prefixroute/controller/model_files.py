"""Where an engine finds its model's files, as spec.engine would say it by hand (pure).

spec.model is turned into the engine spec a person would have written without it: the
model argument (a hub id, or a folder), the volume and read-only mount that hold the folder
(the cache's claim or its per-node hostPath folder, the source claim, or an image volume),
and the few flags that keep the served name and revision what spec.model says. Everything
downstream — the engine adapters, precise routing (whose routers mount the same volume
read-only to read the tokenizer), the builders — then works on that one engine spec and
needs no second idea of where a model lives.

A cached hub model's folder is the download's marker link (model_download.py): it exists
only once every file does, so even an engine started by hand early would find no model
rather than half of one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.adapters import AdapterSpec, check_adapters
from prefixroute.controller.spec.engine import EngineSpec
from prefixroute.controller.spec.model import ModelSpec
from prefixroute.controller.spec.model_source import ClaimSource, FolderSource, HubSource, ImageSource, ModelSource

CACHE_VOLUME = "model-cache"
CACHE_MOUNT = "/model-cache"
HUB_CACHE_DIR = f"{CACHE_MOUNT}/hub"  # the hub library's cache layout: blobs, snapshots
LINKS_DIR = f"{CACHE_MOUNT}/models"  # one marker link per downloaded revision
ADAPTERS_DIR = f"{CACHE_MOUNT}/adapters"  # one marker link per hub adapter (spec.adapters)
SOURCE_VOLUME = "model-source"
SOURCE_MOUNT = "/model-source"
REVISION_FLAG, SERVED_NAME_FLAG, SIM_TOKENIZER_FLAG = "--revision", "--served-model-name", "--tokenizer"
OFFLINE_ENV = "HF_HUB_OFFLINE"  # the files are all there: an engine must not ask the hub for more


def cache_claim_name(model: str) -> str:
    """The cache's PersistentVolumeClaim."""
    return f"{model}-model-cache"


def download_job_name(model: str, digest: str) -> str:
    """A download Job, by a digest of what it runs: a new revision or a new token reference
    is a new Job (a Job's pod template is immutable). At most 63 characters (the Job
    controller puts the name in a label) for a model name of at most 50 (the CRD's limit)."""
    return f"{model}-fetch-{digest[:6]}"


def node_cache_path(root: str, namespace: str) -> str:
    """A per-node cache's folder on every node: one per namespace. Its models share it (the
    hub layout is keyed by repository, so two models of one repository share the files); other
    namespaces do not, so a gated repository fetched with one namespace's token is never
    handed to another's engines."""
    return f"{root.rstrip('/')}/{namespace}"


def download_lock(hub: HubSource) -> str:
    """The file lock the engine pods of one node take around the download of `hub`: the first
    downloads, the others wait and then find the marker link."""
    return f"{LINKS_DIR}/.{link_name(hub)}.lock"


def link_name(hub: HubSource) -> str:
    """The marker link's file name for a repository at a revision (a branch may hold '/')."""
    return f"{hub.repo.replace('/', '--')}@{(hub.revision or 'main').replace('/', '--')}"


def cached_folder(hub: HubSource) -> str:
    """Where engines and routers find the downloaded snapshot."""
    return f"{LINKS_DIR}/{link_name(hub)}"


def adapter_link(adapter: AdapterSpec, hub: HubSource) -> str:
    """Where a hub adapter's download puts its marker link: NAME@REVISION under the cache."""
    return f"{ADAPTERS_DIR}/{adapter.name}@{(hub.revision or 'main').replace('/', '--')}"


def adapter_path(adapter: AdapterSpec) -> str:
    """The folder an engine loads the adapter from (``lora_path``): the cache's marker link
    for a hub adapter (it exists once every file does), else the folder as given."""
    source = adapter.source
    return adapter_link(adapter, source) if isinstance(source, HubSource) else source.path


def served_name(engine: EngineSpec) -> str | None:
    """The name clients ask for the base model by: the first --served-model-name, else the
    model argument (vLLM's rule)."""
    args = engine.args
    for index, arg in enumerate(args):
        if arg == SERVED_NAME_FLAG and index + 1 < len(args):
            return args[index + 1]
        if arg.startswith(SERVED_NAME_FLAG + "="):
            return arg.split("=", 1)[1]
    return engine.model


def _flag_given(args: tuple[str, ...], flag: str) -> bool:
    return any(arg == flag or arg.startswith(flag + "=") for arg in args)


def _refuse_own_flags(engine: EngineSpec, flags: tuple[str, ...]) -> None:
    for flag in flags:
        if _flag_given(engine.args, flag):
            raise SpecError(f"spec.engine.args must not set {flag}: spec.model sets it")


def _folder_and_volume(name: str, namespace: str, model: ModelSource) -> tuple[str | None, dict[str, Any] | None]:
    """The folder the engine reads (None: the engine fetches a hub id itself) and the volume
    holding it (None: the folder is on the image or on one of spec.engine.volumes)."""
    source = model.source
    if isinstance(source, HubSource):
        if model.cache is None:
            return None, None
        if model.cache.per_node is not None:  # created by the kubelet if missing, owned by root
            host = {"path": node_cache_path(model.cache.per_node.host_path, namespace), "type": "DirectoryOrCreate"}
            return cached_folder(source), {"name": CACHE_VOLUME, "hostPath": host}
        claim = {"claimName": cache_claim_name(name), "readOnly": True}
        return cached_folder(source), {"name": CACHE_VOLUME, "persistentVolumeClaim": claim}
    if isinstance(source, ClaimSource):
        folder = f"{SOURCE_MOUNT}/{source.path}" if source.path else SOURCE_MOUNT
        claim = {"claimName": source.claim_name, "readOnly": True}
        return folder, {"name": SOURCE_VOLUME, "persistentVolumeClaim": claim}
    if isinstance(source, ImageSource):  # a Kubernetes image volume: read-only by nature
        folder = f"{SOURCE_MOUNT}/{source.path}" if source.path else SOURCE_MOUNT
        image = {"reference": source.reference}
        if source.pull_policy is not None:
            image["pullPolicy"] = source.pull_policy
        return folder, {"name": SOURCE_VOLUME, "image": image}
    assert isinstance(source, FolderSource)
    return source.path, None


def _mounted(engine: EngineSpec, volume: dict[str, Any] | None, mount_path: str) -> EngineSpec:
    if volume is None:
        return engine
    if any(v.get("name") == volume["name"] for v in engine.volumes):
        raise SpecError(f"spec.engine.volumes must not name a volume {volume['name']!r}: spec.model adds it")
    mount = {"name": volume["name"], "mountPath": mount_path, "readOnly": True}
    return replace(engine, volumes=(*engine.volumes, volume), volume_mounts=(*engine.volume_mounts, mount))


def engine_with_model(
    name: str, engine: EngineSpec, model: ModelSource | None, namespace: str = "default"
) -> EngineSpec:
    """`engine` as it would be written by hand to serve spec.model; SpecError for a clash.
    `namespace` places a per-node cache's folder (the default is Kubernetes' own)."""
    if model is None:
        return engine
    if engine.model:
        raise SpecError("spec.engine.model must be empty when spec.model is given: name the model in one place")
    if engine.kind == "custom":
        raise SpecError("spec.model is for engine kinds vllm, sglang and sim: a custom engine takes its model in args")
    folder, volume = _folder_and_volume(name, namespace, model)
    source = model.source
    served = model.served_name or (source.repo if isinstance(source, HubSource) else None)
    ours: list[str] = []
    if isinstance(source, HubSource) and folder is None and source.revision and engine.kind != "sim":
        ours += [REVISION_FLAG, source.revision]
    if engine.kind == "sim":  # engine-sim serves --model as the name, reads the tokenizer from a folder
        if folder is not None:
            ours += [SIM_TOKENIZER_FLAG, folder]
        argument = served or folder or ""
    else:
        argument = folder or (source.repo if isinstance(source, HubSource) else "")
        if served and served != argument:
            ours += [SERVED_NAME_FLAG, served]
    _refuse_own_flags(engine, tuple(a for a in ours if a.startswith("--")))
    env = engine.env
    if model.cached and not any(e.get("name") == OFFLINE_ENV for e in env):
        env = (*env, {"name": OFFLINE_ENV, "value": "1"})
    mount_path = SOURCE_MOUNT if volume is not None and volume["name"] == SOURCE_VOLUME else CACHE_MOUNT
    resolved = replace(engine, model=argument, args=(*ours, *engine.args), env=env)
    return _mounted(resolved, volume, mount_path)


def resolved(name: str, spec: ModelSpec, namespace: str = "default") -> ModelSpec:
    """The spec with its engine serving spec.model (unchanged without one); SpecError when
    spec.adapters do not fit the rest (check_adapters: hub adapters need the claim)."""
    if spec.model is not None:
        spec = replace(spec, engine=engine_with_model(name, spec.engine, spec.model, namespace))
    claim = spec.model is not None and spec.model.cached and not spec.model.per_node
    check_adapters(spec.adapters, spec.engine.lora, served_name(spec.engine), claim)
    return spec
