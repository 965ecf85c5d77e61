"""The EPP's own settings (the shared ones: tests/front/test_settings.py): its ports, and the
InferencePool only it can follow."""

from __future__ import annotations

import pytest

from prefixroute.epp.settings import DEFAULT_HEALTH_PORT, DEFAULT_METRICS_PORT, DEFAULT_PORT, EppSettings


def test_the_ports_default_to_gies() -> None:
    settings = EppSettings(backends=("http://a",))
    assert (settings.port, settings.health_port, settings.metrics_port) == (9002, 9003, 9090)
    assert (DEFAULT_PORT, DEFAULT_HEALTH_PORT, DEFAULT_METRICS_PORT) == (9002, 9003, 9090)


@pytest.mark.parametrize(
    "ports",
    [{"port": 9002, "metrics_port": 9002}, {"port": 9003}, {"health_port": 9090}, {"port": 1, "health_port": 1}],
)
def test_two_servers_on_one_port_are_refused(ports: dict[str, int]) -> None:
    with pytest.raises(ValueError, match="--port, --health-port and --metrics-port must differ"):
        EppSettings(backends=("http://a",), **ports)  # type: ignore[arg-type]


def test_port_zero_means_any_free_port_and_may_repeat() -> None:
    settings = EppSettings(backends=("http://a",), port=0, health_port=0, metrics_port=0)
    assert (settings.port, settings.health_port, settings.metrics_port) == (0, 0, 0)


def test_an_inference_pool_is_the_epps_source() -> None:
    assert EppSettings(inference_pool="ns/pool").inference_pool == "ns/pool"
    with pytest.raises(ValueError, match="--inference-pool must be NAMESPACE/NAME"):
        EppSettings(inference_pool="pool")
    with pytest.raises(ValueError, match=r"exactly one of .* \(or --inference-pool\)"):
        EppSettings(inference_pool="ns/pool", backends=("http://a",))
