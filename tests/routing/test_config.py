"""RoutingConfig: the routing knobs' typed, immutable home, refusing what their declarations refuse."""

from typing import Any

import pytest

from prefixroute.routing.config import DEFAULT_STRATEGY, RoutingConfig
from prefixroute.routing.errors import InvalidKnob
from prefixroute.routing.knobs import ROUTING_KNOBS, Knob


def test_routing_config_checks_every_knob() -> None:
    with pytest.raises(InvalidKnob, match="block size must be at least 1"):
        RoutingConfig(block_size=0)
    with pytest.raises(InvalidKnob, match="index blocks per member must be at least 1"):
        RoutingConfig(index_blocks_per_member=0)
    with pytest.raises(InvalidKnob, match="unknown strategy 'random'; choose one of prefix-cache"):
        RoutingConfig(strategy="random")


def _refused(knob: Knob[Any]) -> Any:
    """A value the knob's declaration refuses: the wrong type, else past a bound or outside the choices."""
    if knob.choices:
        return "no-such-choice"
    if knob.minimum is not None:
        return knob.minimum - 1
    if knob.maximum is not None:
        return knob.maximum + 1
    return object()  # no bound: only the type can be wrong


@pytest.mark.parametrize("knob", ROUTING_KNOBS, ids=lambda k: k.name)
def test_a_refused_value_names_its_knob(knob: Knob[Any]) -> None:
    with pytest.raises(InvalidKnob) as refused:
        RoutingConfig(**{knob.name: _refused(knob)})
    assert refused.value.knob == knob.name


def test_the_default_strategy_is_prefix_cache() -> None:
    assert RoutingConfig().strategy == DEFAULT_STRATEGY == "prefix-cache"


def test_a_config_cannot_change_once_checked() -> None:
    config = RoutingConfig(block_size=64)
    with pytest.raises(AttributeError):
        config.block_size = 0  # type: ignore[misc]
