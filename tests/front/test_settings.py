"""The settings both fronts share are checked once, the same way for the router and the EPP (each
front's own fields: tests/router/test_settings.py, tests/epp/test_settings.py)."""

from __future__ import annotations

import pytest

from prefixroute.epp.settings import EppSettings
from prefixroute.front.settings import FrontSettings
from prefixroute.router.settings import RouterSettings

FRONTS = [RouterSettings, EppSettings]


@pytest.mark.parametrize("front", FRONTS)
@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({}, "exactly one of"),
        ({"backends": ("http://a",), "ring_file": "r.yaml"}, "exactly one of"),
        ({"resource": "no-slash"}, "NAMESPACE/NAME"),
        ({"backends": ("http://a",), "max_body_bytes": 0}, "--max-body-bytes"),
        ({"backends": ("http://a",), "eject_seconds": 0.0}, "--eject-seconds"),
        ({"backends": ("http://a",), "eject_seconds": 10.0, "eject_max_seconds": 5.0}, "--eject-max-seconds"),
        ({"backends": ("http://a",), "ring_poll_interval": -1.0}, "--ring-poll-interval"),
        ({"backends": ("http://a",), "scrape_interval": -1.0}, "--scrape-interval"),
        ({"backends": ("http://a",), "trace_sample_ratio": 0.5}, "needs --otlp-endpoint"),
        (
            {"backends": ("http://a",), "trace_sample_ratio": 2.0, "otlp_endpoint": "http://c:4318"},
            "--trace-sample-ratio",
        ),
    ],
)
def test_shared_settings_are_refused_alike(front: type[FrontSettings], fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        front(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("front", FRONTS)
def test_a_ring_file_a_resource_or_backends_each_suffice(front: type[FrontSettings]) -> None:
    for fields in ({"backends": ("http://a",)}, {"ring_file": "ring.yaml"}, {"resource": "ns/model"}):
        assert front(**fields).eject_seconds == 5.0  # type: ignore[arg-type]
