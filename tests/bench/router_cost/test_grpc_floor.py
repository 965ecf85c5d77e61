"""The gRPC floor gives our picker's answers, message for message, with nothing behind them: a
floor that answered less (no destination, no skipped body) would cost less than ours for
reasons that are not the transport's."""

from __future__ import annotations

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ext_proc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from prefixroute.bench.router_cost.grpc_floor import FloorProcessor, answer
from prefixroute.epp.exchange import Exchange, replies_for
from prefixroute.epp.protocol import ProcessingRequest
from tests.epp.helpers import BUFFERED, MODES, body, destination, headers, post, response_body, response_headers
from tests.epp.test_exchange import completion, picker

MEMBERS = ["http://10.0.0.1:8000", "http://10.0.0.2:8000"]


def _shape(reply: ext_proc.ProcessingResponse) -> tuple[str | None, bool, bool, int]:
    """What a reply does to the gateway: its kind, whether it names a destination, whether it
    overrides the mode, and the response body mode it asks for."""
    kind = reply.WhichOneof("response")
    named = kind in ("request_headers", "request_body") and destination(reply)[0] is not None
    return kind, named, reply.HasField("mode_override"), reply.mode_override.response_body_mode


def _buffered(status_type: str = "") -> list[ProcessingRequest]:
    messages = [headers(post(), mode=BUFFERED), body(completion()), response_headers(200, content_type=status_type)]
    if status_type == "text/event-stream":
        messages += [response_body(b"data: {}\n\n"), response_body(b"data: [DONE]\n\n", end=True)]
    return messages


@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream"])
def test_the_floor_answers_each_message_as_our_picker_does(content_type: str) -> None:
    messages = _buffered(content_type)
    ours = replies_for(Exchange(picker(("a", "b"))), messages)
    floor = [answer(m, iter(["10.0.0.1:8000"] * 2)) for m in messages]
    assert [_shape(r) for r in floor] == [_shape(r) for r in ours]
    assert any(named for _, named, _, _ in map(_shape, floor))  # the choice is carried, as ours carries it


def test_a_request_without_a_body_is_chosen_on_its_headers() -> None:
    reply = answer(headers({":method": "GET", ":path": "/v1/models"}, end=True, mode=BUFFERED), iter(["m:1"]))
    assert destination(reply) == ("m:1", "m:1")


async def test_the_floor_serves_ext_proc_over_grpc_taking_members_in_turn() -> None:
    server = grpc.aio.server()
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(FloorProcessor(MEMBERS), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = external_processor_pb2_grpc.ExternalProcessorStub(channel)
            chosen = []
            for _ in range(3):
                call = stub.Process()
                replies = []
                for message in _buffered("application/json"):
                    await call.write(message)
                    replies.append(await call.read())
                await call.done_writing()
                chosen.append(destination(replies[1])[0])
                assert _shape(replies[2]) == ("response_headers", False, True, MODES.NONE)  # the answer's body skipped
        assert chosen == ["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.1:8000"]
    finally:
        await server.stop(0)
