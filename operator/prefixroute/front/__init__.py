"""What the two fronts over the routing core share: the router (our HTTP proxy) and the EPP
(the Endpoint Picker a Gateway API Inference Extension gateway calls).

Neither front imports the other; both import this package: `membership/` (where the fleet
comes from), `tenant` (who is asking, hashed), `body` (reading and checking a request body
once), `errors` (every failure as an OpenAI-shaped error), `ejections` (passive health),
`metrics` (the Prometheus metrics both export, under their own prefix) and `state` (the
fleet, the dispatch and the load view, changed together).
"""
