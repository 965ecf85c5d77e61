import pytest

from prefixroute.controller.engines.custom import Custom
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import parse_engine


def test_image_command_and_args_as_given() -> None:
    out = Custom().render(
        parse_engine({"kind": "custom", "image": "ghcr.io/x/tgi:3", "command": ["serve"], "args": ["--port", "8000"]})
    )
    assert (out.image, out.command, out.args) == ("ghcr.io/x/tgi:3", ("serve",), ("--port", "8000"))
    assert set(out.probes) == {"readiness"}


def test_no_image_cannot_be_honoured() -> None:
    with pytest.raises(SpecError, match=r"spec\.engine\.image is required for engine kind custom"):
        Custom().render(parse_engine({"kind": "custom"}))
