"""The bench: workloads, a discrete-event simulation over the routing core, live replays.

Workloads (`trace`, `synthetic`) become real OpenAI request bodies; `simulate`
feeds them to the real routing core and to engine-sim's own cache and latency
classes in virtual time; `replay` sends them over HTTP to a router and reads
the engines' metrics; `peers` runs other routers side by side. Nothing here
re-implements routing or the engine.
"""
