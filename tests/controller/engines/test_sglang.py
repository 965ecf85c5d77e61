import pytest

from prefixroute.controller.engines.sglang import DEFAULT_IMAGE, SGLang
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import parse_engine


def render(**engine):
    return SGLang().render(parse_engine({"kind": "sglang", "model": "Qwen/Qwen2.5-7B-Instruct", **engine}))


def test_launch_server_with_metrics() -> None:
    out = render(args=["--tp-size", "2"])
    assert out.command == ("python3", "-m", "sglang.launch_server")
    assert out.args == (
        "--model-path",
        "Qwen/Qwen2.5-7B-Instruct",
        "--host",
        "0.0.0.0",
        "--port",
        "8000",
        "--enable-metrics",
        "--tp-size",
        "2",
    )
    assert out.image == DEFAULT_IMAGE
    assert set(out.probes) == {"readiness", "startup", "liveness"}


@pytest.mark.parametrize("arg", ["--model-path=x", "--port", "--host"])
def test_flags_the_operator_sets_are_refused(arg: str) -> None:
    with pytest.raises(SpecError):
        render(args=[arg])
