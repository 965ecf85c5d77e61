"""Turning fuzzer bytes into structured inputs: JSON values, request bodies, header values.

A fuzzer mutates bytes; the code under test wants JSON objects with the right field names.
`Reader` consumes the bytes the way atheris' FuzzedDataProvider does (but in plain Python,
so the same targets run under atheris, under the random driver and in regression tests),
and `json_value` builds a JSON value whose shape the bytes decide, drawing field names from
the vocabulary of OpenAI requests, Mooncake traces and PrefixRoutedModel specs, so the
fuzzer reaches the validation code past "unknown field" quickly.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Field names the code under test looks for (a fuzzer rarely spells them by chance).
VOCABULARY = (
    # OpenAI requests
    "model",
    "prompt",
    "messages",
    "role",
    "content",
    "type",
    "text",
    "image_url",
    "input_audio",
    "video_url",
    "file",
    "stream",
    "stream_options",
    "include_usage",
    "max_tokens",
    "max_completion_tokens",
    "min_tokens",
    "n",
    "temperature",
    "top_p",
    "ignore_eos",
    "cache_salt",
    "user",
    "system",
    "assistant",
    "tool",
    # Mooncake trace rows
    "timestamp",
    "input_length",
    "output_length",
    "hash_ids",
    # PrefixRoutedModel spec
    "engine",
    "kind",
    "image",
    "imagePullPolicy",
    "imagePullSecrets",
    "command",
    "args",
    "env",
    "envFrom",
    "name",
    "value",
    "valueFrom",
    "secretKeyRef",
    "secretRef",
    "port",
    "resources",
    "limits",
    "requests",
    "nodeSelector",
    "tolerations",
    "affinity",
    "sharedMemorySize",
    "volumes",
    "volumeMounts",
    "mountPath",
    "probes",
    "readiness",
    "liveness",
    "startup",
    "httpGet",
    "exec",
    "periodSeconds",
    "podAnnotations",
    "podLabels",
    "serviceAccountName",
    "runtimeClassName",
    "priorityClassName",
    "replicas",
    "routing",
    "strategy",
    "blockSize",
    "prefixBlocks",
    "loadFactor",
    "loadSlack",
    "queuePenalty",
    "virtualNodes",
    "tenantHeader",
    "isolateTenants",
    "router",
    "serviceType",
    "nodePort",
    "serviceAnnotations",
    "retries",
    "autoscaling",
    "enabled",
    "dryRun",
    "minReplicas",
    "maxReplicas",
    "prometheus",
    "targetQueueDepth",
    "status",
    "desiredReplicas",
    "emptyDir",
    "medium",
    "sizeLimit",
)
STRINGS = (
    "",
    " ",
    "user",
    "system",
    "assistant",
    "text",
    "image_url",
    "vllm",
    "sglang",
    "sim",
    "custom",
    "prefix-cache",
    "prefix-hash",
    "least-load",
    "round-robin",
    "ClusterIP",
    "NodePort",
    "LoadBalancer",
    "X-Tenant",
    "--port",
    "--host=1",
    "--model",
    "POD_IP",
    "dshm",
    "/dev/shm",
    "16Gi",
    "engine-sim",
    "m",
    "hello world",
    "a\u0301",
    "\u00e9",
    "\ud800",
    "\x00",
    "\u2028",
    "\t\n \r",
    "\ufeff",
    "nvidia.com/gpu",
)
INTS = (0, 1, -1, 2, 16, 255, 256, 512, 65535, 65536, 2**31 - 1, 2**31, 2**63 - 1, 2**63, -(2**63), 10**30)
FLOATS = (0.0, -0.0, 0.5, 1.0, 1.25, 1e300, -1e-300, math.inf, -math.inf, math.nan)


class Reader:
    """Consumes bytes front to back; past the end every read returns zeros."""

    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            return 0
        value = self.data[self.pos]
        self.pos += 1
        return value

    def below(self, n: int) -> int:
        """An integer in [0, n)."""
        if n <= 256:
            return self.byte() % n
        return (self.byte() << 8 | self.byte()) % n

    def flag(self) -> bool:
        return self.byte() & 1 == 1

    def take(self, n: int) -> bytes:
        chunk = self.data[self.pos : self.pos + n]
        self.pos += len(chunk)
        return chunk

    def rest(self) -> bytes:
        chunk = self.data[self.pos :]
        self.pos = len(self.data)
        return chunk

    def text(self, max_len: int = 64) -> str:
        """A string: one from the list, or bytes read as UTF-8/Latin-1/UTF-16 code units."""
        mode = self.below(4)
        if mode == 0:
            return STRINGS[self.below(len(STRINGS))]
        raw = self.take(self.below(max_len + 1))
        if mode == 1:
            return raw.decode("utf-8", "replace")
        if mode == 2:
            return raw.decode("latin-1")
        # UTF-16 code units, lone surrogates included
        return "".join(chr(int.from_bytes(raw[i : i + 2], "little")) for i in range(0, len(raw) - 1, 2))

    def key(self) -> str:
        return VOCABULARY[self.below(len(VOCABULARY))] if self.below(8) else self.text(12)


def json_value(r: Reader, depth: int = 0) -> Any:
    """A JSON-compatible value (NaN and infinities included: Python's json accepts them)."""
    choice = r.below(12) if depth < 6 else r.below(6)
    if choice == 0:
        return None
    if choice == 1:
        return r.flag()
    if choice == 2:
        return INTS[r.below(len(INTS))] if r.flag() else r.byte() - 64
    if choice == 3:
        return FLOATS[r.below(len(FLOATS))]
    if choice in (4, 5):
        return r.text()
    if choice in (6, 7, 8):
        return [json_value(r, depth + 1) for _ in range(r.below(6))]
    if choice == 9:  # a list of token ids, long, now and then one out of any vocabulary's range
        return [INTS[r.below(len(INTS))] if r.below(16) == 0 else r.byte() * (r.byte() + 1) for _ in range(r.below(64))]
    return {r.key(): json_value(r, depth + 1) for _ in range(r.below(7))}


def json_object(r: Reader, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object that holds each of `required` (a value of any shape) plus random fields."""
    obj: dict[str, Any] = {}
    for name in required:
        if r.below(8):
            obj[name] = json_value(r, 1)
    for _ in range(r.below(5)):
        obj[r.key()] = json_value(r, 1)
    return obj


def encode(r: Reader, value: Any) -> bytes:
    """`value` as JSON bytes, in one of several spellings (ASCII escapes, raw UTF-8 with any
    lone surrogate passed through as invalid UTF-8, pretty-printed)."""
    mode = r.below(4)
    try:
        if mode == 0:
            return json.dumps(value).encode("ascii")
        if mode == 1:
            return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
        if mode == 2:
            return json.dumps(value, indent=r.below(4), ensure_ascii=False).encode("utf-8", "surrogatepass")
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8", "replace")
    except (ValueError, RecursionError):
        return b"{}"


def header_value(r: Reader) -> str:
    """A value an HTTP client can send (no CR, LF or NUL; Latin-1 only)."""
    text = r.text(40)
    return "".join(ch for ch in text if 0x20 <= ord(ch) <= 0xFF and ch != "\x7f") or "x"
