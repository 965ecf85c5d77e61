"""What front replicas' reports to each other cost (`routing.peers`, `front.peers`), in this process.

Every replica publishes its own load and the requests it routed, and applies every other
replica's: the sending cost grows with its own requests, the receiving cost with the whole
fleet's. `peer_cost` drives the fronts' own classes (publisher, wire format and msgpack as
`front.peers` packs them, view, dispatcher with prefix-cache) and reports CPU microseconds:

- per request routed, on the sender: noting it, and its share of building and packing a report;
- per request learned, on each receiver: its share of unpacking and reading a report, and
  recording its keys in the approximate index (a conversation's next turn: its history is
  mostly known already, a few blocks are new) and the affinity sample;
- per report, with no request in it (the load of `members` members only, as at a heartbeat or
  when requests end), on each side;
- the bytes a request adds to a report.

The ZMQ hop itself (a send on PUB, a receive on SUB) is not in these figures; the live bench's
`peer_report_lag_seconds` histogram measures it.
"""

from __future__ import annotations

import random
import time
from typing import Any

import msgpack  # type: ignore[import-untyped]

from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.dispatch import Dispatcher
from prefixroute.routing.fleet import Fleet, Member
from prefixroute.routing.peer_messages import report_from_wire, report_to_wire
from prefixroute.routing.peers import PeerPublisher, PeerView
from prefixroute.routing.request import RoutingRequest


def _dispatcher(members: int) -> Dispatcher:
    dispatcher = Dispatcher(RoutingConfig())
    dispatcher.set_fleet(Fleet(tuple(Member(f"engine-{i}", f"http://10.0.0.{i}:8000") for i in range(members))))
    return dispatcher


def _turns(conversations: int, turns: int, history: int, growth: int, seed: int = 0) -> list[RoutingRequest]:
    """Conversations' turns in arrival order: each turn is the last one's keys plus `growth` new ones."""
    rng = random.Random(seed)
    out = []
    keys = [[rng.getrandbits(64) for _ in range(history)] for _ in range(conversations)]
    for _ in range(turns):
        for own in keys:
            own.extend(rng.getrandbits(64) for _ in range(growth))
            out.append(RoutingRequest(tuple(own), own[0], len(own) * 256, None, rng.getrandbits(64)))
    return out


def peer_cost(
    members: int = 8, per_report: int = 4, history: int = 60, growth: int = 4, conversations: int = 200, turns: int = 6
) -> dict[str, Any]:
    """CPU microseconds per request sent and learned, per empty report, and bytes per request."""
    requests = _turns(conversations, turns, history, growth)
    sender, receiver = _dispatcher(members), _dispatcher(members)
    publisher = PeerPublisher("a", sender, "k")
    sender.listener = None  # the publisher's two calls per request are timed by hand below
    view = PeerView(receiver, "k", me="b")
    names = [m.name for m in sender.fleet.members]
    tickets = []
    payloads: list[bytes] = []
    send = 0.0
    for i, request in enumerate(requests):
        ticket = sender.route(request)
        tickets.append(ticket)
        started = time.process_time()
        publisher.routed(ticket)
        if (i + 1) % per_report == 0:
            payloads.append(msgpack.packb(report_to_wire(publisher.report(float(i))), use_bin_type=True))
        send += time.process_time() - started
        if len(tickets) > 2 * members:
            done = tickets.pop(0)
            done.finish(True)
            started = time.process_time()
            publisher.finished(done)
            send += time.process_time() - started
    learn = 0.0
    for payload in payloads:
        started = time.process_time()
        view.receive(report_from_wire(msgpack.unpackb(payload, raw=False)), 0.0)
        learn += time.process_time() - started
    sent = len(payloads) * per_report
    # Reports with load only: every member busy, no request in them.
    for i, name in enumerate(names):
        sender.load.begin(name, 1000 + i, 100)
    empty_send = empty_receive = 0.0
    rounds = 2000
    for i in range(rounds):
        sender.load.first_byte(names[i % members], 0)  # a change, so a report is owed
        started = time.process_time()
        payload = msgpack.packb(report_to_wire(publisher.report(1e6 + i)), use_bin_type=True)
        middle = time.process_time()
        view.receive(report_from_wire(msgpack.unpackb(payload, raw=False)), 1e6 + i)
        empty_receive += time.process_time() - middle
        empty_send += middle - started
    empty_bytes = len(payload)
    history_bytes = sum(len(p) for p in payloads) - len(payloads) * empty_bytes
    return {
        "members": members,
        "requests": sent,
        "blocks_per_request": history + growth * (turns + 1) / 2,
        "send_us_per_request": 1e6 * send / sent,
        "learn_us_per_request": 1e6 * learn / sent,
        "report_send_us": 1e6 * empty_send / rounds,
        "report_receive_us": 1e6 * empty_receive / rounds,
        "report_bytes": empty_bytes,
        "bytes_per_request": history_bytes / sent,
    }


def main() -> None:
    for members in (8, 64):
        figures = peer_cost(members=members)
        print(
            f"{members} members, {figures['blocks_per_request']:.0f} blocks a request: "
            f"send {figures['send_us_per_request']:.1f} us/request, learn {figures['learn_us_per_request']:.1f} "
            f"us/request per peer; a load-only report {figures['report_send_us']:.1f} us to send, "
            f"{figures['report_receive_us']:.1f} us to apply, {figures['report_bytes']} bytes; "
            f"{figures['bytes_per_request']:.0f} bytes a request"
        )


if __name__ == "__main__":
    main()
