"""The wire format of router replicas' reports to each other (`routing.peers`).

A report is one message, a msgpack array (packing and unpacking are the edge's:
`front.peers`):

    [1, sender, seq, at, fingerprint, [member, ...],
     [[member index, requests, prompt units, prefill units], ...],
     [[member index, units, key, whole, blocks, number(, adapter)], ...],
     [number ended, ...], oldest number in flight]

Member names are listed once per report and referred to by index (a request's
record would otherwise repeat a URL). `blocks` is the request's block keys as
little-endian unsigned 64-bit integers, 8 bytes a block: what a 15k-token prompt
of 256-character blocks costs is about 2 KB, and it decodes without a Python loop.
A request for a LoRA adapter adds the adapter's name as a seventh item (the others'
residency belief learns from it: `routing.adapter_residency`); a base-model request
keeps six, so a report without adapters reads the same to a replica of before.
This module turns reports into those plain structures and back, and refuses
anything else with `PeerFormatError`.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Sequence
from typing import Any

from prefixroute.routing.peers import PeerReport, PeerRouted
from prefixroute.routing.request import RoutingRequest

VERSION = 1
_BIG_ENDIAN = sys.byteorder == "big"


class PeerFormatError(ValueError):
    """A message that is not a peer report this version can read."""


def keys_to_bytes(blocks: Sequence[int]) -> bytes:
    packed = array("Q", blocks)
    if _BIG_ENDIAN:
        packed.byteswap()
    return packed.tobytes()


def keys_from_bytes(raw: bytes) -> tuple[int, ...]:
    if len(raw) % 8:
        raise PeerFormatError(f"block keys take 8 bytes each, got {len(raw)} bytes")
    packed = array("Q")
    packed.frombytes(raw)
    if _BIG_ENDIAN:
        packed.byteswap()
    return tuple(packed)


def report_to_wire(report: PeerReport) -> list[Any]:
    index: dict[str, int] = {}
    for name, *_ in report.loads:
        index.setdefault(name, len(index))
    for item in report.routed:
        index.setdefault(item.member, len(index))
    loads = [[index[name], n, units, prefill] for name, n, units, prefill in report.loads]
    routed = [
        [index[r.member], r.request.units, r.request.key, r.request.whole, keys_to_bytes(r.request.blocks), r.id]
        + ([r.request.adapter] if r.request.adapter is not None else [])
        for r in report.routed
    ]
    return [
        VERSION, report.sender, report.seq, report.at, report.fingerprint, list(index), loads, routed,
        list(report.ended), report.oldest,
    ]  # fmt: skip


def _int(value: Any, what: str, bits: int = 63) -> int:
    if type(value) is not int or value < 0 or value >= 1 << bits:
        raise PeerFormatError(f"{what} must be an unsigned integer below 2**{bits}, got {value!r}")
    return value


def report_from_wire(raw: Any) -> PeerReport:
    """A report from what msgpack unpacked, or PeerFormatError."""
    if not isinstance(raw, list | tuple) or len(raw) != 10:
        raise PeerFormatError("a peer report is an array of 10 items")
    version, sender, seq, at, fingerprint, members, loads, routed, ended, oldest = raw
    if version != VERSION:
        raise PeerFormatError(f"peer report version {version!r}; this router reads {VERSION}")
    if not isinstance(sender, str) or not isinstance(fingerprint, str):
        raise PeerFormatError("sender and fingerprint must be strings")
    if type(at) not in (int, float):
        raise PeerFormatError("at must be a number")
    if not isinstance(members, list | tuple) or not all(isinstance(m, str) for m in members):
        raise PeerFormatError("members must be an array of strings")
    if not all(isinstance(x, list | tuple) for x in (loads, routed, ended)):
        raise PeerFormatError("loads, routed and ended must be arrays")

    def member(value: Any) -> str:
        i = _int(value, "a member index")
        if i >= len(members):
            raise PeerFormatError(f"member index {i} past the {len(members)} members listed")
        return str(members[i])

    load_items = []
    for item in loads:
        if not isinstance(item, list | tuple) or len(item) != 4:
            raise PeerFormatError("a load is [member, requests, units, prefill units]")
        load_items.append(
            (member(item[0]), _int(item[1], "requests"), _int(item[2], "units"), _int(item[3], "prefill"))
        )
    routed_items = []
    for item in routed:
        if not isinstance(item, list | tuple) or len(item) not in (6, 7) or not isinstance(item[4], bytes):
            raise PeerFormatError("a routed request is [member, units, key, whole, block key bytes, number, adapter?]")
        adapter = item[6] if len(item) == 7 else None
        if adapter is not None and (not isinstance(adapter, str) or not adapter):
            raise PeerFormatError("a routed request's adapter must be a name")
        request = RoutingRequest(
            keys_from_bytes(item[4]),
            _int(item[2], "key", 64),
            _int(item[1], "units"),
            None,
            _int(item[3], "whole", 64),
            adapter,
        )
        routed_items.append(PeerRouted(member(item[0]), request, _int(item[5], "a request's number")))
    ends = tuple(_int(n, "a request's number") for n in ended)
    return PeerReport(
        sender, _int(seq, "seq"), fingerprint, tuple(load_items), tuple(routed_items), float(at), ends,
        _int(oldest, "the oldest number"),
    )  # fmt: skip
