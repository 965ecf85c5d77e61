"""Names the operator, the routers, the e2e suite and the docs agree on: each child's name from
the model's, and the image named by the one version."""

from __future__ import annotations

import pytest

from prefixroute import __version__
from prefixroute.controller import names


@pytest.mark.parametrize(
    ("name_of", "child"),
    [
        (names.engine_name, "llama-engine"),
        (names.router_name, "llama-router"),
        (names.epp_name, "llama-epp"),
        (names.pool_name, "llama"),  # what an HTTPRoute's backendRef names: the model itself
    ],
)
def test_each_child_is_named_from_the_model(name_of: object, child: str) -> None:
    assert name_of("llama") == child  # type: ignore[operator]


def test_children_of_one_model_never_share_a_name() -> None:
    children = [f("m") for f in (names.engine_name, names.router_name, names.epp_name, names.pool_name)]
    assert len(set(children)) == len(children)


def test_the_image_is_tagged_with_the_version() -> None:
    assert names.IMAGE == f"prefixroute/prefixroute:{__version__}"


def test_the_epps_ports_are_gies_and_distinct() -> None:
    ports = (names.EPP_PORT, names.EPP_HEALTH_PORT, names.EPP_METRICS_PORT)
    assert ports == (9002, 9003, 9090)
    assert len(set(ports)) == 3
