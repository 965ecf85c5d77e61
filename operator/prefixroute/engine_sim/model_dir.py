"""A local "model folder" holding a small tokenizer.json, for routers that want one.

sglang-router and vllm-router load a tokenizer for the model a worker reports
(`model_path` from /get_model_info): a hub id makes them download one, and this
machine reaches no model hub. So engine-sim reports a local folder instead, and
the peers are given it as --model-path / --tokenizer-path. The tokenizer is a
WordLevel model trained on a few sentences with the `tokenizers` package (the
`bench` extra): it is built here, cached under ~/.cache/prefixroute, never
committed. Routers only need it to load; engine-sim's own token counts come
from `tokenizer`, not from this file. The one writer of such a folder: the
router-cost bench's backend reports the same folder to sglang-router.
"""

from __future__ import annotations

import json
from pathlib import Path

from prefixroute.cache_folder import cache_dir

_CORPUS = [
    "engine-sim is a simulated engine for prefixroute benchmarks",
    "the quick brown fox jumps over the lazy dog",
    "system user assistant tool message content",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z 0 1 2 3 4 5 6 7 8 9",
]
_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant: {% endif %}"
)


def ensure_model_dir(path: Path | None = None) -> Path:
    """Create (once) and return a folder with tokenizer.json, tokenizer_config.json and config.json."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder = path or cache_dir() / "engine-sim-model"
    if (folder / "tokenizer.json").is_file() and (folder / "config.json").is_file():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    trainer = trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(_CORPUS, trainer=trainer)
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "model_max_length": 131072,
                "chat_template": _CHAT_TEMPLATE,
            },
            indent=1,
        )
    )
    (folder / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "vocab_size": tok.get_vocab_size(),
                "max_position_embeddings": 131072,
            },
            indent=1,
        )
    )
    return folder
