"""Property-based tests (hypothesis) of everything that reads untrusted input.

Each property is a claim the rest of the system relies on, checked over generated inputs:

- router: any body is either parsed or refused with the router's 400 (never another
  exception); canonicalisation ignores whitespace and keeps prefixes (a longer
  conversation's blocks start with the shorter one's — what makes prefix routing work);
  isolated tenants share no block hash and no routing key, unisolated ones share all;
  the forwarded body is the client's plus the router's own `cache_salt`;
- engine-sim: any body is either served or refused with vLLM's 400/404, and what it
  accepts fits the context window;
- trace loader: any line is a row or a ValueError naming the problem; rows round-trip;
- operator: any spec is planned or refused with SpecError; a spec the API server would
  admit (the CRD's schema and CEL rules, tests/controller/schema.py) is planned into
  objects that Kubernetes' own schemas accept, or refused for a reason the docs list.

The coverage-guided fuzzer (tests/fuzz/run.py) runs the same code paths for far longer.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from prefixroute.bench.trace import parse_row
from prefixroute.controller.errors import SpecError
from prefixroute.controller.plan import plan_for
from prefixroute.controller.spec import parse_spec
from prefixroute.engine_model import prompt as engine_prompt
from prefixroute.engine_model import tokenizer
from prefixroute.engine_model.config import EngineConfig
from prefixroute.engine_model.errors import BadRequest as EngineBadRequest
from prefixroute.front.body import parse_body, with_cache_salt
from prefixroute.front.errors import BadRequest
from prefixroute.front.tenant import cache_salt, tenant_of
from prefixroute.routing import canonical
from prefixroute.routing.config import RoutingConfig
from prefixroute.routing.errors import InvalidRequest
from prefixroute.routing.request import request_from_body

json_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text()
json_values = st.recursive(
    json_scalars,
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=25,
)
ROLES = st.sampled_from(["system", "user", "assistant", "tool"])
WORDS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=80)
messages = st.lists(st.fixed_dictionaries({"role": ROLES, "content": WORDS}), min_size=1, max_size=6)
CONFIG = RoutingConfig(block_size=8, prefix_blocks=2)
ISOLATED = RoutingConfig(block_size=8, prefix_blocks=2, isolate_tenants=True)
FAST = settings(max_examples=200, deadline=None)


# --- router: parsing ------------------------------------------------------------------------


@FAST
@given(st.binary(max_size=400))
def test_any_bytes_are_parsed_or_refused_with_400(raw: bytes) -> None:
    try:
        parsed = parse_body(raw)
    except BadRequest as exc:
        assert exc.status == 400
        return
    assert isinstance(parsed.data, dict)
    assert parsed.raw is raw
    assert isinstance(parsed.stream, bool)


@FAST
@given(
    body=json_values | st.fixed_dictionaries({}, optional={"prompt": json_values, "messages": json_values}),
    kind=st.sampled_from(["chat", "completion"]),
)
def test_any_json_is_routed_or_refused_with_invalid_request(body: Any, kind: str) -> None:
    if not isinstance(body, dict):
        return
    try:
        request = request_from_body(kind, body, CONFIG)
    except InvalidRequest as exc:
        assert exc.param is None or isinstance(exc.param, str)
        return
    assert len(request.blocks) == request.units // CONFIG.block_size
    assert request == request_from_body(kind, body, CONFIG)


# --- router: canonical form -------------------------------------------------------------------


@st.composite
def respaced(draw: st.DrawFn) -> tuple[str, str]:
    """A text and the same words with other whitespace between and around them."""
    words = draw(
        st.lists(
            st.text(
                st.characters(codec="utf-8", exclude_categories=("Cs", "Zs", "Zl", "Zp", "Cc")), min_size=1, max_size=8
            ),
            min_size=1,
            max_size=12,
        )
    )
    spaces = st.text(st.sampled_from([" ", "\t", "\n", "\r", "\u00a0", "\u2003", "\u3000"]), min_size=1, max_size=3)
    a = " ".join(words)
    b = draw(spaces) + "".join(w + draw(spaces) for w in words)
    return a, b


@FAST
@given(respaced())
def test_whitespace_never_changes_the_blocks(pair: tuple[str, str]) -> None:
    a, b = pair
    ra = request_from_body("completion", {"prompt": a}, CONFIG)
    rb = request_from_body("completion", {"prompt": b}, CONFIG)
    assert (ra.blocks, ra.key) == (rb.blocks, rb.key)
    assert canonical.normalise(canonical.normalise(b)) == canonical.normalise(b)


@FAST
@given(messages, st.integers(min_value=1))
def test_a_conversation_extends_its_prefix_blocks(chat: list[dict[str, str]], cut: int) -> None:
    """The first turns of a chat hash to the leading blocks of the whole chat (vLLM's cache
    works the same way, so the router's guess of what is cached holds across turns)."""
    short = chat[: 1 + cut % len(chat)]
    whole = request_from_body("chat", {"messages": chat}, CONFIG)
    head = request_from_body("chat", {"messages": short}, CONFIG)
    assert whole.blocks[: len(head.blocks)] == head.blocks


@FAST
@given(st.text(st.characters(max_codepoint=127), max_size=300), st.integers(min_value=0))
def test_an_ascii_prompt_extends_its_prefix_blocks(text: str, cut: int) -> None:
    prefix = text[: cut % (len(text) + 1)]
    whole = request_from_body("completion", {"prompt": text}, CONFIG)
    head = request_from_body("completion", {"prompt": prefix}, CONFIG)
    assert whole.blocks[: len(head.blocks)] == head.blocks


# --- router: tenants --------------------------------------------------------------------------


@FAST
@given(st.text(min_size=8 * 3, max_size=200), st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_isolated_tenants_share_no_block_and_no_key(prompt: str, a: str, b: str) -> None:
    ta, tb = tenant_of({"X-Tenant": a}, "X-Tenant"), tenant_of({"X-Tenant": b}, "X-Tenant")
    assume(ta is not None and tb is not None and ta != tb)
    ra = request_from_body("completion", {"prompt": prompt}, ISOLATED, ta)
    rb = request_from_body("completion", {"prompt": prompt}, ISOLATED, tb)
    assert not set(ra.blocks) & set(rb.blocks)
    assert ra.key != rb.key
    # the same tenants without isolation: one cache entry, one key
    sa = request_from_body("completion", {"prompt": prompt}, CONFIG, ta)
    sb = request_from_body("completion", {"prompt": prompt}, CONFIG, tb)
    assert (sa.blocks, sa.key) == (sb.blocks, sb.key)
    assert cache_salt(ta) != cache_salt(tb)


@FAST
@given(st.text(min_size=8, max_size=40).filter(lambda v: len(v.strip()) >= 8 and not set(v) <= set("0123456789abcdef")))
def test_the_tenant_is_a_hash_never_the_raw_value(value: str) -> None:
    tenant = tenant_of({"X-Tenant": value, "Authorization": f"Bearer {value}"}, "X-Tenant")
    assert tenant is not None
    assert value.strip() not in tenant[2:]
    assert len(tenant) == 34
    assert value.strip() not in cache_salt(tenant)


@FAST
@given(st.dictionaries(st.text(max_size=10), json_values, max_size=6), st.text(max_size=20))
def test_the_forwarded_body_is_the_clients_with_the_routers_salt(data: dict[str, Any], salt: str) -> None:
    data.pop("stream", None), data.pop("model", None)  # the two fields the router checks itself
    raw = json.dumps(data, allow_nan=False).encode() if _finite(data) else b"{}"
    parsed = parse_body(raw)
    out = with_cache_salt(parsed, salt)
    out.decode("ascii")
    again = json.loads(out)
    assert again.pop("cache_salt") == salt
    parsed.data.pop("cache_salt", None)
    assert again == parsed.data


def _finite(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except ValueError:
        return False
    return True


# --- engine-sim -------------------------------------------------------------------------------

ENGINE = EngineConfig(model="sim", max_model_len=512)


@FAST
@given(
    body=json_values
    | st.fixed_dictionaries(
        {},
        optional={
            "prompt": json_values | st.text(max_size=300),
            "messages": json_values | messages,
            "max_tokens": st.integers(-5, 600) | json_values,
            "stream": json_values,
            "stream_options": json_values,
            "cache_salt": json_values,
            "model": st.just("sim") | json_values,
        },
    ),
    kind=st.sampled_from(["chat", "completion"]),
)
def test_engine_sim_serves_or_refuses_like_vllm(body: Any, kind: str) -> None:
    try:
        req = engine_prompt.parse(kind, body, ENGINE)
    except EngineBadRequest as exc:
        assert int(exc.status) in (400, 404)
        return
    assert req.max_tokens >= 1
    assert max(len(p) for p in req.prompts) + req.max_tokens <= ENGINE.max_model_len
    assert all(len(p) > 0 for p in req.prompts)
    if kind == "completion" and isinstance(body["prompt"], str):
        assert list(req.prompts[0]) == list(tokenizer.encode(body["prompt"]))


# --- trace loader ---------------------------------------------------------------------------


@FAST
@given(st.text(max_size=200) | json_values.map(json.dumps))
def test_a_trace_line_is_a_row_or_a_readable_value_error(line: str) -> None:
    try:
        row = parse_row(line, 7)
    except ValueError as exc:
        assert str(exc)
        return
    assert row.line == 7
    assert row.input_length >= 1
    assert row.output_length >= 1
    assert row.timestamp_ms >= 0


@FAST
@given(st.integers(0, 10**12), st.integers(1, 10**6), st.integers(1, 10**5), st.lists(st.integers(-(2**63), 2**63)))
def test_trace_rows_round_trip(ts: int, inp: int, out: int, ids: list[int]) -> None:
    row = parse_row(json.dumps({"timestamp": ts, "input_length": inp, "output_length": out, "hash_ids": ids}), 1)
    assert (row.timestamp_ms, row.input_length, row.output_length, list(row.hash_ids)) == (ts, inp, out, ids)


# --- operator spec --------------------------------------------------------------------------


@FAST
@given(
    json_values
    | st.fixed_dictionaries(
        {}, optional={k: json_values for k in ("engine", "replicas", "routing", "router", "autoscaling")}
    )
)
def test_any_spec_is_planned_or_refused_with_spec_error(spec: Any) -> None:
    body = {"metadata": {"name": "m", "namespace": "ns", "uid": "u", "generation": 1}, "spec": spec}
    try:
        plan = plan_for(body)
    except SpecError as exc:
        assert str(exc)
        return
    assert plan.engine_replicas >= 0
    json.dumps(plan.objects)


names = st.from_regex(r"[a-z]([a-z0-9-]{0,10}[a-z0-9])?", fullmatch=True)
env_var = st.fixed_dictionaries(
    {"name": st.from_regex(r"[A-Z_][A-Z0-9_]{0,10}", fullmatch=True)}, optional={"value": st.text(max_size=10)}
)
admissible_specs = st.fixed_dictionaries(
    {
        "engine": st.fixed_dictionaries(
            {"kind": st.sampled_from(["vllm", "sglang", "sim"]), "model": names},
            optional={
                "args": st.lists(
                    st.sampled_from(["--max-num-seqs", "8", "--tensor-parallel-size", "--x=1"]), max_size=4
                ),
                "env": st.lists(env_var, max_size=3, unique_by=lambda e: e["name"]),
                "port": st.integers(1, 65535),
                "sharedMemorySize": st.sampled_from(["1Gi", "64Mi", 1024]),
                "resources": st.just({"limits": {"nvidia.com/gpu": 1}}),
                "podLabels": st.dictionaries(names, names, max_size=2),
                "probes": st.just({"readiness": {"periodSeconds": 3}}),
            },
        )
    },
    optional={
        "replicas": st.integers(0, 20),
        "routing": st.fixed_dictionaries(
            {},
            optional={
                "strategy": st.sampled_from(["prefix-cache", "prefix-hash", "least-load", "round-robin"]),
                "blockSize": st.integers(1, 4096),
                "loadFactor": st.floats(1.0, 10.0),
                "tenantHeader": st.just("X-Tenant"),
                "isolateTenants": st.booleans(),
            },
        ),
        "router": st.fixed_dictionaries(
            {},
            optional={
                "replicas": st.integers(0, 5),
                "retries": st.integers(0, 5),
                "serviceType": st.sampled_from(["ClusterIP", "NodePort", "LoadBalancer"]),
                "fairSharing": st.fixed_dictionaries(
                    {}, optional={"maxInFlightPerEngine": st.integers(0, 64), "maxWaitSeconds": st.floats(0.1, 60)}
                ),
                "tracing": st.fixed_dictionaries(
                    {}, optional={"otlpEndpoint": st.just("http://otel:4318"), "sampleRatio": st.floats(0, 1)}
                ),
            },
        ),
        "auth": st.fixed_dictionaries(
            {},
            optional={
                "apiKeysSecret": st.fixed_dictionaries({"name": names}, optional={"key": st.just("tenants.yaml")}),
                "trustedFronts": st.lists(st.sampled_from(["10.0.0.0/8", "192.168.1.7", "fd00::/8", "gw"]), max_size=3),
            },
        ),
        "autoscaling": st.fixed_dictionaries(
            {},
            optional={
                "enabled": st.booleans(),
                "minReplicas": st.integers(0, 4),
                "maxReplicas": st.integers(4, 16),
                "prometheus": st.just("http://prometheus.monitoring:9090"),
            },
        ),
    },
)
DOCUMENTED_REFUSALS = ("must not set", "must not name", "must not mount", "use volumes not in")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(admissible_specs)
def test_a_spec_the_api_server_admits_is_planned_into_valid_objects(spec: dict[str, Any]) -> None:
    pytest.importorskip("celpy")
    from tests.controller.helpers import model_body
    from tests.controller.schema import admit, kubernetes_errors

    stored, errors = admit(model_body(spec, name="m", defaults=False))
    assume(not errors)
    try:
        plan = plan_for(stored)
    except SpecError as exc:
        assert any(reason in str(exc) for reason in DOCUMENTED_REFUSALS), exc
        return
    parse_spec(stored["spec"])
    for obj in plan.objects:
        assert kubernetes_errors(obj) == [], obj["kind"]


# --- the front door: key files, Authorization headers, tenant headers with keys on ------------


@FAST
@given(json_values)
def test_any_key_file_is_read_or_refused_with_key_file_error(document: Any) -> None:
    from prefixroute.tenancy.keys import KeyFileError, KeyRing, parse_key_entries

    try:
        entries = parse_key_entries(document)
    except KeyFileError:
        return
    ring = KeyRing(entries)
    assert len(ring) == len(entries)


key_entries = st.lists(
    st.tuples(st.text(min_size=1, max_size=40), st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:@/-]{0,20}", fullmatch=True)),
    max_size=6,
    unique_by=lambda e: e[0],
)


@FAST
@given(key_entries, st.text(max_size=60))
def test_a_key_finds_exactly_its_tenant_and_nothing_else_finds_one(entries: list[tuple[str, str]], other: str) -> None:
    from prefixroute.tenancy.keys import KeyRing, key_digest, parse_key_entries

    ring = KeyRing(parse_key_entries([{"sha256": key_digest(k), "tenant": t} for k, t in entries]))
    for key, tenant in entries:
        found = ring.lookup(key)
        assert found is not None
        assert found.tenant == tenant
    if other not in {k for k, _ in entries}:
        assert ring.lookup(other) is None


@FAST
@given(st.one_of(st.none(), st.text(max_size=80)))
def test_any_authorization_header_gives_a_key_or_none(header: str | None) -> None:
    from prefixroute.tenancy.keys import bearer_key

    key = bearer_key(header)
    assert key is None or (key and key == key.strip() and header is not None and key in header)


@settings(max_examples=150, deadline=None)
@given(
    authorization=st.one_of(
        st.text(max_size=60),
        st.sampled_from(["Bearer sk-real", "bearer   sk-real ", "Basic sk-real", "Bearer sk-real2", "sk-real", ""]),
    ),
    named=st.one_of(st.text(max_size=40), st.sampled_from(["globex", " acme ", ""])),
    trusted=st.booleans(),
)
def test_with_keys_on_only_a_known_key_or_a_trusted_front_names_the_tenant(
    authorization: str, named: str, trusted: bool, tmp_path_factory: pytest.TempPathFactory
) -> None:
    import asyncio

    from prefixroute.front.api_keys import ApiKeySource
    from prefixroute.front.errors import Unauthorized
    from prefixroute.front.gate import GateSettings, TenantGate, parse_networks
    from prefixroute.front.tenant import named_tenant
    from prefixroute.router.settings import RouterSettings
    from prefixroute.router.state import RouterState
    from prefixroute.tenancy.keys import bearer_key, key_digest

    path = tmp_path_factory.mktemp("keys") / "keys.yaml"
    path.write_text(json.dumps([{"sha256": key_digest("sk-real"), "tenant": "acme"}]))
    settings_ = GateSettings(api_keys=str(path), tenant_header="X-Tenant", trusted_fronts=parse_networks("10.9.0.0/16"))
    gate = TenantGate(settings_, RouterState(RouterSettings(backends=("http://127.0.0.1:9",))), ApiKeySource(path))
    peer = f"10.9.{next(_PEERS) % 250}.1" if trusted else f"172.16.{next(_PEERS) % 250}.1"
    headers = {"Authorization": authorization, "X-Tenant": named}
    try:
        identity = asyncio.run(gate.identify(headers, peer))
    except Unauthorized:
        assert bearer_key(authorization) != "sk-real"
        assert not (trusted and named.strip())
        return
    if trusted and named.strip():
        assert identity.name == named.strip()
        assert identity.tenant == named_tenant(named.strip())
        assert not identity.keyed
    else:
        assert identity.keyed
        assert identity.name == "acme"  # only the real key gets in
        assert bearer_key(authorization) == "sk-real"


_PEERS = iter(range(10**9))
