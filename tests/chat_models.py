"""Model folders for tokenizer tests: a small byte-level BPE trained here, with the special
tokens of three chat template styles, and those templates (written for these tests, in the
shape of Llama 3's, ChatML's and Qwen 2.5's: the last adds a system prompt when none is given).

Nothing is fetched: the tokenizer is trained on generated text with `tokenizers`.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers

from prefixroute.prompt_pieces import LLAMA3_PATTERN, QWEN2_PATTERN

LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
QWEN25 = (
    "{% if messages[0]['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant, made for these tests.<|im_end|>\n{% endif %}" + CHATML
)
TEMPLATES = {"llama3": LLAMA3, "chatml": CHATML, "qwen25": QWEN25}
# "<|im" overlaps "<|im_start|>" and "<|im_end|>": the longest match must win, as in tokenizers
SPECIALS = [
    "<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
    "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im",
]  # fmt: skip
WORDS = (
    "the cache holds block prefix router engine token café naïve 東京 данные 🙂 e\u0301 don't we'll 12 345 6789 "
    "a.b (x) [y] {z} -- ... !? \t tab"
).split(" ")


# Runs of whitespace, so that the tokenizer learns merges of them as real ones do (a cut
# inside a run would then change the ids, and the property tests would see it).
_GLUE = [" ", " ", " ", "  ", "   ", "    ", "\n", "\n\n", " \n", "\t", "\n    "]


def _corpus(lines: int = 1500) -> list[str]:
    rng = random.Random(7)
    out = []
    for _ in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(3, 16))]
        out.append("".join(w + rng.choice(_GLUE) for w in words))
    return out


def pre_tokenizer(style: str) -> pre_tokenizers.PreTokenizer:
    """'gpt2': ByteLevel with its own expression; 'llama3', 'qwen2': a Split by theirs, then
    ByteLevel; 'metaspace', 'metaspace_always', 'whitespace': pre-tokenizers of other kinds."""
    if style == "gpt2":
        return pre_tokenizers.ByteLevel(add_prefix_space=False)
    if style in ("metaspace", "metaspace_always"):  # SentencePiece-style: "first" marks the text's first word only
        return pre_tokenizers.Metaspace(prepend_scheme="first" if style == "metaspace" else "always")
    if style == "whitespace":
        return pre_tokenizers.Whitespace()
    pattern = LLAMA3_PATTERN if style == "llama3" else QWEN2_PATTERN
    from tokenizers import Regex

    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(pattern), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


def train(style: str = "gpt2", vocab: int = 600) -> Tokenizer:
    """A byte-level BPE with the three styles' special tokens, BOS added by its post-processor."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizer(style)
    if style == "qwen2":
        tok.normalizer = normalizers.NFC()
    alphabet = pre_tokenizers.ByteLevel.alphabet() if style in ("gpt2", "llama3", "qwen2") else []
    trainer = trainers.BpeTrainer(
        vocab_size=vocab, special_tokens=SPECIALS, initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", bos)]
    )
    return tok


def model_folder(root: Path, template: str, style: str = "gpt2") -> Path:
    """A model folder: `train(style)`'s tokenizer.json and one of TEMPLATES."""
    root.mkdir(parents=True, exist_ok=True)
    train(style).save(str(root / "tokenizer.json"))
    config = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>", "chat_template": TEMPLATES[template]}
    (root / "tokenizer_config.json").write_text(json.dumps(config))
    return root
