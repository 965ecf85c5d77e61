"""engine-sim's adapter registry: vLLM's answers to loading and unloading, and what it reads from a folder."""

import pytest

from prefixroute.engine_model.adapters import AdapterSlots
from prefixroute.engine_model.errors import BadRequest, NotFound
from prefixroute.engine_sim.lora import (
    AdapterUnreadable,
    InvalidUserInput,
    LoraAdapters,
    LoraModule,
    check_adapter_folder,
    parse_module,
    write_adapter_folder,
)


@pytest.fixture
def lora() -> LoraAdapters:
    return LoraAdapters(AdapterSlots(2), {"base", "/models/base"})


def test_modules_are_read_as_vllm_reads_its_flag():
    assert parse_module("sql=/adapters/sql") == LoraModule("sql", "/adapters/sql")
    assert parse_module('{"name": "sql", "path": "/a=b", "base_model_name": "base"}') == LoraModule("sql", "/a=b")
    for bad in ("sql", "=/adapters/sql", "sql=", '{"name": "sql"}', "{"):
        with pytest.raises(ValueError, match="--lora-modules"):
            parse_module(bad)


def test_a_folder_is_an_adapter_when_it_holds_a_readable_adapter_config(tmp_path):
    check_adapter_folder("ok", str(write_adapter_folder(tmp_path / "ok")))
    with pytest.raises(NotFound, match=r"^Loading lora gone failed: No adapter found for /nonexistent$"):
        check_adapter_folder("gone", "/nonexistent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotFound):
        check_adapter_folder("empty", str(tmp_path / "empty"))
    broken = write_adapter_folder(tmp_path / "broken")
    (broken / "adapter_config.json").write_text("[1, 2]")
    with pytest.raises(AdapterUnreadable, match="is not a JSON object") as refused:
        check_adapter_folder("broken", str(broken))
    assert refused.value.status == 500


def test_loading_registers_under_a_new_id_and_refuses_what_vllm_refuses(lora, tmp_path):
    folder = str(write_adapter_folder(tmp_path / "sql"))
    assert lora.load({"lora_name": "sql", "lora_path": folder}) == "Success: LoRA adapter 'sql' added successfully."
    assert "sql" in lora
    assert lora.slots.registered == {"sql"}
    assert lora.ids == {"sql": 1}
    assert lora.slots.resident() == ()  # registering takes no slot; a request for it will
    with pytest.raises(InvalidUserInput, match="has already been loaded") as refused:
        lora.load({"lora_name": "sql", "lora_path": folder})
    assert (refused.value.status, refused.value.kind) == (400, "InvalidUserInput")
    lora.load({"lora_name": "sql", "lora_path": folder, "load_inplace": True})
    assert lora.ids == {"sql": 1}  # in place: the same adapter, the same id
    with pytest.raises(InvalidUserInput, match=r"^The lora adapter 'base' conflicts with a served base model\.$"):
        lora.load({"lora_name": "base", "lora_path": folder})
    with pytest.raises(InvalidUserInput, match=r"^Both 'lora_name' and 'lora_path' must be provided\.$"):
        lora.load({"lora_name": "chat"})
    with pytest.raises(BadRequest, match="'lora_path' must be a str"):
        lora.load({"lora_name": "chat", "lora_path": 3})
    with pytest.raises(NotFound):
        lora.load({"lora_name": "chat", "lora_path": str(tmp_path / "missing")})
    assert lora.names() == ["sql"]


def test_unloading_forgets_the_adapter_and_a_reload_gets_a_new_id(lora, tmp_path):
    folder = str(write_adapter_folder(tmp_path / "sql"))
    lora.load({"lora_name": "sql", "lora_path": folder})
    assert lora.unload({"lora_name": "sql"}) == "Success: LoRA adapter 'sql' removed successfully."
    assert "sql" not in lora
    assert lora.slots.registered == set()
    with pytest.raises(NotFound, match=r"^The lora adapter 'sql' cannot be found\.$") as refused:
        lora.unload({"lora_name": "sql"})
    assert refused.value.status == 404
    with pytest.raises(InvalidUserInput, match="'lora_name' needs to be provided"):
        lora.unload({})
    lora.load({"lora_name": "sql", "lora_path": folder})
    assert lora.ids == {"sql": 2}  # vLLM counts ids on; a reloaded adapter is a new one
