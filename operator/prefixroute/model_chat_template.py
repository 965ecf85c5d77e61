"""A model folder's chat template, rendered the way vLLM renders it before tokenizing a chat.

Precise routing keys a chat completion by the engine's tokens, and vLLM (0.32) makes them
so: it turns the request's messages into a conversation, renders the model's Jinja chat
template over it (through Hugging Face transformers' `apply_chat_template`), and tokenizes
the text without adding special tokens (the template writes BOS itself). A router that
renders differently keys every chat wrongly, and then no chat ever matches what the engine
announced. So this follows the same steps, with jinja2 — the engine transformers itself
renders templates with — in the same sandbox and settings:

- an immutable sandbox, `trim_blocks` and `lstrip_blocks`, loop controls; `raise_exception`
  and `strftime_now` as globals; a `tojson` filter that keeps non-ASCII text as it is; a
  `{% generation %}` block (transformers marks assistant text with it) renders its body;
- variables: `messages`, `tools`, `documents`, `add_generation_prompt`, the tokenizer's
  special tokens (`bos_token`, `eos_token`, ...) and the request's `chat_template_kwargs`;
- the template: `tokenizer_config.json`'s `chat_template` (a string, or named templates:
  "tool_use" when the request has tools and the folder has one, else "default"), else
  `chat_template.jinja`, else `chat_template.json`;
- the conversation as vLLM builds it: text parts of a message joined by newlines — unless
  the template loops over a message's content, when every content becomes a list of text
  parts (vLLM's "openai" content format); a "developer" message becomes "system" when the
  template never names the developer role; assistant tool calls with their arguments
  parsed from JSON; a tool message's text parts joined.

What this does not reproduce is refused (`Unrenderable`), and the router then keys the
request approximately: images, audio and other non-text parts (the engine expands them
into placeholder tokens of the model's own), `continue_final_message`, a request's own
`chat_template`, and anything the template itself rejects.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.parser
import jinja2.sandbox

_SPECIAL_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class Unrenderable(ValueError):
    """This request's chat cannot be rendered exactly as the engine would render it."""


class _Generation(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}`: transformers uses it to mark the assistant's
    own text; rendering only needs its body."""

    tags = {"generation"}

    def parse(self, parser: jinja2.parser.Parser) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.Scope(body, lineno=lineno)


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


def _tojson(value: Any, ensure_ascii: bool = False, indent: int | None = None, separators: Any = None,
            sort_keys: bool = False) -> str:  # fmt: skip
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _environment() -> jinja2.sandbox.ImmutableSandboxedEnvironment:
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string, or an AddedToken's fields."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _iterates_content(source: str, env: jinja2.Environment) -> bool:
    """Whether the template loops over a message's content (`for x in message['content']`,
    `message.content`, ...): then vLLM hands it every content as a list of parts."""
    try:
        tree = env.parse(source)
    except jinja2.TemplateSyntaxError:
        return False
    for loop in tree.find_all(jinja2.nodes.For):
        target = loop.iter
        if isinstance(target, jinja2.nodes.Filter) and target.node is not None:
            target = target.node
        if isinstance(target, jinja2.nodes.Getattr) and target.attr == "content":
            return True
        if (
            isinstance(target, jinja2.nodes.Getitem)
            and isinstance(target.arg, jinja2.nodes.Const)
            and target.arg.value == "content"
        ):
            return True
    return False


class ChatTemplate:
    """One model folder's chat template(s) and special tokens, compiled once."""

    def __init__(self, templates: Mapping[str, str], special_tokens: Mapping[str, str]) -> None:
        if "default" not in templates:
            raise ValueError("a chat template named 'default' is needed")
        self._env = _environment()
        self._sources = dict(templates)
        self._compiled = {name: self._env.from_string(text) for name, text in templates.items()}
        self._openai_content = {name: _iterates_content(text, self._env) for name, text in templates.items()}
        self._developer = {name: "'developer'" in text or '"developer"' in text for name, text in templates.items()}
        self.special_tokens = dict(special_tokens)

    @classmethod
    def from_folder(cls, folder: str | Path) -> ChatTemplate | None:
        """The folder's template as transformers finds it, or None when it has none."""
        root = Path(folder)
        config: dict[str, Any] = {}
        config_path = root / "tokenizer_config.json"
        if config_path.is_file():
            config = json.loads(config_path.read_text(encoding="utf-8"))
        special = {name: text for name in _SPECIAL_TOKENS if (text := _token_text(config.get(name))) is not None}
        found = config.get("chat_template")
        if found is None and (root / "chat_template.jinja").is_file():
            found = (root / "chat_template.jinja").read_text(encoding="utf-8")
        if found is None and (root / "chat_template.json").is_file():
            found = json.loads((root / "chat_template.json").read_text(encoding="utf-8")).get("chat_template")
        if found is None:
            return None
        if isinstance(found, str):
            return cls({"default": found}, special)
        if isinstance(found, list):
            named = {str(t["name"]): str(t["template"]) for t in found if isinstance(t, Mapping)}
            return cls(named, special)
        raise ValueError(f"{config_path}: chat_template must be a string or a list of named templates")

    def render(self, body: Mapping[str, Any]) -> str:
        """The text vLLM renders for a chat completion request `body` (Unrenderable otherwise)."""
        if body.get("continue_final_message") or body.get("chat_template") is not None:
            raise Unrenderable("continue_final_message and a request's own chat_template are keyed approximately")
        tools = body.get("tools")
        name = "tool_use" if tools and "tool_use" in self._compiled else "default"
        conversation = self._conversation(body.get("messages"), self._openai_content[name], self._developer[name])
        kwargs = body.get("chat_template_kwargs")
        if kwargs is not None and not isinstance(kwargs, Mapping):
            raise Unrenderable("chat_template_kwargs must be an object")
        variables: dict[str, Any] = {
            **self.special_tokens,
            **(kwargs or {}),
            "messages": conversation,
            "tools": tools if tools else None,
            "documents": body.get("documents"),
            "add_generation_prompt": bool(body.get("add_generation_prompt", True)),
        }
        try:
            return self._compiled[name].render(**variables)
        except jinja2.TemplateError as exc:
            raise Unrenderable(f"the chat template refused the request: {exc}") from exc

    @staticmethod
    def _conversation(messages: Any, openai_content: bool, developer: bool) -> list[dict[str, Any]]:
        if not isinstance(messages, list) or not messages:
            raise Unrenderable("'messages' must be a non-empty array")
        out: list[dict[str, Any]] = []
        for message in messages:
            if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
                raise Unrenderable("every message needs a role")
            role = message["role"]
            texts = _texts(message.get("content"))
            entry: dict[str, Any] = {"role": role}
            if role == "tool" or not openai_content:
                entry["content"] = "\n".join(texts)
            else:
                entry["content"] = [{"type": "text", "text": t} for t in texts]
            if role == "assistant" and message.get("tool_calls"):
                entry["tool_calls"] = _tool_calls(message["tool_calls"])
            if role == "tool" and "tool_call_id" in message:
                entry["tool_call_id"] = message["tool_call_id"]
            if isinstance(message.get("name"), str):
                entry["name"] = message["name"]
            if role == "developer" and not developer:
                entry["role"] = "system"
            out.append(entry)
        if not developer and any(m["role"] == "developer" for m in messages if isinstance(m, Mapping)):
            out = _one_system_message(out)
        return out


def _texts(content: Any) -> list[str]:
    if content is None:
        return []
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        texts: list[str] = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, Mapping) and part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
            else:
                raise Unrenderable("only text parts are rendered by the router; other parts are keyed approximately")
        return texts
    raise Unrenderable("message content must be a string or an array of parts")


def _tool_calls(calls: Any) -> list[dict[str, Any]]:
    """Assistant tool calls with their arguments as objects (templates expect dicts, as vLLM passes them)."""
    if not isinstance(calls, list):
        raise Unrenderable("tool_calls must be an array")
    out: list[dict[str, Any]] = []
    for call in calls:
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            raise Unrenderable("tool_calls entries must be function calls")
        function = dict(call["function"])
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            try:
                function["arguments"] = json.loads(arguments)
            except ValueError as exc:
                raise Unrenderable("tool call arguments must be JSON") from exc
        out.append({**call, "function": function})
    return out


def _one_system_message(conversation: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """vLLM merges system messages into one at the start once developer messages became system ones."""
    systems = [m for m in conversation if m["role"] == "system"]
    if len(systems) <= 1 and (not systems or conversation[0] is systems[0]):
        return conversation
    texts = []
    for m in systems:
        content = m.get("content")
        text = "\n".join(p["text"] for p in content) if isinstance(content, list) else str(content or "")
        if text:
            texts.append(text)
    return [{"role": "system", "content": "\n\n".join(texts)}, *(m for m in conversation if m["role"] != "system")]


Renderer = Callable[[Mapping[str, Any]], str]


def renderer(folder: str | Path) -> Renderer | None:
    """`ChatTemplate.from_folder(folder).render`, or None when the folder has no template."""
    template = ChatTemplate.from_folder(folder)
    return template.render if template is not None else None
