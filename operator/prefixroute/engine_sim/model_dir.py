"""The one local model folder: a byte-level BPE of 32,000 tokens and a ChatML chat template.

Three users need the files a model folder has, and this machine reaches no model hub:

- precise benches (`bench peers`, `bench simulate`, `router-bench --precise`, the e2e's
  precise model): engine-sim serves with `--tokenizer FOLDER` and the routers key with the
  same folder, so what a precise figure costs includes a real tokenizer's work. A byte
  tokenizer would hide it: Llama 3's and Qwen's are byte-level BPEs of 128k and 151k tokens;
  32k (Llama 2's, Mistral's size) is the smallest realistic one;
- peer routers (sglang-router, vllm-router) load a tokenizer for the model a worker reports:
  engine-sim reports this folder (`--model-path`);
- the chat template is ChatML (`<|im_start|>role ... <|im_end|>`, Qwen's form) with its
  markers as special tokens, so a chat costs a real template rendering and the markers are
  single tokens, as in a served model.

Trained here with `tokenizers` (the `bench` extra) on generated text: English-like sentences,
and the lowercase letter-words the benches' prompts are made of (`bench.texts`), so those
prompts tokenize at about 2.6 characters a token (uniform random letters cannot do much
better: 4.7 bits a letter) rather than one a letter. Built once under the cache folder
(`cache_folder`), never committed; the folder's name carries its recipe, so a changed recipe
builds a new folder rather than reusing a stale one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from prefixroute.cache_folder import cache_dir

if TYPE_CHECKING:
    from tokenizers import Tokenizer

VOCAB = 32_000
FOLDER = "bpe-32k-chatml-v1"  # under the cache folder; a new recipe takes a new name
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_WORDS = (
    "the of and to in is that for it as with was on be by at this from or an are which have not had but what all "
    "were when we there can one your their said if do will each about how up out them then she many some so these "
    "would other into has more her two like him see time could no make than first been its who now people my made "
    "over did down only way find use may water long little very after words called just where most know cache "
    "prefix router engine token request model server block replica kubernetes latency memory tenant system user "
    "assistant question answer document summary function result error value"
).split()
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _sentences(lines: int, rng: random.Random) -> Iterator[str]:
    for i in range(lines):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(6, 30))]
        yield " ".join(words).capitalize() + rng.choice(".?!,;:") + f" {rng.randint(0, 99999)} {i}"


def _letter_words(lines: int, rng: random.Random, chars: int = 1024) -> Iterator[str]:
    """Lines like the benches' prompts: lowercase letters, a space after about one in six."""
    for _ in range(lines):
        out: list[str] = []
        for _ in range(chars):
            out.append(" " if out and out[-1] != " " and rng.random() < 0.17 else rng.choice(_LETTERS))
        yield "".join(out).strip()


def corpus(lines: int, seed: int = 0) -> Iterator[str]:
    """The training text: `lines` sentences and a fifth as many lines of letter-words."""
    rng = random.Random(seed)
    yield from _sentences(lines, rng)
    yield from _letter_words(lines // 5, rng)


def _train(vocab: int, lines: int) -> Tokenizer:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(lines), trainer=trainer)
    return tok


def _write_configs(folder: Path, vocab_size: int) -> None:
    """tokenizer_config.json (template, special tokens) and a Llama-shaped config.json."""
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "model_max_length": 131072,
        "chat_template": CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config, indent=1))
    model_config = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "vocab_size": vocab_size,
        "max_position_embeddings": 131072,
    }
    (folder / "config.json").write_text(json.dumps(model_config, indent=1))


def ensure_model_dir(path: Path | None = None, vocab: int = VOCAB, lines: int = 20_000) -> Path:
    """Create (once) and return the model folder: tokenizer.json, tokenizer_config.json (with
    the chat template) and config.json. About 15 s of one core the first time at 32k."""
    folder = path or cache_dir() / FOLDER
    if all((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json", "config.json")):
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tok = _train(vocab, lines)
    partial = folder / "tokenizer.json.partial"  # a build cut short leaves no half-written tokenizer behind
    tok.save(str(partial))
    _write_configs(folder, tok.get_vocab_size())
    partial.replace(folder / "tokenizer.json")
    return folder
