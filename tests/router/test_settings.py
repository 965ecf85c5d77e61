"""The router's own settings (the shared ones: tests/front/test_settings.py): its retries and
holding, the upstream client, its pool and timeouts; a refused value names its flag."""

from __future__ import annotations

import pytest

from prefixroute.router.settings import UPSTREAM_CLIENTS, RouterSettings
from prefixroute.routing.knobs import HOLD_SECONDS, MAX_HELD_REQUESTS, RETRIES


def router(**fields: object) -> RouterSettings:
    return RouterSettings(backends=("http://a",), **fields)  # type: ignore[arg-type]


def test_the_defaults() -> None:
    settings = router()
    assert (settings.port, settings.upstream_client, settings.member_header) == (8080, "native", True)
    assert (settings.retries, settings.hold_seconds, settings.max_held_requests) == (
        RETRIES.default,
        HOLD_SECONDS.default,
        MAX_HELD_REQUESTS.default,
    )
    assert settings.upstream_keepalive < 5.0  # below uvicorn's (vLLM's) idle close


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"connect_timeout": 0.0}, "^--connect-timeout must be positive"),
        ({"read_timeout": -1.0}, "^--read-timeout must be positive"),
        ({"upstream_client": "curl"}, "^--upstream-client must be one of native, aiohttp"),
        ({"max_connections": 0}, "^--max-connections must be positive"),
        ({"retries": -1}, "^--retries: "),
        ({"hold_seconds": -1.0}, "^--hold-seconds: "),
        ({"max_held_requests": 0}, "^--max-held-requests: "),
    ],
)
def test_the_routers_own_fields_are_refused_naming_the_flag(fields: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        router(**fields)


def test_every_upstream_client_is_accepted() -> None:
    assert [router(upstream_client=c).upstream_client for c in UPSTREAM_CLIENTS] == list(UPSTREAM_CLIENTS)


def test_an_inference_pool_is_the_epps_source_not_the_routers() -> None:
    with pytest.raises(ValueError, match="InferencePool is the EPP's"):
        RouterSettings(inference_pool="ns/pool")
