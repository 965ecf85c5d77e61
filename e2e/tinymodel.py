"""Make a tiny Llama that real vLLM can serve: random weights, a tokenizer trained here.

    <vllm env>/bin/python e2e/tinymodel.py OUT_DIR     (e2e/vllmenv.py runs it)

No model hub is reachable from this project's machines, and a test needs no good answers:
it needs a model folder of the shape users give vLLM (config.json, safetensors weights,
tokenizer.json, tokenizer_config.json with a chat template, generation_config.json) that
loads and generates. The weights are random (seeded) and the output is gibberish, so
tests that care about lengths ask for ``ignore_eos`` and a fixed ``max_tokens``.

The tokenizer is a byte-level BPE (every byte sequence encodes, nothing is unknown)
trained with the ``tokenizers`` library on text generated from a fixed word list with a
fixed seed, so two runs make the same files. The shapes are the smallest the CPU
attention kernels take comfortably: head size 64, two layers.

Runs under the vLLM environment's interpreter (torch, transformers, tokenizers); it
imports nothing from this repository.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 0
VOCAB_SIZE = 2048
HIDDEN = 128
HEADS = 2
LAYERS = 2
CONTEXT = 4096
SPECIAL = ("<s>", "</s>", "<pad>")
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)
WORDS = (
    "the a an and or but if then when while of to in on at by for with from into over under "
    "model server cache prefix block token request reply route router replica engine tenant "
    "system user assistant prompt answer question context history turn message conversation "
    "fast slow warm cold hit miss queue load first time latency memory compute kernel "
    "kubernetes pod node service deployment operator status ring member ready health metrics "
    "one two three four five six seven eight nine ten hundred thousand zero "
    "is are was were be been has have had do does did can could will would should may might "
    "what which who where why how this that these those it its they them their we our you your "
    "write read send keep hold share reuse drop fail retry stream chunk byte text word line "
    "red green blue black white small large long short old new good bad same other every each"
).split()


def corpus(lines: int = 20000) -> list[str]:
    """Sentences of the fixed words in a seeded order, with digits and punctuation."""
    rng = random.Random(SEED)
    out = []
    for i in range(lines):
        words = [rng.choice(WORDS) for _ in range(rng.randint(4, 24))]
        out.append(" ".join(words).capitalize() + rng.choice(".?!,;:") + f" {i % 1000} {rng.random():.3f}")
    return out


def make_tokenizer(out: Path) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=list(SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = CONTEXT
    fast.save_pretrained(str(out))
    return fast


def make_model(out: Path, tokenizer: Any) -> None:
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=HIDDEN,
        intermediate_size=HIDDEN * 2,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=CONTEXT,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(str(out))
    GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    ).save_pretrained(str(out))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = make_tokenizer(out)
    make_model(out, tokenizer)
    files = sorted(p.name for p in out.iterdir())
    record = {
        "model": "LlamaForCausalLM, random weights",
        "seed": SEED,
        "vocab": len(tokenizer),
        "hidden": HIDDEN,
        "layers": LAYERS,
        "files": files,
    }
    (out / "generated.json").write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
