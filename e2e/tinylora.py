"""Make a LoRA adapter for the tiny Llama of e2e/tinymodel.py that real vLLM loads.

    <vllm env>/bin/python e2e/tinylora.py OUT_DIR SEED     (e2e/test_vllm_adapters.py runs it)

An adapter folder as PEFT writes one: ``adapter_config.json`` (rank, alpha, the target
modules, the base model) and ``adapter_model.safetensors`` with one ``lora_A`` (rank x in)
and one ``lora_B`` (out x rank) matrix per targeted projection of every layer. The weights
are seeded noise, large on purpose: the base model's weights are drawn with a standard
deviation of 0.02, and each update B·A·(alpha/rank) here is several times that, so greedy
answers differ from the base model's and from another seed's adapter — which is how a test
sees that vLLM applied the adapter it asked for.

Runs under the vLLM environment's interpreter (numpy, safetensors); it imports nothing from
this repository and reads the base model's shapes from the constants below, which are
e2e/tinymodel.py's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HIDDEN = 128  # tinymodel.HIDDEN
INTERMEDIATE = HIDDEN * 2  # tinymodel's intermediate_size
LAYERS = 2  # tinymodel.LAYERS
RANK = 8
ALPHA = 16
SCALE = 0.15  # standard deviation of A's and B's entries
SHAPES = {  # projection -> (module path inside a layer, out features, in features)
    "q_proj": ("self_attn", HIDDEN, HIDDEN),
    "k_proj": ("self_attn", HIDDEN, HIDDEN),
    "v_proj": ("self_attn", HIDDEN, HIDDEN),
    "o_proj": ("self_attn", HIDDEN, HIDDEN),
    "gate_proj": ("mlp", INTERMEDIATE, HIDDEN),
    "up_proj": ("mlp", INTERMEDIATE, HIDDEN),
    "down_proj": ("mlp", HIDDEN, INTERMEDIATE),
}


def weights(seed: int) -> dict[str, object]:
    import numpy as np

    rng = np.random.default_rng(seed)
    out: dict[str, object] = {}
    for layer in range(LAYERS):
        for name, (part, rows, cols) in SHAPES.items():
            prefix = f"base_model.model.model.layers.{layer}.{part}.{name}"
            out[f"{prefix}.lora_A.weight"] = (rng.standard_normal((RANK, cols)) * SCALE).astype(np.float32)
            out[f"{prefix}.lora_B.weight"] = (rng.standard_normal((rows, RANK)) * SCALE).astype(np.float32)
    return out


def config(base_model: str) -> dict[str, object]:
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base_model,
        "r": RANK,
        "lora_alpha": ALPHA,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": sorted(SHAPES),
        "fan_in_fan_out": False,
        "inference_mode": True,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.splitlines()[2].strip(), file=sys.stderr)
        return 2
    from safetensors.numpy import save_file

    out, seed = Path(argv[0]), int(argv[1])
    base = argv[2] if len(argv) == 3 else "tiny-llama"
    out.mkdir(parents=True, exist_ok=True)
    (out / "adapter_config.json").write_text(json.dumps(config(base), indent=2) + "\n")
    save_file(weights(seed), str(out / "adapter_model.safetensors"))  # type: ignore[arg-type]
    for path in (out, *out.iterdir()):
        path.chmod(0o755 if path.is_dir() else 0o644)  # readable by a pod of any user
    print(json.dumps({"adapter": str(out), "seed": seed, "rank": RANK, "targets": sorted(SHAPES)}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
