"""Which LoRA adapter a request asks for, read from its body as both fronts read it.

vLLM serves each adapter under its own name: a client asks for adapter A by sending
`"model": "A"`. A name is an adapter's when some member lists it (the ring document's
`adapters`, as the operator confirmed them), or, with `--served-model` set, when it is
any name but the served model's (a fleet without adapter information: the engine will
answer 404 itself for a name it does not have). Anything else is the base model.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any


def adapter_of(body: Mapping[str, Any], listed: Collection[str], served_model: str) -> str | None:
    """The adapter `body` asks for (None: the base model). `listed`: the adapters some member
    lists; `served_model`: the engines' base model name ("" when not given)."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return None
    if model in listed:
        return model
    if served_model and model != served_model:
        return model
    return None


def adapter_label(adapter: str, listed: Collection[str]) -> str:
    """The adapter as a metric label: its name when a member lists it, "other" for a name
    only a client made up (labels must stay a bounded set)."""
    return adapter if adapter in listed else "other"
