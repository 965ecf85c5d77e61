"""`source_for`, the one place a front's settings pick where its fleet comes from (the package
`prefixroute.front.membership`; each source: tests/front/membership/)."""

from __future__ import annotations

import pytest

from prefixroute.epp.settings import EppSettings
from prefixroute.front.membership import source_for
from prefixroute.front.membership.inference_pool import InferencePoolSource
from prefixroute.front.membership.kubernetes import KubernetesSource
from prefixroute.front.membership.ring_file import RingFileSource
from prefixroute.front.membership.static import StaticSource
from prefixroute.router.settings import RouterSettings
from prefixroute.routing.config import RoutingConfig

ROUTING = RoutingConfig(virtual_nodes=11)


def test_backends_are_a_static_fleet() -> None:
    source = source_for(RouterSettings(backends=("http://a", "http://b"), routing=ROUTING))
    assert isinstance(source, StaticSource)
    assert [m.url for m in source.fleet.members] == ["http://a", "http://b"]
    assert source.fleet.virtual_nodes == 11


def test_a_ring_file_is_polled_at_the_ring_poll_interval() -> None:
    source = source_for(RouterSettings(ring_file="/etc/ring.yaml", routing=ROUTING, ring_poll_interval=2.5))
    assert isinstance(source, RingFileSource)
    assert (source.path, source.virtual_nodes, source.interval) == ("/etc/ring.yaml", 11, 2.5)


def test_a_resource_is_watched_in_its_namespace() -> None:
    source = source_for(RouterSettings(resource="serving/llama", routing=ROUTING))
    assert isinstance(source, KubernetesSource)
    assert (source.namespace, source.name, source.virtual_nodes) == ("serving", "llama", 11)


def test_an_inference_pool_is_read_at_the_ring_poll_interval() -> None:
    source = source_for(EppSettings(inference_pool="gie/pool", routing=ROUTING, ring_poll_interval=3.0))
    assert isinstance(source, InferencePoolSource)
    assert (source.namespace, source.name, source.virtual_nodes, source.interval) == ("gie", "pool", 11, 3.0)


@pytest.mark.parametrize("settings", [EppSettings(backends=("http://a",)), RouterSettings(backends=("http://a",))])
def test_both_fronts_pick_alike(settings: RouterSettings | EppSettings) -> None:
    assert isinstance(source_for(settings), StaticSource)
