"""spec.adapters and spec.engine.lora: the LoRA adapters served on the base model, and the
slots each engine keeps for them.

An adapter comes from a hub repository at a revision (downloaded into the model cache, so a
hub adapter needs spec.model.cache) or from a folder the engine can already read. Its name
is what clients put in a request's ``model`` field, so it must differ from the served
model's name, and it travels in a pod annotation and in ``lora_name``: letters, digits and
``._-`` only (no comma, which separates names in the annotation).

spec.engine.lora turns LoRA on in the engines (vLLM's ``--enable-lora``, the slots and the
largest rank). It is a field of its own, not implied by spec.adapters, so that adding the
first adapter or removing the last never changes the engines' command line: adapters come
and go at runtime without a restart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields
from prefixroute.controller.spec.model_source import FolderSource, HubSource, folder_source, hub_source

DEFAULT_MAX_LORAS = 4  # vLLM's own default slot count
DEFAULT_MAX_RANK = 16  # vLLM's own default --max-lora-rank
MAX_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the ranks vLLM's --max-lora-rank accepts
NAME_PATTERN = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
MAX_ADAPTERS = 128  # bounds the CRD's uniqueness rule's cost

AdapterSource = HubSource | FolderSource


@dataclass(frozen=True)
class LoraSlots:
    max_loras: int = DEFAULT_MAX_LORAS
    max_rank: int = DEFAULT_MAX_RANK


@dataclass(frozen=True)
class AdapterSpec:
    name: str
    source: AdapterSource


def parse_lora(data: object) -> LoraSlots | None:
    """spec.engine.lora, or None when LoRA is off."""
    if data is None:
        return None
    f = Fields(data, "spec.engine.lora")
    max_loras = f.integer("maxLoras", DEFAULT_MAX_LORAS)
    if max_loras < 1:
        raise SpecError("spec.engine.lora.maxLoras must be at least 1")
    max_rank = f.integer("maxRank", DEFAULT_MAX_RANK)
    if max_rank not in MAX_RANKS:
        raise SpecError(f"spec.engine.lora.maxRank must be one of {', '.join(map(str, MAX_RANKS))}")
    return LoraSlots(max_loras, max_rank)


def _adapter(f: Fields) -> AdapterSpec:
    name = f.text_or_none("name")
    if name is None or not re.match(NAME_PATTERN, name):
        raise SpecError(
            f"{f.where('name')} must be 1 to 63 letters, digits, '.', '_' or '-', starting and ending "
            "with a letter or digit"
        )
    source = f.child("source")
    given = [key for key in ("hub", "folder") if source.data.get(key) is not None]
    if len(given) != 1:
        raise SpecError(f"{source.path} needs exactly one of hub or folder")
    return AdapterSpec(
        name, hub_source(source.child("hub")) if given[0] == "hub" else folder_source(source.child("folder"))
    )


def parse_adapters(data: object) -> tuple[AdapterSpec, ...]:
    """spec.adapters (empty when absent); names are unique."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise SpecError("spec.adapters must be a list")
    adapters = tuple(_adapter(Fields(item, f"spec.adapters[{i}]")) for i, item in enumerate(data))
    seen: set[str] = set()
    for adapter in adapters:
        if adapter.name in seen:
            raise SpecError(f"spec.adapters names {adapter.name!r} twice: each adapter needs a name of its own")
        seen.add(adapter.name)
    return adapters


def check_adapters(adapters: tuple[AdapterSpec, ...], lora: LoraSlots | None, served: str | None, cached: bool) -> None:
    """What relates spec.adapters to the rest of the spec (the CRD's CEL rules say the same)."""
    if not adapters:
        return
    if lora is None:
        raise SpecError("spec.adapters need spec.engine.lora: the engines' LoRA slots (e.g. lora: {maxLoras: 4})")
    for adapter in adapters:
        if served is not None and adapter.name == served:
            raise SpecError(
                f"spec.adapters name {adapter.name!r} is the served model's name: requests could not tell them apart"
            )
        if isinstance(adapter.source, HubSource) and not cached:
            raise SpecError(
                f"spec.adapters {adapter.name!r} comes from the hub: it is downloaded into the model cache's "
                "claim, so spec.model needs a hub source with a cache that is not perNode"
            )
