import pytest

from prefixroute.controller.engines.vllm import DEFAULT_IMAGE, VLLM
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import parse_engine


def render(**engine):
    return VLLM().render(parse_engine({"kind": "vllm", "model": "meta-llama/Llama-3.1-8B-Instruct", **engine}))


def test_vllm_serve_with_prefix_caching_on_the_spec_port() -> None:
    out = render(port=8123, args=["--max-model-len", "8192"])
    assert out.command == ("vllm", "serve")
    assert out.args == (
        "meta-llama/Llama-3.1-8B-Instruct",
        "--host",
        "0.0.0.0",
        "--port",
        "8123",
        "--enable-prefix-caching",
        "--max-model-len",
        "8192",
    )
    assert out.image == DEFAULT_IMAGE
    assert out.metrics_path == "/metrics"


def test_probes_wait_for_a_slow_model_load_then_watch_health() -> None:
    probes = render().probes
    assert set(probes) == {"readiness", "startup", "liveness"}
    assert all(p["httpGet"] == {"path": "/health", "port": "http"} for p in probes.values())
    assert probes["startup"]["periodSeconds"] * probes["startup"]["failureThreshold"] >= 1800


@pytest.mark.parametrize("arg", ["--port", "--port=9000", "--host", "--model"])
def test_flags_the_operator_sets_are_refused(arg: str) -> None:
    with pytest.raises(SpecError, match="must not set"):
        render(args=[arg, "1"])


def test_user_image_wins() -> None:
    assert render(image="my/vllm:1").image == "my/vllm:1"


def test_lora_slots_turn_on_runtime_adapter_loading() -> None:
    out = render(lora={"maxLoras": 2, "maxRank": 32}, args=["--max-model-len", "2048"])
    assert out.args[6:] == ("--enable-lora", "--max-loras", "2", "--max-lora-rank", "32", "--max-model-len", "2048")
    assert out.env == ({"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"},)
    off = render()
    assert "--enable-lora" not in off.args
    assert off.env == ()


@pytest.mark.parametrize("arg", ["--enable-lora", "--max-loras=3", "--max-lora-rank"])
def test_lora_flags_are_the_operators_when_lora_is_on(arg: str) -> None:
    with pytest.raises(SpecError, match=r"spec\.engine\.lora sets it"):
        render(lora={}, args=[arg])
    assert arg in render(args=[arg]).args  # without spec.engine.lora they are the user's
