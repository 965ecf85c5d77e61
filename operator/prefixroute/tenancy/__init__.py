"""Who may call, how much, and in what order when the engines are full — pure decisions.

`keys`: the API-key file (SHA-256 digests, never keys) and the lookup of a presented key.
`limits`: per-tenant concurrency and prompt units per minute, and a slowdown for
repeated bad keys. `admission`: while every engine is full, requests wait at the front
and are admitted tenant by tenant, fairly. Fronts (the router) and the simulator use
these same classes with their own clock, so a simulated fairness figure is a result of
the code the router runs.
"""
