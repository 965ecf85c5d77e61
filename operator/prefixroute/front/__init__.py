"""What the two fronts over the routing core share: the router (our HTTP proxy) and the EPP
(the Endpoint Picker a Gateway API Inference Extension gateway calls).

Neither front imports the other; both import this package, and both are transports around
its `pipeline` (one `Flight` per request, from arrival to finish). Beside it: `settings` and
`flags` (what both fronts' settings share, declared once), `membership/` (where the fleet
comes from), `gate` (the front door), `tenant` (who is asking, hashed), `body` (reading and
checking a request body once), `errors` (every failure as an OpenAI-shaped error),
`ejections` (passive health), `metrics` (the Prometheus metrics both export, under their own
prefix), `tracing` (a span per request) and `state` (the fleet, the dispatch and the load
view, changed together).
"""
