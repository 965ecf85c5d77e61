"""A request's prompt as the engine's token ids: what tokenizer-accurate block keys are cut from.

Precise routing looks up blocks the engine announced by their tokens, so the
router must turn a request into exactly the token ids the engine will: the
model's own tokenizer, after the model's own chat template. Two sources:

- `engine-sim`: engine-sim's tokenizer and chat template (`engine_model`), the
  very functions the simulated engine runs;
- a model folder (the one the engine serves, mounted into the router pod): its
  `tokenizer.json` through the `tokenizers` library, and for chats its chat template
  rendered as vLLM renders it (`model_chat_template`, jinja2). A chat the router
  cannot render exactly (images, a folder without a template, ...) is refused with
  a clear error and the router routes it approximately.

Special tokens as vLLM adds them: a completion's text prompt gets them (BOS)
unless the request says `add_special_tokens: false`; a chat's rendered text does
not (the template writes them) unless it says `add_special_tokens: true`.

Turn n of a chat is not tokenized from scratch: the pieces of its text already seen (turns
1..n-1, a shared system prompt or document) are looked up (`token_reuse`, bounded by
`store_tokens`), with ids always equal to tokenizing the whole text.

Token ids sent by the client are used as given, as the engine uses them. A
batched completion goes to one member; its first prompt is the one keyed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prefixroute.engine_model import chat_template, tokenizer
from prefixroute.routing.errors import InvalidRequest
from prefixroute.token_store import DEFAULT_CAPACITY_TOKENS, TokenStore

PromptTokens = Callable[[str, Mapping[str, Any]], Sequence[int]]

ENGINE_SIM = "engine-sim"


class NotTokenizable(InvalidRequest):
    """This tokenizer cannot produce the engine's tokens for the request (the router then
    routes it from its approximate keys)."""


def _first_prompt(body: Mapping[str, Any]) -> str | list[int]:
    prompt = body.get("prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt:
        if all(type(t) is int for t in prompt):
            return list(prompt)
        head = prompt[0]
        if isinstance(head, str):
            return head
        if isinstance(head, list) and all(type(t) is int for t in head):
            return list(head)
    raise InvalidRequest("'prompt' must be a string, an array of strings or an array of token ids", "prompt")


def engine_sim_tokens(kind: str, body: Mapping[str, Any]) -> Sequence[int]:
    """engine-sim's token ids for a request (its chat template, then its tokenizer)."""
    if kind == "chat":
        return tokenizer.encode(chat_template.render(body.get("messages")))
    prompt = _first_prompt(body)
    return tokenizer.encode(prompt) if isinstance(prompt, str) else prompt


class ModelFolderTokens:
    """A model folder's tokenizer.json and chat template, loaded once."""

    def __init__(self, folder: str | Path, store_tokens: int = DEFAULT_CAPACITY_TOKENS) -> None:
        from tokenizers import Tokenizer

        from prefixroute.model_chat_template import ChatTemplate
        from prefixroute.token_reuse import ReusingEncoder

        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise ValueError(f"no tokenizer.json in {folder}")
        self._tokenizer = Tokenizer.from_file(str(path))
        self._template = ChatTemplate.from_folder(folder)
        self.store = TokenStore(store_tokens)
        self._plan = ReusingEncoder(self._tokenizer, self.store).plan

    def __call__(self, kind: str, body: Mapping[str, Any]) -> Sequence[int]:
        return self.plan(kind, body)[1]()

    def plan(self, kind: str, body: Mapping[str, Any]) -> tuple[int, Callable[[], Sequence[int]]]:
        """The characters the tokenizer has yet to see, and the call that returns the request's
        ids: the template is rendered and seen pieces looked up here, the rest is the call's
        (a front makes a long one off its event loop)."""
        if kind == "chat":
            return self._plan_chat(body)
        prompt = _first_prompt(body)
        if isinstance(prompt, list):
            return 0, lambda: prompt
        return self._plan(prompt, _flag(body, "add_special_tokens", True))

    def chat(self, body: Mapping[str, Any]) -> Sequence[int]:
        return self._plan_chat(body)[1]()

    def _plan_chat(self, body: Mapping[str, Any]) -> tuple[int, Callable[[], Sequence[int]]]:
        from prefixroute.model_chat_template import Unrenderable

        if self._template is None:
            raise NotTokenizable("the model folder has no chat template", "messages")
        try:
            text = self._template.render(body)
        except Unrenderable as exc:
            raise NotTokenizable(str(exc), "messages") from exc
        return self._plan(text, _flag(body, "add_special_tokens", False))


def _flag(body: Mapping[str, Any], name: str, default: bool) -> bool:
    value = body.get(name, default)
    return value if isinstance(value, bool) else default


def load(source: str, store_tokens: int = DEFAULT_CAPACITY_TOKENS) -> PromptTokens:
    """`engine-sim`, or a model folder holding tokenizer.json (ValueError when there is none);
    `store_tokens`: how many tokens of seen prompt pieces the folder's tokenizer keeps (0: none)."""
    if source == ENGINE_SIM:
        return engine_sim_tokens
    return ModelFolderTokens(source, store_tokens)
