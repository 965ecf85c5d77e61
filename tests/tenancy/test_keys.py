"""The key file: digests only, clear errors naming the entry, lookups that hold no key."""

import pytest
import yaml

from prefixroute.tenancy.keys import KeyFileError, KeyRing, TenantLimits, bearer_key, key_digest, parse_key_entries

ACME = key_digest("sk-acme-1")


def ring(text: str) -> KeyRing:
    return KeyRing(parse_key_entries(yaml.safe_load(text)))


def test_a_presented_key_finds_its_tenant_and_limits() -> None:
    keys = ring(f"- {{sha256: {ACME}, tenant: acme, maxConcurrent: 4, tokensPerMinute: 1000}}\n")
    entry = keys.lookup("sk-acme-1")
    assert entry is not None
    assert entry.tenant == "acme"
    assert entry.limits == TenantLimits(4, 1000) == keys.limits("acme")
    assert keys.lookup("sk-acme-2") is None
    assert keys.lookup("") is None
    assert keys.limits("nobody") == TenantLimits()


def test_upper_case_digests_are_accepted_and_the_tightest_limit_of_a_tenants_keys_wins() -> None:
    other = key_digest("sk-acme-2")
    keys = ring(
        f"- {{sha256: {ACME.upper()}, tenant: acme, maxConcurrent: 4}}\n"
        f"- {{sha256: {other}, tenant: acme, maxConcurrent: 9, tokensPerMinute: 50}}\n"
    )
    assert keys.lookup("sk-acme-1") is not None
    assert keys.limits("acme") == TenantLimits(4, 50)


def test_a_key_carries_its_priority_and_ttft_objective() -> None:
    other = key_digest("sk-acme-2")
    keys = ring(
        f"- {{sha256: {ACME}, tenant: acme, priority: 10, ttftObjectiveMs: 500}}\n"
        f"- {{sha256: {other}, tenant: acme, priority: -1}}\n"
    )
    first, second = keys.lookup("sk-acme-1"), keys.lookup("sk-acme-2")
    assert first is not None
    assert second is not None
    assert (first.priority, first.ttft_objective_ms) == (10, 500)
    assert (second.priority, second.ttft_objective_ms) == (-1, None)
    assert keys.priority("acme") == -1  # named by a trusted front: the lowest of its keys
    assert keys.priority("nobody") == 0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{a: 1}", "must be a list"),
        ("- 3", "entry 1: must be a mapping"),
        ("- {sha256: abc, tenant: t}", "entry 1: 'sha256' must be the 64-hex-digit"),
        (f"- {{sha256: {ACME}}}", "entry 1: 'tenant' must be"),
        (f"- {{sha256: {ACME}, tenant: 'a b'}}", "'tenant' must be"),
        (f"- {{sha256: {ACME}, tenant: t, key: sk-1}}", "unknown field 'key'"),
        (f"- {{sha256: {ACME}, tenant: t, maxConcurrent: 0}}", "'maxConcurrent' must be a positive integer"),
        (f"- {{sha256: {ACME}, tenant: t, tokensPerMinute: true}}", "'tokensPerMinute' must be a positive integer"),
        (f"- {{sha256: {ACME}, tenant: t}}\n- {{sha256: {ACME}, tenant: u}}", "entry 2: the same key digest"),
        (f"- {{sha256: {ACME}, tenant: t, priority: high}}", "'priority' must be an integer"),
        (f"- {{sha256: {ACME}, tenant: t, priority: 2000000}}", "'priority' must be an integer"),
        (f"- {{sha256: {ACME}, tenant: t, ttftObjectiveMs: -5}}", "'ttftObjectiveMs' must be a positive integer"),
    ],
)
def test_bad_files_are_refused_with_the_entry_and_field(text: str, message: str) -> None:
    with pytest.raises(KeyFileError, match=message):
        ring(text)


def test_an_empty_file_holds_no_keys() -> None:
    assert len(ring("")) == 0


@pytest.mark.parametrize(
    ("header", "key"),
    [
        ("Bearer sk-1", "sk-1"),
        ("bearer   sk-1  ", "sk-1"),
        ("Basic abc", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("", None),
        (None, None),
        ("sk-1", None),
    ],
)
def test_bearer_keys(header: str | None, key: str | None) -> None:
    assert bearer_key(header) == key
