"""Knobs (routing/knobs.py) read from their section of the spec, by their declarations.

The API server has already applied the CRD's defaults and bounds, which are generated
from the same declarations; reading and checking them here again keeps a value that
slipped past (an old CRD, a test) from reaching a pod: it becomes a SpecError naming
the field, which the operator reports as a condition.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import Knob


def read_knob(f: Fields, knob: Knob[Any]) -> Any:
    """The field's value, or the knob's default when absent (None when the CRD has none)."""
    key = knob.crd_key
    default = knob.default if knob.crd_default else None
    if knob.kind is bool:
        value: Any = None if f.data.get(key) is None else f.flag(key, False)
    elif knob.kind is int:
        value = f.integer_or_none(key)
    elif knob.kind is float:
        value = None if f.data.get(key) is None else f.number(key, 0.0)
    else:
        value = f.text_or_none(key)
    value = default if value is None else value
    if value is not None:
        try:
            knob.check(value)
        except InvalidKnob as exc:
            raise SpecError(f"{f.where(key)}: {exc.message}") from None
    return value


def read_knobs(f: Fields, knobs: Iterable[Knob[Any]]) -> dict[str, Any]:
    """{knob name: value} for the knobs of this section (`f.path` is "spec.SECTION", or
    "spec.SECTION.OBJECT" for the knobs of a nested object such as spec.router.tracing)."""
    section = f.path.removeprefix("spec.")
    return {k.name: read_knob(f, k) for k in knobs if k.crd_section == section}
