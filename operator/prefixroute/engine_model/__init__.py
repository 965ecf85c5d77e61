"""The engine model: what an LLM engine does with a request, in model time, with no I/O.

A block-level LRU prefix cache (`kv_cache`), a continuous-batching scheduler
(`scheduler`) with a latency model (`latency`), and the engine's reading of a request
body into token prompts (`prompt`, `tokenizer`, `chat_template`). engine-sim serves it
over HTTP in real time; the bench simulators run it in virtual time.
"""
