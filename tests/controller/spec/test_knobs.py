"""Knobs read from a section of the spec by their declarations."""

from __future__ import annotations

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields
from prefixroute.controller.spec.knobs import read_knob, read_knobs
from prefixroute.routing.knobs import ISOLATE_TENANTS, KNOBS, LOAD_FACTOR, RETRIES, STRATEGY, TENANT_HEADER


def test_absent_fields_take_the_knobs_default_or_none_without_a_crd_default() -> None:
    f = Fields({}, "spec.routing")
    assert read_knob(f, LOAD_FACTOR) == 1.25
    assert read_knob(f, ISOLATE_TENANTS) is False
    assert read_knob(f, TENANT_HEADER) is None
    assert read_knob(Fields({}, "spec.router"), RETRIES) is None  # the router's own default applies


def test_values_are_read_by_type() -> None:
    f = Fields({"loadFactor": 2, "isolateTenants": True, "strategy": "least-load"}, "spec.routing")
    assert read_knob(f, LOAD_FACTOR) == 2.0
    assert isinstance(read_knob(f, LOAD_FACTOR), float)
    assert (read_knob(f, ISOLATE_TENANTS), read_knob(f, STRATEGY)) == (True, "least-load")


@pytest.mark.parametrize(
    ("data", "knob", "message"),
    [
        ({"loadFactor": "high"}, LOAD_FACTOR, "spec.routing.loadFactor must be a number"),
        ({"loadFactor": 0.5}, LOAD_FACTOR, "spec.routing.loadFactor: load factor must be at least 1.0"),
        ({"isolateTenants": "yes"}, ISOLATE_TENANTS, "spec.routing.isolateTenants must be true or false"),
        ({"tenantHeader": "a b"}, TENANT_HEADER, "spec.routing.tenantHeader: tenant header 'a b' must match"),
    ],
)
def test_a_bad_value_is_a_spec_error_naming_the_field(data: dict, knob, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        read_knob(Fields(data, "spec.routing"), knob)


def test_read_knobs_takes_only_the_sections_knobs() -> None:
    routing = read_knobs(Fields({}, "spec.routing"), KNOBS)
    assert "retries" not in routing
    assert "normalise" not in routing
    assert routing["strategy"] == "prefix-cache"
    assert read_knobs(Fields({"retries": 3}, "spec.router"), KNOBS) == {
        "retries": 3,
        "hold_seconds": None,
        "max_held_requests": None,
    }
