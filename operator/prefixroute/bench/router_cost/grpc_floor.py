"""The floor under any Python picker: the same ext_proc answers as ours, with no routing behind them.

`router-bench --grpc-floor` runs this behind the same Envoy as our picker ('envoy+grpc-floor'):
the same grpc.aio server on the same event loop (uvloop), the same messages (`epp.protocol`'s
builders), the members taken in turn. Its CPU per request is what the transport costs before
any routing, tokenizing or accounting, so "our picker over GIE's" splits into "the floor over
GIE's" (the transport's share) and "ours over the floor" (our code's).

Handles what the bench's gateway sends for a non-streamed or streamed completion in our
bootstrap's default mode (request body BUFFERED): request headers, the buffered body (the
choice), response headers (a whole answer's body skipped), and response body chunks of an
event stream. Not a picker to deploy: no health, no membership, no errors.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import AsyncIterator, Iterator

import grpc
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc

from prefixroute.epp import protocol
from prefixroute.front.runtime import new_event_loop

BUFFERED = processing_mode_pb2.ProcessingMode.BUFFERED


def answer(message: protocol.ProcessingRequest, members: Iterator[str]) -> protocol.ProcessingResponse:
    """The one reply to one message, as our picker gives it when the gate is open."""
    kind = message.WhichOneof("request")
    if kind == "request_headers":
        if message.request_headers.end_of_stream:  # no body: chosen on the headers
            return protocol.picked_on_headers(next(members))
        return protocol.continue_headers(request=True)
    if kind == "request_body":
        return protocol.picked_on_body(next(members), None)
    if kind == "response_headers":
        reply = protocol.continue_headers(request=False)
        _, streaming = protocol.response_head(message.response_headers.headers)
        if not streaming and not message.response_headers.end_of_stream:
            protocol.skip_response_body(reply, BUFFERED)
        return reply
    if kind == "request_trailers":
        return protocol.continue_trailers(request=True)
    if kind == "response_trailers":
        return protocol.continue_trailers(request=False)
    return protocol.continue_body(request=False)


class FloorProcessor(external_processor_pb2_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, members: list[str]) -> None:
        self.members = itertools.cycle([protocol.endpoint_of(m) for m in members])

    async def Process(  # the gRPC method's name
        self, requests: AsyncIterator[protocol.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[protocol.ProcessingResponse]:
        async for message in requests:
            yield answer(message, self.members)


async def serve(port: int, members: list[str]) -> None:
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", 64 * 1024 * 1024)])
    external_processor_pb2_grpc.add_ExternalProcessorServicer_to_server(FloorProcessor(members), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    await server.wait_for_termination()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m prefixroute.bench.router_cost.grpc_floor")
    parser.add_argument("port", type=int)
    parser.add_argument("members", help="comma-separated base URLs, taken in turn")
    args = parser.parse_args(argv)
    loop = new_event_loop()
    try:
        loop.run_until_complete(serve(args.port, args.members.split(",")))
    finally:
        loop.close()


if __name__ == "__main__":
    main(sys.argv[1:])
