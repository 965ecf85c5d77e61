"""Which certificates the operator trusts for a model's https Prometheus.

spec.autoscaling.prometheusTLS may name a CA bundle — a key of a Secret or a ConfigMap in
the model's namespace — or ask for no verification at all; without it an https certificate
is checked against the public CAs. This turns that into requests' ``verify``:

- the object is read through the edge (``get`` only: the operator's RBAC grants no list or
  watch on Secrets and ConfigMaps), at most once a minute per object and key, so a rotated
  CA is in force within a minute and a tick costs no API call;
- only the PEM certificates under the key are kept (a Secret of type kubernetes.io/tls
  also holds a private key, which is never written anywhere); they must load into
  OpenSSL, the way the client will load them, and are written to a file named by their
  digest in a folder of the operator's own (the pod's /tmp), whose path is the ``verify``;
- anything wrong becomes ``MetricsUnavailable`` with a reason of its own, so the autoscaler
  holds and says why (MetricsAvailable=False, one Warning Event per new reason). A failure is
  not cached, so a Secret created a moment later is found at the next tick; nothing here ever
  falls back to skipping verification.

Messages name objects and keys, never what they hold.
"""

from __future__ import annotations

import hashlib
import os
import re
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from prefixroute.autoscaling.prometheus_signals import CA_INVALID, CA_UNAVAILABLE, MetricsUnavailable, Verify
from prefixroute.autoscaling.settings import CAReference, PrometheusTLS
from prefixroute.controller.errors import ApplyError

CACHE_SECONDS = 60.0
_CERTIFICATE = re.compile(rb"-----BEGIN CERTIFICATE-----\r?\n.*?-----END CERTIFICATE-----", re.S)
_SOURCE_LINE = re.compile(r" \(_ssl\.c:\d+\)$")


class DataReader(Protocol):
    def __call__(self, kind: str, namespace: str, name: str) -> Mapping[str, bytes] | None:
        """The data of a Secret or ConfigMap by key (values decoded to bytes); None when the
        object does not exist. Raises ApplyError (e.g. 403: the operator may not read it)."""
        ...


class PrometheusTrust:
    """``TrustFn`` for ``PrometheusReader``; called from the ticks' worker threads at once."""

    def __init__(
        self,
        read: DataReader,
        folder: Path | None = None,
        cache_seconds: float = CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._folder = folder
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._bundles: dict[tuple[str, CAReference], tuple[float, str]] = {}  # -> (read at, file)

    def __call__(self, namespace: str, tls: PrometheusTLS | None) -> Verify:
        if tls is None or (tls.ca is None and not tls.insecure_skip_verify):
            return True
        if tls.insecure_skip_verify:
            return False
        assert tls.ca is not None
        key = (namespace, tls.ca)
        now = self._clock()
        with self._lock:
            cached = self._bundles.get(key)
        if cached is not None and now - cached[0] < self._cache_seconds:
            return cached[1]
        where = f"key {tls.ca.key} of {tls.ca.kind} {namespace}/{tls.ca.name}"
        path = self._write(_certificates(self._data(namespace, tls.ca), where))
        with self._lock:
            self._bundles[key] = (now, path)
        return path

    def _data(self, namespace: str, ca: CAReference) -> bytes:
        where = f"{ca.kind} {namespace}/{ca.name}"
        try:
            data = self._read(ca.kind, namespace, ca.name)
        except ApplyError as exc:
            raise MetricsUnavailable(f"cannot read the Prometheus CA: {exc}", CA_UNAVAILABLE) from exc
        if data is None:
            raise MetricsUnavailable(
                f"the Prometheus CA's {where} (spec.autoscaling.prometheusTLS.ca) does not exist", CA_UNAVAILABLE
            )
        if ca.key not in data:
            keys = ", ".join(sorted(data)) or "none"
            raise MetricsUnavailable(
                f"the Prometheus CA's {where} has no key {ca.key} (its keys: {keys})"[:300], CA_UNAVAILABLE
            )
        return data[ca.key]

    def _write(self, bundle: bytes) -> str:
        """The bundle's file, written once: named by its digest, so equal bundles share it."""
        with self._lock:
            if self._folder is None:
                self._folder = Path(tempfile.mkdtemp(prefix="prefixroute-prometheus-ca-"))
            path = self._folder / f"{hashlib.sha256(bundle).hexdigest()[:32]}.pem"
            if not path.exists():
                partial = path.with_suffix(".partial")
                partial.write_bytes(bundle)
                os.replace(partial, path)  # a concurrent reader never sees half a bundle
        return str(path)


def _certificates(value: bytes, where: str) -> bytes:
    """The PEM certificates in ``value``, each checked the way the client will load them."""
    found = _CERTIFICATE.findall(value)
    if not found:
        raise MetricsUnavailable(
            f"the Prometheus CA's {where} holds no PEM certificate (-----BEGIN CERTIFICATE-----)", CA_INVALID
        )
    for number, block in enumerate(found, 1):
        try:
            der = ssl.PEM_cert_to_DER_cert(block.decode("ascii"))
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=der)
        except (ssl.SSLError, UnicodeDecodeError, ValueError) as exc:
            detail = _SOURCE_LINE.sub("", str(exc)) or type(exc).__name__
            raise MetricsUnavailable(
                f"the Prometheus CA's {where}: certificate {number} of {len(found)} does not load ({detail})"[:300],
                CA_INVALID,
            ) from exc
    return b"\n".join(found) + b"\n"


__all__ = ["CACHE_SECONDS", "DataReader", "PrometheusTrust"]
