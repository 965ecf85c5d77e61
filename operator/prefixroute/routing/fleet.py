"""The members a router may send to, and the ring built over them.

A `Fleet` is immutable and built once per membership change (from `--backends`,
a ring file or the PrefixRoutedModel status), never per request.

A member may list the LoRA adapters registered on its engine (the ring document's
`adapters`); a request for adapter A may go only to members that list A or list
nothing (unknown: a fleet without adapter information serves any adapter, and the
engine answers 404 for one it lacks). `Fleet.serving(A)` is that part of the fleet,
built once per adapter and membership change, so a decision over it costs what a
decision over the whole fleet does.
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
    # The LoRA adapters registered on its engine, as the operator confirmed them; None:
    # unknown (it is taken to serve any adapter).
    adapters: frozenset[str] | None = None

    def serves(self, adapter: str | None) -> bool:
        """Whether a request for `adapter` (None: the base model) may go here."""
        return adapter is None or self.adapters is None or adapter in self.adapters

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
    # Every adapter some member lists: a request's `model` naming one of them is an adapter.
    adapter_names: frozenset[str] = field(init=False, compare=False, repr=False)
    _serving: dict[str | None, Fleet] = field(init=False, compare=False, repr=False)

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
        named = frozenset().union(*(m.adapters for m in self.members if m.adapters is not None))
        object.__setattr__(self, "adapter_names", named)
        object.__setattr__(self, "_serving", {})

    def serving(self, adapter: str | None) -> Fleet:
        """The members that may take a request for `adapter` (this fleet itself when all may).

        Built on first use and kept for this fleet's life: one per adapter the members list,
        plus one shared by every name none lists (the members that list nothing), so a
        client naming many unknown adapters costs no memory."""
        if adapter is None or not self.adapter_names:
            return self
        slot = adapter if adapter in self.adapter_names else None
        part = self._serving.get(slot)
        if part is None:
            members = tuple(m for m in self.members if m.adapters is None or (slot is not None and slot in m.adapters))
            part = self if len(members) == len(self.members) else Fleet(members, self.virtual_nodes, self.version)
            self._serving[slot] = part
        return part

    @classmethod
    def from_urls(cls, urls: Iterable[str], virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> Fleet:
        """A fleet from plain backend URLs; each URL is its own member name."""
        members = tuple(Member(name=u.rstrip("/"), url=u.rstrip("/")) for u in urls if u.strip())
        return cls(members, virtual_nodes)


def member_from_ring_entry(entry: Mapping[str, Any], scheme: str = "http") -> Member:
    """A member from one entry of a ring document (the PrefixRoutedModel's status.ring.members,
    or a ring file): `{pod, address, weight, ready, adapters}`, where address is host:port or a
    URL and adapters (optional) the LoRA adapters registered on it."""
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
    adapters = entry.get("adapters")
    if adapters is not None and (not isinstance(adapters, list) or not all(isinstance(a, str) for a in adapters)):
        raise ValueError(f"ring member {name!r} has 'adapters' that are not a list of names")
    listed = frozenset(adapters) if adapters is not None else None
    return Member(name=str(name), url=url.rstrip("/"), weight=float(weight), ready=ready, adapters=listed)


def fleet_from_ring_document(doc: Mapping[str, Any], virtual_nodes: int = DEFAULT_VIRTUAL_NODES) -> Fleet:
    """A fleet from a ring document `{version, members: [...]}` (status.ring or a ring file)."""
    if not isinstance(doc, Mapping):
        raise ValueError("ring document must be an object")
    entries = doc.get("members", [])
    if not isinstance(entries, list):
        raise ValueError("ring document 'members' must be a list")
    members = tuple(member_from_ring_entry(e) for e in entries)
    return Fleet(members, virtual_nodes, version=str(doc.get("version", "")))
