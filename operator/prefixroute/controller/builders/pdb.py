"""A PodDisruptionBudget for the engines: node drains take one engine at a time, so the
ring loses one member's cache at a time instead of all of them."""

from __future__ import annotations

from typing import Any

from prefixroute.controller.builders.meta import object_meta, selector_labels
from prefixroute.controller.names import COMPONENT_ENGINE, engine_name
from prefixroute.controller.spec.model import ModelRef


def engine_pdb(ref: ModelRef) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": object_meta(ref, engine_name(ref.name), COMPONENT_ENGINE),
        "spec": {
            "maxUnavailable": 1,
            "selector": {"matchLabels": selector_labels(ref, COMPONENT_ENGINE)},
            # a crash-looping engine serves nothing; it must not block a drain
            "unhealthyPodEvictionPolicy": "AlwaysAllow",
        },
    }
