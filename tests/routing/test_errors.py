"""The routing core's errors: one tree under RoutingError, which the fronts map in one place."""

import pytest

from prefixroute.routing.errors import InvalidKnob, InvalidRequest, NoMemberAvailable, RoutingError, UnknownStrategy


@pytest.mark.parametrize(
    "error",
    [InvalidRequest("bad body"), NoMemberAvailable("none"), UnknownStrategy("x"), InvalidKnob("load_factor", "low")],
)
def test_every_error_is_a_routing_error(error):
    """A front catches RoutingError and maps it; nothing the core raises may slip past."""
    assert isinstance(error, RoutingError)


def test_an_invalid_request_names_the_field_when_one_is_at_fault():
    error = InvalidRequest("'messages' must be a list", "messages")
    assert (str(error), error.message, error.param) == (
        "'messages' must be a list",
        "'messages' must be a list",
        "messages",
    )
    assert InvalidRequest("the body is not JSON").param is None


def test_an_invalid_knob_is_a_value_error_naming_its_knob():
    """Callers that validate any setting catch ValueError; each surface says where the value came from."""
    with pytest.raises(ValueError, match=r"^load factor must be at least 1\.0$") as caught:
        raise InvalidKnob("load_factor", "load factor must be at least 1.0")
    assert (caught.value.knob, caught.value.message) == ("load_factor", "load factor must be at least 1.0")
