"""The operator's Prometheus client: instant queries over prometheus-api-client (the edge).

Every failure of the client becomes `MetricsUnavailable` here, with a short, stable
message, so the pure reader (`autoscaling.prometheus_signals`) and the tick never see
a library's exception. An https certificate is checked as ``verify`` says (requests'
meaning: the public CAs, a CA bundle file, or, only when a spec asks, not at all).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from prefixroute.autoscaling.prometheus_signals import TLS_FAILED, UNREACHABLE, MetricsUnavailable, QueryFn, Verify

_ADDRESS = re.compile(r" (object )?at 0x[0-9a-fA-F]+")
_URL = re.compile(r" with url: \S+")
_ERRNO = re.compile(r"\[Errno -?\d+\] [^'\")]+")
_SSL = re.compile(r"\[SSL(?:: \w+)?\] ([^'\"(]+)")  # OpenSSL's words, without the source line


def _describe(exc: BaseException) -> str:
    """An exception as one short, stable line. requests' messages embed object addresses
    (which would make every tick's message, and status, differ) and the whole query URL;
    a refused or unresolvable connection is told by its errno text alone, a failed TLS
    handshake by OpenSSL's reason alone."""
    text = _URL.sub("", _ADDRESS.sub("", str(exc)))
    found = _ERRNO.search(text) or _SSL.search(text)
    detail = found.group(found.lastindex or 0) if found else text
    return f"{type(exc).__name__}: {detail.strip()}"[:300]


def prometheus_query(url: str, timeout_seconds: float = 5.0, verify: Verify = True) -> QueryFn:
    """An instant-query function over prometheus-api-client, mapping its errors.

    A client-side timeout and a single retry: a Prometheus that hangs or refuses must
    fail a tick quickly (the replica count is held), not stall it for the client's
    default three retries with back-off."""
    import requests  # imported here: only the operator needs these
    from prometheus_api_client import PrometheusConnect
    from urllib3.exceptions import InsecureRequestWarning
    from urllib3.util import parse_url
    from urllib3.util.retry import Retry

    if verify is False:  # asked for by a spec and told in an Event when it takes effect, not at every request
        host = re.escape(parse_url(url).host or "")
        warnings.filterwarnings(
            "ignore", f"Unverified HTTPS request is being made to host '{host}'", InsecureRequestWarning
        )
    session = requests.Session()
    session.verify = verify  # the client's own switch (disable_ssl) knows only on and off
    client = PrometheusConnect(
        url=url,
        session=session,
        timeout=timeout_seconds,
        retry=Retry(total=1, backoff_factor=0.2, status_forcelist=(502, 503, 504)),
    )

    def run(query: str) -> Sequence[Mapping[str, Any]]:
        try:
            result: Sequence[Mapping[str, Any]] = client.custom_query(
                query, params={"timeout": f"{timeout_seconds:g}s"}
            )
        except requests.exceptions.SSLError as exc:
            raise MetricsUnavailable(
                f"Prometheus at {url} failed TLS: {_describe(exc)}"
                + ("" if verify is False else " (spec.autoscaling.prometheusTLS.ca names the CA to trust)"),
                TLS_FAILED,
            ) from exc
        except Exception as exc:  # requests' and the client's errors alike: the edge maps them all
            raise MetricsUnavailable(f"Prometheus at {url} failed: {_describe(exc)}", UNREACHABLE) from exc
        return result

    return run
