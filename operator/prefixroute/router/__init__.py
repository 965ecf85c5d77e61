"""The data plane: an OpenAI-compatible HTTP proxy that routes each request with the routing core.

Layout (one idea per module): `settings` (what the flags mean), `errors` (every failure
as an OpenAI-shaped error), `body` (reading and checking a request body once), `tenant`
(who is asking, hashed), `headers` (what crosses the proxy), `health` (passive
ejection), `metrics`, `state` (the fleet, the strategy and the load view, changed
together), `proxy` (forwarding, retries, relaying), `sse` (relaying on event
boundaries), `upstream` (the answer shape the proxy needs), `native_client` (the default
upstream client, httptools-parsed), `scrape` (engines' /metrics into the load view), `membership/`
(where the fleet comes from), `app` (routes and lifecycle), and `cli`; `prefixroute router-bench`
lives in `prefixroute.bench.router_cost`. docs/router.md explains it for operators.
"""
