import pytest

from prefixroute.controller.engines.factory import make_adapter
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import ENGINE_KINDS


@pytest.mark.parametrize("kind", ENGINE_KINDS)
def test_every_kind_has_its_adapter(kind: str) -> None:
    assert make_adapter(kind).kind == kind


def test_an_unknown_kind_is_a_spec_error() -> None:
    with pytest.raises(SpecError):
        make_adapter("tgi")
