from prefixroute.bench import synthetic
from prefixroute.engine_model import chat_template, tokenizer


def prompt_of(req) -> str:
    body = req.body("m", stream=False)
    return chat_template.render(body["messages"]) if req.kind == "chat" else body["prompt"]


def test_tenants_share_their_system_prompt_and_popularity_is_skewed():
    reqs = synthetic.tenants(300, rate=10, seed=1, tenants=20, system_tokens=256, question_tokens=16)
    assert len(reqs) == 300
    assert [r.at for r in reqs] == sorted(r.at for r in reqs)
    by_tenant: dict[str, list] = {}
    for r in reqs:
        by_tenant.setdefault(r.tenant, []).append(r)
    counts = sorted((len(v) for v in by_tenant.values()), reverse=True)
    assert counts[0] > 3 * counts[-1]  # Zipf: the top tenant dominates the tail
    a, b = by_tenant["tenant-0"][:2]
    pa, pb = tokenizer.encode(prompt_of(a)), tokenizer.encode(prompt_of(b))
    assert list(pa[:256]) == list(pb[:256])
    assert pa != pb
    other = tokenizer.encode(prompt_of(by_tenant["tenant-1"][0]))
    assert list(other[:16]) != list(pa[:16])


def test_multiturn_each_turn_extends_the_previous_prompt():
    reqs = synthetic.multiturn(60, rate=5, seed=2, turn_tokens=32, output_tokens=8, mean_turns=4)
    assert len(reqs) == 60
    prompts = [prompt_of(r) for r in reqs]
    extended = sum(
        1 for p in prompts for q in prompts if p != q and q.startswith(p[: -len(chat_template.GENERATION_PROMPT)])
    )
    assert extended > 10


def test_longdoc_requests_carry_whole_documents():
    reqs = synthetic.longdoc(40, rate=2, seed=3, documents=4, document_tokens=512, question_tokens=8)
    docs = {prompt_of(r)[: 512 * 4] for r in reqs}
    assert len(docs) <= 4
    assert all(tokenizer.count(prompt_of(r)) >= 512 for r in reqs)


def test_generators_are_deterministic():
    a = [prompt_of(r) for r in synthetic.tenants(5, seed=9, system_tokens=32)]
    b = [prompt_of(r) for r in synthetic.tenants(5, seed=9, system_tokens=32)]
    assert a == b


def test_sessions_share_one_prefix_and_each_turn_extends_its_conversation():
    reqs = synthetic.sessions(
        60, rate=20, seed=4, sessions=10, prefix_tokens=256, min_turn_tokens=16, max_turn_tokens=32, output_tokens=8
    )
    assert 40 <= len(reqs) <= 60
    assert [r.at for r in reqs] == sorted(r.at for r in reqs)
    prompts = [tokenizer.encode(prompt_of(r)) for r in reqs]
    shared = prompts[0][:200]
    assert all(list(p[:200]) == list(shared) for p in prompts)  # one prefix for all
    # every prompt but the first of its session starts with an earlier prompt's text (minus the generation cue)
    texts = [prompt_of(r)[: -len(chat_template.GENERATION_PROMPT)] for r in reqs]
    later = [t for t in texts if sum(1 for u in texts if u != t and t.startswith(u)) >= 1]
    assert len(later) == len(reqs) - 10
    assert len(synthetic.sessions(1000, rate=5, seed=4, sessions=7, min_turns=2, max_turns=2)) == 14


def test_conversations_are_sized_to_the_fleet_and_grow_behind_their_apps_prompt() -> None:
    from prefixroute.bench.synthetic import conversations

    small = conversations(60, seed=3, replicas=2, cache_tokens=20_000)
    large = conversations(60, seed=3, replicas=4, cache_tokens=400_000)
    assert len(small) == len(large) == 60
    assert len({r.tenant for r in large}) == 8  # every app has conversations
    assert conversations(60, seed=3, replicas=2, cache_tokens=20_000)[5].body("m") == small[5].body("m")
    # a later turn of a conversation resends the earlier one as its prefix
    by_app: dict[str, list] = {}
    for r in large:
        by_app.setdefault(r.tenant, []).append(r.body("m")["messages"])
    turns = sorted(by_app["app-0"], key=len)
    first, later = turns[0], turns[-1]
    assert later[0] == first[0]
    assert later[0]["role"] == "system"  # the app's system prompt
    assert any(later[: len(m)] == m for m in turns[:-1] if len(m) < len(later))
