"""The EPP: an Endpoint Picker for the Gateway API Inference Extension.

A conformant gateway (Envoy-based gateways, Istio, agentgateway, NGINX Gateway Fabric)
calls it over Envoy's ext_proc gRPC protocol for every request to an InferencePool and
sends the request to the `ip:port` it picks; the gateway carries the bytes, the EPP only
picks — with the routing core, strategies, membership, tenants, bad-input rules and
metrics the router uses (`prefixroute.front`).

Layout: `protocol` (the picker protocol's messages), `picker` (one request's choice),
`exchange` (one ext_proc stream), `server` (grpc.aio), `health` (gRPC health, /metrics),
`metrics`, `settings`, `cli`, and `envoy` (a static Envoy bootstrap that makes Envoy a GIE
gateway, for tests, benchmarks and small installs). docs/gateway.md explains it.
"""
