"""A snapshot of what the autoscaler knows about a fleet at one moment."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MemberSignals:
    name: str  # the pod name, as in status.ring
    waiting: float = 0.0  # vllm:num_requests_waiting, sglang:num_queue_reqs
    running: float = 0.0  # vllm:num_requests_running, sglang:num_running_reqs
    kv_usage: float = 0.0  # 0..1, vllm:kv_cache_usage_perc (or gpu_cache_usage_perc), sglang:token_usage
    hit_tokens_rate: float = 0.0  # prefix-cache hit tokens per second
    query_tokens_rate: float = 0.0  # prefix-cache queried tokens per second
    request_rate: float = 0.0  # requests per second

    @property
    def load(self) -> float:
        return self.waiting + self.running

    @property
    def hit_rate(self) -> float | None:
        return self.hit_tokens_rate / self.query_tokens_rate if self.query_tokens_rate > 0 else None


@dataclass(frozen=True)
class FleetSignals:
    at: float  # when the snapshot was taken (seconds, the caller's clock)
    members: tuple[MemberSignals, ...]
    ttft_p50: float | None = None  # seconds, over the fleet
    ttft_p90: float | None = None
    router_imbalance: float | None = None  # max/mean in-flight per member, as the router sees it
    pods: int | None = None  # engine pods that exist and are not being deleted (the operator's count)
    held: float = 0.0  # requests the routers hold for want of an engine (now, plus recent ones that gave up)

    @property
    def idle(self) -> bool:
        """Nothing in flight, nothing finished over the window, nothing held."""
        return self.in_flight == 0 and self.held == 0 and all(m.request_rate == 0 for m in self.members)

    @property
    def waiting(self) -> float:
        return sum(m.waiting for m in self.members)

    @property
    def in_flight(self) -> float:
        return sum(m.load for m in self.members)

    @property
    def hit_rate(self) -> float | None:
        queries = sum(m.query_tokens_rate for m in self.members)
        return sum(m.hit_tokens_rate for m in self.members) / queries if queries > 0 else None

    def member(self, name: str) -> MemberSignals | None:
        return next((m for m in self.members if m.name == name), None)
