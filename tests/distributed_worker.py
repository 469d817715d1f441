"""Run by tests/test_distributed.py under ``mlx.launch``: the engine's generations on a model
sharded over the launched processes (tensor-parallel, or a pipeline of layers); rank 0 writes
them as JSON.
``outputs`` is also what the test runs in one process to compare."""

import json
import sys

import mlx.core as mx
from mlx_lm.sample_utils import make_sampler

import engine

SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {
    "type": "string", "maxLength": 6}, "maxItems": 3}}, "required": ["id", "tags"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}]


def outputs(model, tokenizer, samplings: int = 3) -> list:
    """Greedy and seeded sampled generations (``samplings`` in all) under a schema and under tools
    (required, auto)."""
    out = []
    for seed, temp in ((0, 0.0), (1, 1.0), (2, 1.0))[:samplings]:
        mx.random.seed(seed)
        r = engine.generate(model, tokenizer, "JSON:", response_format=SCHEMA, max_tokens=40,
                            sampler=make_sampler(temp=temp))
        out.append(["schema", seed, r.token_ids, r.finish_reason])
        for choice in ("required", "auto"):
            mx.random.seed(seed)
            r = engine.generate(model, tokenizer, [{"role": "user", "content": "Weather in Oslo?"}], tools=TOOLS,
                                tool_choice=choice, max_tokens=50, sampler=make_sampler(temp=temp))
            out.append([choice, seed, r.token_ids, r.finish_reason,
                        [(c["function"]["name"], c["function"]["arguments"]) for c in r.tool_calls]])
    return out


def main(folder: str, path: str, kind: str, samplings: str = "3") -> None:
    """``kind``: "tensor" or "pipeline", how the model is sharded."""
    from mlx_lm.utils import sharded_load

    group = mx.distributed.init()
    if kind == "pipeline":
        model, tokenizer = sharded_load(folder, pipeline_group=group)
    else:
        model, tokenizer = sharded_load(folder, tensor_group=group)
    got = outputs(model, tokenizer, int(samplings))
    if group.rank() == 0:
        with open(path, "w") as f:
            json.dump({"size": group.size(), "outputs": got}, f)


if __name__ == "__main__":
    main(*sys.argv[1:5])
