"""spec.engine: what runs in each engine pod, read with a path in every refusal."""

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.engine import (
    DEFAULT_ENGINE_PORT,
    DEFAULT_SLOW_START_SECONDS,
    DEFAULT_TERMINATION_GRACE_SECONDS,
    EngineSpec,
    Rollout,
    parse_engine,
)

SIM = {"kind": "sim", "model": "m"}


def test_engine_fields() -> None:
    engine = parse_engine(
        {
            "kind": "vllm",
            "model": "m",
            "port": 9000,
            "sharedMemorySize": "8Gi",
            "probes": {"startup": {"failureThreshold": 10}},
            "nodeSelector": {"gpu": "h100"},
        }
    )
    assert (engine.kind, engine.model, engine.port, engine.shared_memory_size) == ("vllm", "m", 9000, "8Gi")
    assert engine.probes == {"startup": {"failureThreshold": 10}}
    assert engine.node_selector == {"gpu": "h100"}


def test_a_bare_engine_takes_the_defaults() -> None:
    engine = parse_engine({"kind": "sim"})
    assert engine == EngineSpec(kind="sim")
    assert (engine.port, engine.rollout, engine.termination_grace_period_seconds, engine.slow_start_seconds) == (
        DEFAULT_ENGINE_PORT,
        Rollout(1, 0),
        DEFAULT_TERMINATION_GRACE_SECONDS,
        DEFAULT_SLOW_START_SECONDS,
    )


def test_empty_strings_are_unset_and_probes_keep_only_the_kinds_given() -> None:
    engine = parse_engine({**SIM, "image": "", "probes": {"readiness": {}, "liveness": {"periodSeconds": 3}}})
    assert engine.image is None
    assert engine.probes == {"liveness": {"periodSeconds": 3}}


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        ({}, r"spec.engine.kind is required \(one of vllm, sglang, sim, custom\)"),
        ({"kind": "tgi"}, "spec.engine.kind 'tgi' is not one of vllm, sglang, sim, custom"),
        ({"kind": "sim", "port": 0}, "between 1 and 65535"),
        ({"kind": "sim", "port": 65536}, "between 1 and 65535"),
        ({"kind": "sim", "port": "80"}, "spec.engine.port must be an integer"),
        ({"kind": "sim", "args": "--x"}, "list of strings"),
        ({"kind": "sim", "sharedMemorySize": True}, "quantity"),
        ({"kind": "sim", "nodeSelector": {"a": 1}}, "map names to strings"),
        ({"kind": "sim", "slowStartSeconds": -1}, "spec.engine.slowStartSeconds must not be negative"),
        ({"kind": "sim", "terminationGracePeriodSeconds": -5}, "terminationGracePeriodSeconds must not be negative"),
        ({"kind": "sim", "env": [{"value": "x"}]}, r"spec.engine.env\[0\].name must be a non-empty string"),
        (
            {"kind": "sim", "volumes": [{"name": "v"}, {"name": ""}]},
            r"spec.engine.volumes\[1\].name must be a non-empty",
        ),
        ({"kind": "sim", "volumeMounts": [{"name": 3}]}, r"spec.engine.volumeMounts\[0\].name must be a non-empty"),
        ({"kind": "sim", "probes": "fast"}, "spec.engine.probes must be an object"),
    ],
)
def test_engine_errors(engine, message) -> None:
    with pytest.raises(SpecError, match=message):
        parse_engine(engine)


@pytest.mark.parametrize(
    ("rollout", "message"),
    [
        ({"maxSurge": 0, "maxUnavailable": 0}, "cannot both be 0"),
        ({"maxSurge": "0%", "maxUnavailable": 0}, "cannot both be 0"),
        ({"maxSurge": "000%", "maxUnavailable": 0}, "cannot both be 0"),
        ({"maxSurge": -1}, "must not be negative"),
        ({"maxUnavailable": "half"}, "a count or a percentage"),
    ],
)
def test_a_rollout_that_could_never_proceed_is_a_spec_error(rollout, message) -> None:
    with pytest.raises(SpecError, match=message):
        parse_engine({**SIM, "rollout": rollout})


@pytest.mark.parametrize(
    ("rollout", "expected"),
    [
        ({}, Rollout(1, 0)),
        ({"maxSurge": 0, "maxUnavailable": 1}, Rollout(0, 1)),  # in place, for a pool with no spare GPU
        ({"maxSurge": "25%"}, Rollout("25%", 0)),
        ({"maxSurge": "00%", "maxUnavailable": "10%"}, Rollout("00%", "10%")),
    ],
)
def test_a_rollout_is_a_count_or_a_percentage(rollout, expected) -> None:
    assert parse_engine({**SIM, "rollout": rollout}).rollout == expected


def test_a_refusal_names_the_rollout_field() -> None:
    with pytest.raises(SpecError, match=r"^spec.engine.rollout.maxUnavailable must be a count or a percentage"):
        parse_engine({**SIM, "rollout": {"maxUnavailable": "1.5%"}})
    with pytest.raises(SpecError, match=r"^spec.engine.rollout: maxSurge and maxUnavailable cannot both be 0"):
        parse_engine({**SIM, "rollout": {"maxSurge": "0%", "maxUnavailable": "0%"}})
