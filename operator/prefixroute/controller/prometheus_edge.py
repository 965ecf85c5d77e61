"""The operator's Prometheus client: instant queries over prometheus-api-client (the edge).

Every failure of the client becomes `MetricsUnavailable` here, with a short, stable
message, so the pure reader (`autoscaling.prometheus_signals`) and the tick never see
a library's exception.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from prefixroute.autoscaling.prometheus_signals import UNREACHABLE, MetricsUnavailable, QueryFn

_ADDRESS = re.compile(r" (object )?at 0x[0-9a-fA-F]+")
_URL = re.compile(r" with url: \S+")
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")]+")


def _describe(exc: BaseException) -> str:
    """An exception as one short, stable line. requests' messages embed object addresses
    (which would make every tick's message, and status, differ) and the whole query URL;
    a refused or unresolvable connection is told by its errno text alone."""
    text = _URL.sub("", _ADDRESS.sub("", str(exc)))
    errno = _ERRNO.search(text)
    return f"{type(exc).__name__}: {errno.group(0).strip() if errno else text}"[:300]


def prometheus_query(url: str, timeout_seconds: float = 5.0) -> QueryFn:
    """An instant-query function over prometheus-api-client, mapping its errors.

    A client-side timeout and a single retry: a Prometheus that hangs or refuses must
    fail a tick quickly (the replica count is held), not stall it for the client's
    default three retries with back-off."""
    from prometheus_api_client import PrometheusConnect  # imported here: only the operator needs it
    from urllib3.util.retry import Retry

    client = PrometheusConnect(
        url=url,
        disable_ssl=True,
        timeout=timeout_seconds,
        retry=Retry(total=1, backoff_factor=0.2, status_forcelist=(502, 503, 504)),
    )

    def run(query: str) -> Sequence[Mapping[str, Any]]:
        try:
            result: Sequence[Mapping[str, Any]] = client.custom_query(
                query, params={"timeout": f"{timeout_seconds:g}s"}
            )
        except Exception as exc:  # requests' and the client's errors alike: the edge maps them all
            raise MetricsUnavailable(f"Prometheus at {url} failed: {_describe(exc)}", UNREACHABLE) from exc
        return result

    return run
