"""The engine adapter client against a scripted HTTP exchange (vLLM's answers, copied in
shape): the adapters are the models with a parent; an adapter already loaded or already
gone counts as done; anything else is our own error with the engine's message."""

from __future__ import annotations

import json

import pytest

from prefixroute.controller.engine_adapters import EngineAdapterClient, EngineCallFailed, engine_message

URL = "http://10.0.0.1:8000"
MODELS = {
    "object": "list",
    "data": [
        {"id": "tiny", "object": "model", "root": "/models/tiny", "parent": None},
        {"id": "sql", "object": "model", "root": "/adapters/sql", "parent": "tiny"},
    ],
}


def error(message: str, code: int) -> str:
    return json.dumps({"error": {"message": message, "type": "BadRequestError", "param": None, "code": code}})


class Script:
    def __init__(self, *answers: tuple[int, str] | OSError) -> None:
        self.answers = list(answers)
        self.calls: list[tuple[str, str, object]] = []

    def __call__(self, method: str, url: str, body: bytes | None) -> tuple[int, str]:
        self.calls.append((method, url, None if body is None else json.loads(body)))
        answer = self.answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        return answer


def test_the_registered_adapters_are_the_models_with_a_parent() -> None:
    send = Script((200, json.dumps(MODELS)))
    assert EngineAdapterClient(send).registered(URL) == frozenset({"sql"})
    assert send.calls == [("GET", f"{URL}/v1/models", None)]


def test_load_and_unload_send_vllms_bodies_and_take_already_done_as_done() -> None:
    send = Script((200, "Success"), (400, error("The lora adapter 'sql' has already been loaded.", 400)), (404, "{}"))
    client = EngineAdapterClient(send)
    client.load(URL, "sql", "/adapters/sql")
    client.load(URL, "sql", "/adapters/sql")
    client.unload(URL, "chat")
    assert send.calls[0] == ("POST", f"{URL}/v1/load_lora_adapter", {"lora_name": "sql", "lora_path": "/adapters/sql"})
    assert send.calls[2] == ("POST", f"{URL}/v1/unload_lora_adapter", {"lora_name": "chat"})


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        ((404, error("Loading lora sql failed: No adapter found for /nope", 404)), "No adapter found for /nope"),
        ((500, "engine exploded"), "engine exploded"),
        (ConnectionRefusedError("refused"), "no answer from"),
    ],
)
def test_a_refused_load_is_our_error_with_the_engines_message(answer: tuple[int, str] | OSError, message: str) -> None:
    with pytest.raises(EngineCallFailed, match=message):
        EngineAdapterClient(Script(answer)).load(URL, "sql", "/nope")


def test_an_engine_without_a_model_list_or_the_unload_endpoint_fails_plainly() -> None:
    with pytest.raises(EngineCallFailed, match="no model list"):
        EngineAdapterClient(Script((200, "[]"))).registered(URL)
    with pytest.raises(EngineCallFailed) as raised:
        EngineAdapterClient(Script((405, "Method Not Allowed"))).unload(URL, "sql")
    assert raised.value.status == 405


def test_engine_messages_come_out_of_openai_errors_or_the_body() -> None:
    assert engine_message(error("bad path", 400)) == "bad path"
    assert engine_message('{"message": "flat"}') == "flat"
    assert engine_message("  plain text ") == "plain text"
