"""What the router's flags mean, gathered in one immutable value: the settings both fronts
share (`front.settings.FrontSettings`) and the router's own — its port, retries, holding,
and the upstream client's pool and timeouts.

The CLI builds it from argv and tests build it directly, so the server never
reads argparse namespaces or the environment itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from prefixroute.front.settings import FrontSettings, check_knobs
from prefixroute.routing.knobs import HOLD_SECONDS, MAX_HELD_REQUESTS, RETRIES

UPSTREAM_CLIENTS = ("native", "aiohttp")


@dataclass(frozen=True)
class RouterSettings(FrontSettings):
    port: int = 8080
    retries: int = RETRIES.default  # extra attempts on other members before the first byte
    hold_seconds: float = HOLD_SECONDS.default  # how long a request waits for a member when none is routable
    max_held_requests: int = MAX_HELD_REQUESTS.default
    connect_timeout: float = 3.0
    # Longest silence tolerated from an engine: before its response head (a non-streamed
    # completion is silent until it is done) and between chunks of a stream.
    read_timeout: float = 600.0
    max_connections: int = 4096  # upstream pool size, all members together
    # Shorter than the engines' own keep-alive (uvicorn, under vLLM, closes idle
    # connections after 5 s), so the router never reuses a socket the engine is closing.
    upstream_keepalive: float = 4.0
    member_header: bool = True  # add X-Prefixroute-Member to responses
    # "native" (native_client: httptools-parsed keep-alive HTTP/1.1, the same behaviour and
    # errors at much less CPU per request; see docs/router.md) or "aiohttp" (ClientSession),
    # kept as a fallback
    upstream_client: str = "native"

    def __post_init__(self) -> None:
        if self.inference_pool is not None:
            raise ValueError("the router follows --backends, --ring-file or --resource (an InferencePool is the EPP's)")
        super().__post_init__()
        check_knobs(self, (RETRIES, HOLD_SECONDS, MAX_HELD_REQUESTS))  # type: ignore[arg-type]
        for name in ("connect_timeout", "read_timeout"):
            if not getattr(self, name) > 0:
                raise ValueError(f"--{name.replace('_', '-')} must be positive")
        if self.upstream_client not in UPSTREAM_CLIENTS:
            raise ValueError(f"--upstream-client must be one of {', '.join(UPSTREAM_CLIENTS)}")
        if self.max_connections <= 0:
            raise ValueError("--max-connections must be positive")
