"""A request's prompt as the engine's token ids: engine-sim's, and a model folder's tokenizer and template."""

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors, trainers

from prefixroute import prompt_tokens
from prefixroute.engine_model import chat_template, tokenizer
from prefixroute.model_chat_template import ChatTemplate

TEMPLATE = "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}<|assistant|>\n"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    """A byte-level BPE tokenizer that adds BOS, and a chat template, as a model folder holds them."""
    root = tmp_path_factory.mktemp("model")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=["<s>", "</s>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator([f"the cache holds block {i} of the prompt" for i in range(300)], trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", special_tokens=[("<s>", tok.token_to_id("<s>"))]
    )
    tok.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps({"bos_token": "<s>", "chat_template": TEMPLATE}))
    return root


def test_engine_sim_tokens_are_engine_sims_own():
    body = {"messages": [{"role": "user", "content": "hello"}]}
    assert list(prompt_tokens.engine_sim_tokens("chat", body)) == list(
        tokenizer.encode(chat_template.render(body["messages"]))
    )
    assert list(prompt_tokens.engine_sim_tokens("completion", {"prompt": [5, 6, 7]})) == [5, 6, 7]


def test_a_completion_gets_the_special_tokens_vllm_adds_unless_it_says_not_to(model_folder):
    tokens = prompt_tokens.load(str(model_folder))
    bos = Tokenizer.from_file(str(model_folder / "tokenizer.json")).token_to_id("<s>")
    with_bos = tokens("completion", {"prompt": "the cache holds"})
    assert with_bos[0] == bos
    assert list(tokens("completion", {"prompt": "the cache holds", "add_special_tokens": False})) == list(with_bos[1:])
    assert list(tokens("completion", {"prompt": [[1, 2], [3]]})) == [1, 2]


def test_a_chat_is_the_rendered_template_tokenized_without_added_special_tokens(model_folder):
    tokens = prompt_tokens.load(str(model_folder))
    body = {"messages": [{"role": "user", "content": "the cache holds block 7"}]}
    rendered = ChatTemplate.from_folder(model_folder).render(body)  # type: ignore[union-attr]
    assert rendered.startswith("<s><|user|>")
    expected = Tokenizer.from_file(str(model_folder / "tokenizer.json")).encode(rendered, add_special_tokens=False).ids
    assert list(tokens("chat", body)) == expected
    assert list(tokens("chat", {**body, "add_special_tokens": True}))[1:] == expected  # BOS twice, as vLLM would


def test_chats_the_router_cannot_render_exactly_are_not_tokenizable(model_folder, tmp_path):
    tokens = prompt_tokens.load(str(model_folder))
    image = {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]}
    with pytest.raises(prompt_tokens.NotTokenizable):
        tokens("chat", image)
    (tmp_path / "tokenizer.json").write_bytes((model_folder / "tokenizer.json").read_bytes())
    with pytest.raises(prompt_tokens.NotTokenizable, match="no chat template"):
        prompt_tokens.load(str(tmp_path))("chat", {"messages": [{"role": "user", "content": "x"}]})


def test_a_folder_without_a_tokenizer_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"no tokenizer\.json"):
        prompt_tokens.load(str(tmp_path))
