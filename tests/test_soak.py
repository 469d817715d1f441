"""Soak: a couple of thousand short constrained generations on tiny random models, every family,
every tool choice, budgets from each grammar's minimum up. Every result must be valid, and the
process's memory, measured with the engine's bounded caches emptied, must not grow."""

import gc
import json

import jsonschema
import mlx.core as mx
from mlx_lm.sample_utils import make_sampler

import engine
from conftest import scale
from test_tool_models import eager, model_for
from test_toolcalls import TOKENIZER_OF, offered_tools

FAMILIES = [f for f in TOKENIZER_OF if f != "mistral_args"]  # no tekken tokenizer for a model here
PER_FAMILY = scale(3, 125)  # in each of two halves (--full: the long soak)
WARM = scale(1, 12)
CHOICES = ["required", "auto", "none", "auto", "required"]


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def settle() -> float:
    """Memory with every per-request cache the engine bounds emptied: what remains would be a leak.
    The tables read from the tokenizers stay (built once per tokenizer, as a server keeps them);
    rebuilding them every phase only measured the allocator's fragmentation."""
    engine.clear_caches(vocabularies=False)
    gc.collect()
    mx.clear_cache()
    return rss_mb()


def test_soak_every_family_memory_flat(tmp_path_factory):
    tools = offered_tools()
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    schema = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array",
              "items": {"type": "string", "maxLength": 8}, "maxItems": 3}}, "required": ["id"]}
    models = {f: model_for(f, tmp_path_factory) for f in FAMILIES}
    counts = {"generations": 0, "tool_calls": 0, "json": 0}
    memory = {}
    for phase, n in (("warm", WARM), ("first half", PER_FAMILY), ("second half", PER_FAMILY)):
        for family in FAMILIES:
            model, tok = models[family]
            for i in range(n):
                mx.random.seed(i)
                sampler = make_sampler(temp=1.0)
                if counts["generations"] % 5 == 4:  # a JSON schema through the same models
                    g = engine.compile_json_schema(tok, schema)
                    budget = max(1, g.min_tokens + i % 7)
                    r = engine.generate(model, tok, "JSON:", response_format=g, max_tokens=budget, sampler=sampler)
                    jsonschema.validate(json.loads(r.text), schema)
                    counts["json"] += 1
                else:
                    choice = CHOICES[i % len(CHOICES)]
                    g = engine.compile_tools(tok, tools, format=family, tool_choice=choice)
                    budget = max(1, g.min_tokens + i % 6)
                    r = engine.generate(model, tok, "Call a tool:", tools=g, max_tokens=budget,
                                        sampler=sampler, logits_processors=[eager(g)] if choice == "auto" else None)
                    assert r.finish_reason in ("tool_calls", "stop", "length")
                    if choice == "required":
                        assert r.tool_calls and r.finish_reason == "tool_calls"
                    for call in r.tool_calls:
                        jsonschema.validate(json.loads(call["function"]["arguments"]), by_name[call["function"]["name"]])
                    counts["tool_calls"] += len(r.tool_calls)
                assert r.usage["completion_tokens"] <= budget
                counts["generations"] += 1
        memory[phase] = settle()
    first = memory["first half"] - memory["warm"]
    second = memory["second half"] - memory["first half"]
    print(f"\nsoak: {counts}; memory after warm-up {memory['warm']:.0f} MB, then {first:+.1f} MB over the "
          f"first half and {second:+.1f} MB over the second")
    assert counts["generations"] == (WARM + 2 * PER_FAMILY) * len(FAMILIES)
    assert counts["tool_calls"] > PER_FAMILY and counts["json"] > PER_FAMILY
    # a leak grows with every generation; allocator settling does not repeat in the second half
    assert second < 24, f"memory grew by {second:.0f} MB over the second {PER_FAMILY * len(FAMILIES)} generations"
