"""spec.auth: API keys at the router, from a Secret the operator mounts but never reads.

The router takes `--api-keys FILE` (the key file: SHA-256 digests and tenants, never keys)
and `--trusted-fronts`; the operator mounts the named Secret as a volume into the router
pods — a whole volume, never a subPath, so the kubelet's updates of the Secret reach the
running routers, which reload the file when it changes. Whether the Secret exists the
operator learns from the kubelet's FailedMount events (controller/auth_status.py), never
from the Secret.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from typing import Any

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.fields import Fields

DEFAULT_KEY = "keys.yaml"
_SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


@dataclass(frozen=True)
class AuthSpec:
    api_keys_secret: str | None = None  # the Secret's name; None: API keys off
    api_keys_key: str = DEFAULT_KEY  # its key holding the key file
    trusted_fronts: tuple[str, ...] = ()  # addresses or CIDR networks, as written

    @property
    def keys_on(self) -> bool:
        return self.api_keys_secret is not None


def parse_auth(data: Any) -> AuthSpec:
    """The CRD's schema and CEL rules check the same; a value that slipped past (an old CRD,
    a hand-made object) becomes a SpecError naming the field."""
    f = Fields(data, "spec.auth")
    secret = f.child("apiKeysSecret") if f.data.get("apiKeysSecret") is not None else None
    name = key = None
    if secret is not None:
        name = secret.text_or_none("name")
        if name is None or len(name) > 253 or not _SECRET_NAME.fullmatch(name):
            raise SpecError(f"{secret.where('name')} must name a Secret (a DNS subdomain)")
        key = secret.text("key", DEFAULT_KEY)
        if len(key) > 253 or not _SECRET_KEY.fullmatch(key):
            raise SpecError(f"{secret.where('key')} must be a Secret key: letters, digits, '-', '_' or '.'")
    fronts = f.strings("trustedFronts")
    for i, front in enumerate(fronts):
        try:
            ipaddress.ip_network(front, strict=False)
        except ValueError:
            raise SpecError(
                f"{f.where('trustedFronts')}[{i}] {front!r} must be an IP address or a CIDR network such as 10.0.0.0/8"
            ) from None
    if fronts and name is None:
        raise SpecError(
            "spec.auth.trustedFronts needs spec.auth.apiKeysSecret: without API keys every tenant header counts"
        )
    return AuthSpec(api_keys_secret=name, api_keys_key=key or DEFAULT_KEY, trusted_fronts=fronts)
