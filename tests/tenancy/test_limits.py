"""Step tests for per-tenant limits and the bad-key slowdown, on a clock the test drives."""

import pytest

from prefixroute.tenancy.keys import TenantLimits
from prefixroute.tenancy.limits import BadKeyThrottle, TenantLimiter, retry_after_header


def test_concurrency_limit_counts_requests_in_flight() -> None:
    limiter = TenantLimiter()
    limits = TenantLimits(max_concurrent=2)
    assert limiter.check("a", limits, 10, 0.0) is None
    assert limiter.check("a", limits, 10, 0.0) is None
    refusal = limiter.check("a", limits, 10, 0.0)
    assert refusal is not None
    assert refusal.reason == "concurrency"
    assert "limit is 2" in refusal.message
    assert limiter.check("b", limits, 10, 0.0) is None  # tenants are counted apart
    limiter.done("a")
    assert limiter.check("a", limits, 10, 0.0) is None
    assert limiter.in_flight("a") == 2


def test_tokens_per_minute_refill_continuously_and_say_when_to_retry() -> None:
    limiter = TenantLimiter()
    limits = TenantLimits(tokens_per_minute=600)  # 10 units a second
    assert limiter.check("a", limits, 500, 0.0) is None
    limiter.done("a")
    refusal = limiter.check("a", limits, 200, 0.0)
    assert refusal is not None
    assert refusal.reason == "tokens"
    assert refusal.retry_after == pytest.approx(10.0)  # 100 units short at 10 a second
    assert limiter.check("a", limits, 200, 10.0) is None
    limiter.done("a")
    assert limiter.check("a", limits, 600, 1000.0) is None  # the bucket holds one minute, no more
    limiter.done("a")
    assert limiter.check("a", limits, 1, 1000.0) is not None


def test_a_prompt_over_a_whole_minute_is_refused_for_good() -> None:
    refusal = TenantLimiter().check("a", TenantLimits(tokens_per_minute=100), 101, 0.0)
    assert refusal is not None
    assert refusal.retry_after == 60.0
    assert "101 units" in refusal.message


def test_a_refused_request_is_not_counted() -> None:
    limiter = TenantLimiter()
    limiter.check("a", TenantLimits(max_concurrent=1), 1, 0.0)
    limiter.check("a", TenantLimits(max_concurrent=1), 1, 0.0)
    assert limiter.in_flight("a") == 1


def test_retry_after_is_whole_seconds_at_least_one() -> None:
    assert [retry_after_header(s) for s in (0.0, 0.2, 1.0, 1.01, 59.5)] == ["1", "1", "1", "2", "60"]


def test_repeated_bad_keys_wait_longer_each_time_until_a_success() -> None:
    throttle = BadKeyThrottle(free=2, window=60.0, first_delay=0.1, cap=0.5)
    delays = [throttle.failed("10.0.0.1", float(t)) for t in range(6)]
    assert delays == [0.0, 0.0, 0.1, 0.2, 0.4, 0.5]
    assert throttle.failed("10.0.0.2", 6.0) == 0.0  # clients are counted apart
    throttle.succeeded("10.0.0.1")
    assert throttle.failed("10.0.0.1", 7.0) == 0.0
    assert throttle.failed("10.0.0.2", 100.0) == 0.0  # the window passed: counting starts again


def test_the_throttle_forgets_the_oldest_clients_first() -> None:
    throttle = BadKeyThrottle(free=0, clients=2)
    for client in ("a", "b", "c"):
        throttle.failed(client, 0.0)
    assert throttle.failed("a", 0.0) == throttle.first_delay  # "a" was forgotten: its first failure again
