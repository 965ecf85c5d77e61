"""Labels, selectors and metadata every child shares."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prefixroute.controller.hashing import stable_hash
from prefixroute.controller.names import (
    ANNOTATION_SPEC_HASH,
    APP_NAME,
    LABEL_COMPONENT,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_MODEL,
    LABEL_NAME,
    MANAGED_BY,
)
from prefixroute.controller.spec.model import ModelRef


def selector_labels(ref: ModelRef, component: str) -> dict[str, str]:
    """What a Deployment selects on. Deployment selectors are immutable, so this set
    must never change between releases; other labels may."""
    return {LABEL_INSTANCE: ref.name, LABEL_COMPONENT: component, LABEL_MODEL: ref.name}


def labels(ref: ModelRef, component: str) -> dict[str, str]:
    return {LABEL_NAME: APP_NAME, **selector_labels(ref, component), LABEL_MANAGED_BY: MANAGED_BY}


def selector_string(ref: ModelRef, component: str) -> str:
    """The label selector as a string: the scale subresource's status.selector format."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(ref, component).items()))


def object_meta(
    ref: ModelRef, name: str, component: str, annotations: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Metadata of a child: our labels and a controller owner reference, so deleting the
    PrefixRoutedModel garbage-collects every child."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": ref.namespace,
        "labels": labels(ref, component),
        "ownerReferences": [ref.owner_reference()],
    }
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def with_spec_hash(template: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The pod template with an annotation hashing everything else in it: any change to
    the rendered template changes the annotation, and so rolls the pods."""
    digest = stable_hash(template)
    meta = dict(template.get("metadata") or {})
    meta["annotations"] = {**(meta.get("annotations") or {}), ANNOTATION_SPEC_HASH: digest}
    return {**template, "metadata": meta}, digest


def scrape_annotations(port: int, path: str) -> dict[str, str]:
    return {"prometheus.io/scrape": "true", "prometheus.io/port": str(port), "prometheus.io/path": path}
