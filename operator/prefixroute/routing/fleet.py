"""The members a router may send to, and the ring built over them.

A `Fleet` is immutable and built once per membership change (from `--backends`,
a ring file or the PrefixRoutedModel status), never per request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prefixroute.routing.ring import DEFAULT_VIRTUAL_NODES, HashRing


@dataclass(frozen=True)
class Member:
    """One engine replica. `name` is stable (the pod name); `url` is its base URL."""

    name: str
    url: str
    weight: float = 1.0
    ready: bool = True

    @property
    def endpoint(self) -> str:
        """`ip:port`, as a gateway dials it (an EPP's answer, a gateway's subset hint)."""
        return endpoint_of(self.url)


def endpoint_of(url: str) -> str:
    """`ip:port` of a base URL (the scheme's port when none is given)."""
    scheme, _, rest = url.rpartition("://")
    hostport = rest.split("/", 1)[0]
    if hostport.endswith("]") or ":" not in hostport:
        return f"{hostport}:{443 if scheme == 'https' else 80}"
    return hostport


@dataclass(frozen=True)
class Fleet:
    members: tuple[Member, ...]
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES
    version: str = ""
    ring: HashRing = field(init=False, compare=False, repr=False)
    by_name: Mapping[str, Member] = field(init=False, compare=False, repr=False)
    # Computed once per fleet, never per request: a decision must not pay for the fleet's size.
    routable: tuple[Member, ...] = field(init=False, compare=False, repr=False)
    weight_sum: float = field(init=False, compare=False, repr=False)  # of routable members

    def __post_init__(self) -> None:
        names = [m.name for m in self.members]
        if len(set(names)) != len(names):
            raise ValueError("fleet member names must be unique")
        # Routable: members that may receive new requests, ready and with a positive weight.
        routable = tuple(m for m in self.members if m.ready and m.weight > 0)
        object.__setattr__(self, "routable", routable)
        object.__setattr__(self, "weight_sum", sum(m.weight for m in routable))
        object.__setattr__(self, "ring", HashRing({m.name: m.weight for m in routable}, self.virtual_nodes))
        object.__setattr__(self, "by_name", {m.name: m for m in self.members})

    @classmethod
    def from_urls(cls, urls: Iterable[str], virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> Fleet:
        """A fleet from plain backend URLs; each URL is its own member name."""
        members = tuple(Member(name=u.rstrip("/"), url=u.rstrip("/")) for u in urls if u.strip())
        return cls(members, virtual_nodes)


def member_from_ring_entry(entry: Mapping[str, Any], scheme: str = "http") -> Member:
    """A member from one entry of a ring document (the PrefixRoutedModel's status.ring.members,
    or a ring file): `{pod, address, weight, ready}`, where address is host:port or a URL."""
    if not isinstance(entry, Mapping):
        raise ValueError("ring member must be an object")
    address = entry.get("address") or entry.get("url")
    if not isinstance(address, str) or not address:
        raise ValueError("ring member needs an 'address' (host:port or URL)")
    url = address if "://" in address else f"{scheme}://{address}"
    name = entry.get("pod") or entry.get("name") or url
    weight = entry.get("weight", 1.0)
    if not isinstance(weight, (int, float)) or isinstance(weight, bool) or weight < 0:
        raise ValueError(f"ring member {name!r} has an invalid weight {weight!r}")
    ready = entry.get("ready", True)
    if not isinstance(ready, bool):
        raise ValueError(f"ring member {name!r} has a non-boolean 'ready'")
    return Member(name=str(name), url=url.rstrip("/"), weight=float(weight), ready=ready)


def fleet_from_ring_document(doc: Mapping[str, Any], virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> Fleet:
    """A fleet from a ring document `{version, members: [...]}` (status.ring or a ring file)."""
    if not isinstance(doc, Mapping):
        raise ValueError("ring document must be an object")
    entries = doc.get("members", [])
    if not isinstance(entries, list):
        raise ValueError("ring document 'members' must be a list")
    members = tuple(member_from_ring_entry(e) for e in entries)
    return Fleet(members, virtual_nodes, version=str(doc.get("version", "")))
