"""Random-weight models (Qwen3's architecture, or Qwen2's, which mlx-lm can split into a pipeline)
written to a folder and loaded with mlx_lm.load.

No weights can be downloaded here, and a random model is the harshest client a constraint
can have: whatever it samples must still come out valid.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import mlx.core as mx
from mlx.utils import tree_flatten
from mlx_lm.models import qwen2, qwen3

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt",
                   "tokenizer.model", "special_tokens_map.json", "generation_config.json", "chat_template.jinja")


def write_random_model(tokenizer_dir: str | Path, out_dir: str | Path, *, vocab_size: int,
                       hidden: int = 64, layers: int = 2, heads: int = 4, seed: int = 0,
                       model_type: str = "qwen3") -> Path:
    """A model of ``model_type`` (qwen3 or qwen2) with random weights and ``tokenizer_dir``'s
    tokenizer files; the weights' index is written too, as mlx-lm's pipeline loading reads it."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = {
        "model_type": model_type, "hidden_size": hidden, "num_hidden_layers": layers,
        "intermediate_size": hidden * 2, "num_attention_heads": heads, "num_key_value_heads": heads // 2,
        "head_dim": hidden // heads, "rms_norm_eps": 1e-6, "vocab_size": vocab_size,
        "max_position_embeddings": 4096, "rope_theta": 10000.0, "tie_word_embeddings": True,
        "torch_dtype": "float32",
    }
    mx.random.seed(seed)
    arch = {"qwen3": qwen3, "qwen2": qwen2}[model_type]
    model = arch.Model(arch.ModelArgs.from_dict(config))
    # larger logits than the default init so sampling is spread, yet far from uniform
    model.update({"model": {"embed_tokens": {"weight": mx.random.normal((vocab_size, hidden)) * 0.5}}})
    mx.eval(model.parameters())
    weights = dict(tree_flatten(model.parameters()))
    mx.save_safetensors(str(out / "model.safetensors"), weights)
    (out / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {name: "model.safetensors" for name in weights}}))
    (out / "config.json").write_text(json.dumps(config))
    for name in TOKENIZER_FILES:
        src = Path(tokenizer_dir) / name
        if src.exists():
            shutil.copy(src, out / name)
    return out
