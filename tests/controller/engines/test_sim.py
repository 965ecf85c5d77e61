import pytest

from prefixroute import __version__
from prefixroute.controller.engines.sim import Sim
from prefixroute.controller.errors import SpecError
from prefixroute.controller.names import IMAGE
from prefixroute.controller.spec.engine import parse_engine


def render(**engine):
    return Sim().render(parse_engine({"kind": "sim", "model": "demo", **engine}))


def test_engine_sim_from_our_image_bound_to_the_pod_ip() -> None:
    out = render(args=["--kv-blocks", "512"])
    assert out.image == IMAGE == f"prefixroute/prefixroute:{__version__}"
    assert out.command == ()  # the image's entry point is the prefixroute console script
    assert out.args == ("engine-sim", "--host", "$(POD_IP)", "--port", "8000", "--model", "demo", "--kv-blocks", "512")
    assert out.ours


def test_no_startup_probe_for_a_fast_starting_engine() -> None:
    assert set(render().probes) == {"readiness", "liveness"}


def test_another_image_is_not_treated_as_ours() -> None:
    assert not render(image="registry.local/prefixroute:dev").ours


def test_the_model_flag_is_the_operators() -> None:
    with pytest.raises(SpecError, match="--model"):
        render(args=["--model", "other"])


def test_lora_slots_become_engine_sims_slots() -> None:
    out = render(lora={"maxLoras": 3}, args=["--kv-blocks", "64"])
    assert out.args[-4:] == ("--max-loras", "3", "--kv-blocks", "64")
    assert "--max-loras" not in render().args
