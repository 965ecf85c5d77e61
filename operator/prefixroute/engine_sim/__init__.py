"""engine-sim: a vLLM-compatible engine with a real prefix cache and a latency model.

It lets anyone run the whole system, and measure routing, without GPUs. The
pure parts (tokenizer, KV cache, latency model, scheduler) import no HTTP or
Prometheus code, so the bench's discrete-event simulation runs exactly the same
classes in virtual time; `server`, `driver` and `metrics` put them on the wire.
"""
