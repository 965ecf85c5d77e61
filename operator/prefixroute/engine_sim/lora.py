"""engine-sim's LoRA adapters: which are registered, from which folder, under which id.

Behaves as vLLM's API server with `--enable-lora` and runtime updating allowed
(VLLM_ALLOW_RUNTIME_LORA_UPDATING): `--lora-modules NAME=PATH` registers adapters at
start, POST /v1/load_lora_adapter and /v1/unload_lora_adapter register and forget
them while serving, with vLLM's status codes and messages (checked against vLLM
0.32's `OpenAIServingModels`). Each adapter gets an integer id counting from 1, as
vLLM numbers its LoRARequests; its KV cache events carry it as `lora_id`.

What engine-sim reads from an adapter's folder: that it holds `adapter_config.json`
and that the file is a JSON object (PEFT's adapter config, the first thing vLLM
reads); no weights. A folder without it is vLLM's 404 "No adapter found", an
unreadable one its 500.

Registering takes no slot: the scheduler's `AdapterSlots` brings an adapter into
one of the `--max-loras` slots when a request for it starts.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

from prefixroute.engine_model.adapters import AdapterSlots
from prefixroute.engine_model.errors import BadRequest, NotFound

ADAPTER_CONFIG = "adapter_config.json"


class InvalidUserInput(BadRequest):
    """vLLM's 400 for a load or unload request it refuses."""

    kind = "InvalidUserInput"


class AdapterUnreadable(BadRequest):
    """An adapter folder whose config cannot be read: vLLM's 500 from the engine."""

    status = HTTPStatus.INTERNAL_SERVER_ERROR
    kind = "InternalServerError"


@dataclass(frozen=True)
class LoraModule:
    """One `--lora-modules` entry."""

    name: str
    path: str


def parse_module(text: str) -> LoraModule:
    """`NAME=PATH`, or vLLM's JSON form `{"name": ..., "path": ...}`; ValueError otherwise."""
    if text.lstrip().startswith("{"):
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise ValueError(f"--lora-modules {text!r} is not valid JSON: {exc}") from None
        name, path = raw.get("name"), raw.get("path")
    else:
        name, _, path = text.partition("=")
    if not isinstance(name, str) or not isinstance(path, str) or not name or not path:
        raise ValueError(f"--lora-modules takes NAME=PATH or a JSON object with name and path, got {text!r}")
    return LoraModule(name, path)


def write_adapter_folder(folder: Path, rank: int = 16) -> Path:
    """A folder engine-sim accepts as an adapter (a PEFT config, no weights): for tests and benches."""
    folder.mkdir(parents=True, exist_ok=True)
    config = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": ["q_proj", "v_proj"]}
    (folder / ADAPTER_CONFIG).write_text(json.dumps(config))
    return folder


def check_adapter_folder(name: str, path: str) -> None:
    """The folder holds an adapter config engine-sim can read, or vLLM's error for it."""
    config = Path(path) / ADAPTER_CONFIG
    if not config.is_file():
        raise NotFound(f"Loading lora {name} failed: No adapter found for {path}")
    try:
        parsed = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AdapterUnreadable(f"Loading lora {name} failed: {config} cannot be read: {exc}") from None
    if not isinstance(parsed, Mapping):
        raise AdapterUnreadable(f"Loading lora {name} failed: {config} is not a JSON object")


def _field(body: Mapping[str, Any], name: str, kind: type) -> Any:
    value = body.get(name)
    if value is not None and not isinstance(value, kind):
        raise BadRequest(f"'{name}' must be a {kind.__name__}", name)
    return value


class LoraAdapters:
    """The registered adapters (name -> folder and id) over the scheduler's slots."""

    def __init__(self, slots: AdapterSlots, base_names: Iterable[str]) -> None:
        self.slots = slots
        self.base_names = frozenset(base_names)
        self.paths: dict[str, str] = {}
        self.ids: dict[str, int] = {}
        self._next_id = itertools.count(1)

    def __contains__(self, name: object) -> bool:
        return name in self.paths

    def names(self) -> list[str]:
        return list(self.paths)

    def load(self, body: Any) -> str:
        """POST /v1/load_lora_adapter: register the adapter, or raise vLLM's error."""
        if not isinstance(body, Mapping):
            raise BadRequest("the request body must be a JSON object")
        name, path = _field(body, "lora_name", str), _field(body, "lora_path", str)
        in_place = _field(body, "load_inplace", bool) or False
        if not name or not path:
            raise InvalidUserInput("Both 'lora_name' and 'lora_path' must be provided.")
        if name in self.base_names:
            raise InvalidUserInput(f"The lora adapter '{name}' conflicts with a served base model.")
        if not in_place and name in self.paths:
            raise InvalidUserInput(
                f"The lora adapter '{name}' has already been loaded. "
                "If you want to load the adapter in place, set 'load_inplace' to True."
            )
        check_adapter_folder(name, path)
        if name not in self.ids:
            self.ids[name] = next(self._next_id)
        self.paths[name] = path
        self.slots.register(name)
        return f"Success: LoRA adapter '{name}' added successfully."

    def unload(self, body: Any) -> str:
        """POST /v1/unload_lora_adapter: forget the adapter, or raise vLLM's error."""
        if not isinstance(body, Mapping):
            raise BadRequest("the request body must be a JSON object")
        name = _field(body, "lora_name", str)
        if not name:
            raise InvalidUserInput("'lora_name' needs to be provided to unload a LoRA adapter.")
        if name not in self.paths:
            raise NotFound(f"The lora adapter '{name}' cannot be found.")
        del self.paths[name], self.ids[name]
        self.slots.unregister(name)
        return f"Success: LoRA adapter '{name}' removed successfully."
