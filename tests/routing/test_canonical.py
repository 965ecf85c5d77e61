import pytest

from prefixroute.routing import canonical
from prefixroute.routing.errors import InvalidRequest


def chat(*pairs):
    return [{"role": r, "content": c} for r, c in pairs]


def test_every_message_in_order_with_its_role():
    a = canonical.chat_prefix(chat(("system", "S"), ("user", "U")))
    b = canonical.chat_prefix(chat(("user", "S"), ("system", "U")))
    assert a != b
    assert a.index("S") < a.index("U")


def test_shared_leading_messages_give_a_shared_prefix():
    base = chat(("system", "You are terse."), ("user", "first question"))
    longer = base + chat(("assistant", "answer"), ("user", "follow-up"))
    assert canonical.chat_prefix(longer).startswith(canonical.chat_prefix(base))


def test_content_parts_are_joined_and_media_kept_by_reference():
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "u1"}}]
    one = canonical.chat_prefix([{"role": "user", "content": parts}])
    other = canonical.chat_prefix(
        [{"role": "user", "content": [parts[0], {"type": "image_url", "image_url": {"url": "u2"}}]}]
    )
    assert "look" in one
    assert one != other


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("  a \n\t b  ", "a b"), ("e\u0301", "\u00e9"), ("x", "x"), ("", "")],
)
def test_normalise_collapses_whitespace_and_composes_unicode(raw, expected):
    assert canonical.normalise(raw) == expected


def test_normalisation_can_be_turned_off():
    msgs = chat(("user", "a  b"))
    assert canonical.chat_prefix(msgs, normalised=True) != canonical.chat_prefix(msgs, normalised=False)


@pytest.mark.parametrize(
    ("prompt", "expected"),
    [
        ("hello  world", "hello world"),
        ([1, 2, 3], (1, 2, 3)),
        (["a", "b"], "a" + canonical.PROMPT_END + "b"),
        ([[1], [2, 3]], (1, -1, 2, 3, -1)),
    ],
)
def test_completion_prompt_forms(prompt, expected):
    assert canonical.completion_prefix(prompt) == expected


@pytest.mark.parametrize(
    ("kind", "body", "param"),
    [
        ("chat", {}, "messages"),
        ("chat", {"messages": []}, "messages"),
        ("chat", {"messages": "hi"}, "messages"),
        ("chat", {"messages": [1]}, "messages[0]"),
        ("chat", {"messages": [{"content": "x"}]}, "messages[0].role"),
        ("chat", {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content"),
        ("chat", {"messages": [{"role": "user", "content": [{"type": "?"}]}]}, "messages[0].content"),
        ("completion", {}, "prompt"),
        ("completion", {"prompt": 3}, "prompt"),
        ("completion", {"prompt": []}, "prompt"),
        ("completion", {"prompt": [1, "a"]}, "prompt"),
        ("completion", {"prompt": [True]}, "prompt"),
    ],
)
def test_bad_bodies_raise_invalid_request_naming_the_field(kind, body, param):
    with pytest.raises(InvalidRequest) as err:
        canonical.request_prefix(kind, body)
    assert err.value.param == param
    assert err.value.message
