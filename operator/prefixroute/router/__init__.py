"""The data plane: an OpenAI-compatible HTTP proxy that routes each request with the routing core.

Layout (one idea per module): `settings` (what the flags mean), `errors` (every failure
as an OpenAI-shaped error), `body` (reading and checking a request body once), `tenant`
(who is asking, hashed), `health` (passive ejection), `metrics`, `state` (the fleet, the
strategy and the load view, changed together), `proxy` (forwarding, retries, relaying),
`scrape` (engines' /metrics into the load view), `membership/` (where the fleet comes
from), `app` (routes and lifecycle), `cli`.
"""
