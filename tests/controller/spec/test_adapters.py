import pytest

from prefixroute.controller.errors import SpecError
from prefixroute.controller.spec.adapters import (
    DEFAULT_MAX_LORAS,
    DEFAULT_MAX_RANK,
    AdapterSpec,
    LoraSlots,
    check_adapters,
    parse_adapters,
    parse_lora,
)
from prefixroute.controller.spec.model_source import FolderSource, HubSource


def test_lora_is_off_unless_given_and_takes_vllms_defaults() -> None:
    assert parse_lora(None) is None
    assert parse_lora({}) == LoraSlots(DEFAULT_MAX_LORAS, DEFAULT_MAX_RANK)
    assert parse_lora({"maxLoras": 1, "maxRank": 8}) == LoraSlots(1, 8)


@pytest.mark.parametrize(("lora", "message"), [({"maxLoras": 0}, "at least 1"), ({"maxRank": 12}, "maxRank")])
def test_lora_slots_vllm_would_refuse_are_refused(lora: dict, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_lora(lora)


def test_adapters_from_the_hub_and_from_folders() -> None:
    adapters = parse_adapters(
        [
            {"name": "sql", "source": {"hub": {"id": "acme/sql-lora", "revision": "v2"}}},
            {"name": "chat", "source": {"folder": {"path": "/adapters/chat/"}}},
        ]
    )
    assert adapters == (
        AdapterSpec("sql", HubSource("acme/sql-lora", "v2")),
        AdapterSpec("chat", FolderSource("/adapters/chat")),
    )
    assert parse_adapters(None) == ()


@pytest.mark.parametrize(
    ("adapters", "message"),
    [
        ([{"name": "a,b", "source": {"folder": {"path": "/a"}}}], "letters, digits"),
        ([{"name": "-a", "source": {"folder": {"path": "/a"}}}], "starting and ending"),
        ([{"name": "a" * 64, "source": {"folder": {"path": "/a"}}}], "1 to 63"),
        ([{"name": "a", "source": {}}], "exactly one of hub or folder"),
        ([{"name": "a", "source": {"folder": {"path": "rel"}}}], "absolute path"),
        ([{"name": "a", "source": {"hub": {"id": "no-slash"}}}], "hub repository id"),
        ([{"name": "a", "source": {"folder": {"path": "/a"}}}] * 2, "names 'a' twice"),
        ({"name": "a"}, "must be a list"),
    ],
)
def test_bad_adapters_are_refused_with_where_and_why(adapters: object, message: str) -> None:
    with pytest.raises(SpecError, match=message):
        parse_adapters(adapters)


def test_adapters_need_slots_a_name_of_their_own_and_a_cache_for_the_hub() -> None:
    folder = (AdapterSpec("a", FolderSource("/a")),)
    hub = (AdapterSpec("a", HubSource("o/a")),)
    check_adapters((), None, "base", cached=False)  # nothing to check
    check_adapters(folder, LoraSlots(), "base", cached=False)
    check_adapters(hub, LoraSlots(), "base", cached=True)
    with pytest.raises(SpecError, match=r"need spec\.engine\.lora"):
        check_adapters(folder, None, "base", cached=False)
    with pytest.raises(SpecError, match="served model's name"):
        check_adapters(folder, LoraSlots(), "a", cached=False)
    with pytest.raises(SpecError, match="model cache"):
        check_adapters(hub, LoraSlots(), "base", cached=False)
