"""What every engine adapter shares: probe defaults and overrides, and the checks on a built-in kind."""

import pytest

from prefixroute.controller.engines.base import (
    check_builtin,
    gpu_engine_probes,
    http_probe,
    merge_probes,
    readiness_probe,
    reject_flags,
)
from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import parse_engine

RESERVED = ("--port", "--host", "--model")


def test_probe_overrides_merge_timing_and_replace_handlers() -> None:
    probes = merge_probes(
        gpu_engine_probes(), {"startup": {"failureThreshold": 600}, "readiness": {"exec": {"command": ["true"]}}}
    )
    assert probes["startup"]["failureThreshold"] == 600
    assert probes["startup"]["httpGet"]["path"] == "/health"
    assert probes["startup"]["periodSeconds"] == gpu_engine_probes()["startup"]["periodSeconds"]
    assert probes["readiness"]["exec"] == {"command": ["true"]}
    assert "httpGet" not in probes["readiness"]
    assert probes["readiness"]["periodSeconds"] == 5  # the default's timing stays with a new handler
    assert probes["liveness"] == gpu_engine_probes()["liveness"]


@pytest.mark.parametrize("handler", ["httpGet", "tcpSocket", "exec", "grpc"])
def test_any_handler_of_its_own_replaces_the_defaults(handler: str) -> None:
    merged = merge_probes({"readiness": readiness_probe()}, {"readiness": {handler: {"port": 9}}})
    assert [k for k in merged["readiness"] if k in ("httpGet", "tcpSocket", "exec", "grpc")] == [handler]


def test_a_probe_the_adapter_has_no_default_for_is_added_as_given() -> None:
    merged = merge_probes({"readiness": readiness_probe()}, {"startup": {"tcpSocket": {"port": "http"}}})
    assert merged == {"readiness": readiness_probe(), "startup": {"tcpSocket": {"port": "http"}}}


def test_merging_leaves_the_defaults_as_they_were() -> None:
    defaults = {"readiness": readiness_probe()}
    merge_probes(defaults, {"readiness": {"exec": {"command": ["true"]}, "periodSeconds": 1}})
    assert defaults == {"readiness": readiness_probe()}


def test_probes_call_the_engines_named_port() -> None:
    assert http_probe("/ready", periodSeconds=3) == {"httpGet": {"path": "/ready", "port": "http"}, "periodSeconds": 3}


def test_gpu_engines_get_half_an_hour_to_start_before_liveness_counts() -> None:
    startup = gpu_engine_probes()["startup"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 1800


@pytest.mark.parametrize("args", [["--port", "9"], ["--port=9"], ["--max-model-len", "8", "--host", "h"]])
def test_a_flag_the_operator_sets_is_refused_naming_it(args: list[str]) -> None:
    flag = next(a.split("=")[0] for a in args if a.split("=")[0] in RESERVED)
    with pytest.raises(SpecError, match=f"^spec.engine.args must not set {flag} for engine kind vllm: the operator"):
        reject_flags(args, RESERVED, "vllm")


def test_other_flags_and_look_alikes_pass() -> None:
    reject_flags(["--portable", "--model-len=2", "--max-model-len", "8"], RESERVED, "vllm")


@pytest.mark.parametrize("kind", ["vllm", "sglang", "sim"])
def test_a_built_in_kind_needs_a_model_and_no_command(kind: str) -> None:
    assert check_builtin(parse_engine({"kind": kind, "model": "m", "args": ["--x"]}), RESERVED) == "m"
    with pytest.raises(SpecError, match=f"^spec.engine.model is required for engine kind {kind}$"):
        check_builtin(parse_engine({"kind": kind}), RESERVED)
    with pytest.raises(SpecError, match=f"^spec.engine.command is only used with engine kind custom; kind {kind}"):
        check_builtin(parse_engine({"kind": kind, "model": "m", "command": ["python"]}), RESERVED)
    with pytest.raises(SpecError, match="must not set --model"):
        check_builtin(parse_engine({"kind": kind, "model": "m", "args": ["--model=x"]}), RESERVED)
