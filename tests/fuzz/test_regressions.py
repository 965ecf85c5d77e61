"""Every input the fuzzer found failing, replayed through its target, plus the plain unit
test of the fix it led to. A new finding: copy the input from the run's artifacts
(`/tmp/prefixroute-fuzz/<target>/`) into tests/fuzz/regressions/, named `<target>-...`.

The replays decode the saved bytes with today's input grammar (tests/fuzz/inputs.py); when the
grammar changes they may no longer spell the request that failed, so each finding also has a
unit test of the request itself, which is the regression test that counts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.plan import plan_for
from tests.fuzz import targets

REGRESSIONS = Path(__file__).parent / "regressions"
CASES = sorted(REGRESSIONS.iterdir()) if REGRESSIONS.is_dir() else []


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_found_inputs_no_longer_fail(case: Path) -> None:
    name = max((t for t in targets.TARGETS if case.name.startswith(t + "-")), key=len)
    target = targets.make(name)
    target.setup()
    try:
        outcome = target.one(case.read_bytes())
    finally:
        target.teardown()
    assert outcome.crash is None, outcome
    assert outcome.router_5xx is None, outcome


@pytest.mark.parametrize("field", ["env", "volumes", "volumeMounts"])
@pytest.mark.parametrize("name", [["a", "list"], {"an": "object"}, 7, None, ""])
def test_a_name_that_is_not_a_string_is_a_spec_error(field: str, name: object) -> None:
    """Found by the fuzzer (operator-spec): a volumeMount named by a list made the engine
    builder raise TypeError (unhashable), which kopf would retry forever; now the spec is
    refused with SpecError (condition Degraded), like every other spec the operator cannot
    honour. The API server's schema refuses these too; the operator no longer depends on it."""
    engine = {
        "kind": "sim",
        "model": "m",
        "volumes": [{"name": "v", "emptyDir": {}}],
        "volumeMounts": [{"name": "v", "mountPath": "/v"}],
    }
    engine[field] = [{"name": name, "mountPath": "/x", "emptyDir": {}}]
    body = {"metadata": {"name": "m", "namespace": "ns"}, "spec": {"engine": engine}}
    with pytest.raises(SpecError, match=rf"spec\.engine\.{field}\[0\]\.name must be a non-empty string"):
        plan_for(body)


@pytest.mark.parametrize("prompt", [[2**63], [1, 2, 10**30], [-5, 3], [[1, 2], [2**64]], [[7], [-1]]])
def test_token_ids_out_of_range_are_a_400_not_a_500(prompt: list[object]) -> None:
    """Found by the fuzzer (router-parse, 1M inputs): a completion whose prompt held a token id
    of 2**63 or more made the block hash raise OverflowError — a 500 from the router. Token
    ids are now checked (0 to 2**63-1; negative ones too, which no tokenizer emits and which
    could pose as the router's batch separator) and refused with a 400 naming `prompt`."""
    from prefixroute.routing.config import RoutingConfig
    from prefixroute.routing.errors import InvalidRequest
    from prefixroute.routing.request import request_from_body

    with pytest.raises(InvalidRequest) as caught:
        request_from_body("completion", {"prompt": prompt}, RoutingConfig())
    assert caught.value.param == "prompt"


async def test_the_router_answers_huge_token_ids_with_its_400() -> None:
    import json

    import aiohttp

    from prefixroute.router.app import build_app, start_router
    from prefixroute.router.settings import RouterSettings

    router = await start_router(build_app(RouterSettings(backends=("http://127.0.0.1:9",))))
    try:
        async with aiohttp.ClientSession() as client:
            url = f"http://127.0.0.1:{router.port}/v1/completions"
            async with client.post(url, data=json.dumps({"prompt": [2**63]})) as r:
                assert r.status == 400
                assert (await r.json())["error"]["param"] == "prompt"
    finally:
        await router.close()


@pytest.mark.parametrize("timestamp", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_trace_timestamp_that_is_not_finite_is_refused(tmp_path: Path, timestamp: str) -> None:
    """Found by the fuzzer (trace): Python's json reads NaN and Infinity, and two rows at
    Infinity gave an arrival time of inf - inf = NaN, so the replay order was undefined. Now
    the line is refused like any other malformed one, naming the file and the line."""
    from prefixroute.bench.errors import TraceError
    from prefixroute.bench.trace import load_trace

    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}\n'
        f'{{"timestamp": {timestamp}, "input_length": 10, "output_length": 2, "hash_ids": [1]}}\n'
    )
    with pytest.raises(TraceError, match=r"t\.jsonl:2: 'timestamp' must be a non-negative number"):
        load_trace(trace)
