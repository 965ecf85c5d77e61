"""The EPP: an Endpoint Picker for the Gateway API Inference Extension.

A conformant gateway (Envoy-based gateways, Istio, agentgateway, NGINX Gateway Fabric)
calls it over Envoy's ext_proc gRPC protocol for every request to an InferencePool and
sends the request to the `ip:port` it picks; the gateway carries the bytes, the EPP only
picks — through the request pipeline the router uses (`prefixroute.front.pipeline`: the
routing core, strategies, membership, tenants, bad-input rules, metrics and tracing).

Layout: `protocol` (the picker protocol's messages), `exchange` (one ext_proc stream: the
transport around the pipeline), `server` (grpc.aio), `health` (gRPC health, /metrics),
`metrics`, `settings`, `cli`, and `envoy` (a static Envoy bootstrap that makes Envoy a GIE
gateway, for tests, benchmarks and small installs). docs/gateway.md explains it.
"""
