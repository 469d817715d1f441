"""mlx-lm's batch generation and speculative decoding under the constraint, on random-weight
models with the real Qwen3 vocabulary."""

import json

import jsonschema
import mlx.core as mx
import pytest
from mlx_lm.sample_utils import make_sampler

import engine
from conftest import scale, tokenizer_dir
from models import write_random_model
from tooldata import mcp_tools

PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 120}},
          "required": ["name", "age"]}
ITEMS = {"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 4}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    import mlx_lm

    tokenizer = tokenizer_dir("qwen3")
    main = write_random_model(tokenizer, tmp_path_factory.mktemp("main"), vocab_size=151936, seed=1)
    draft = write_random_model(tokenizer, tmp_path_factory.mktemp("draft"), vocab_size=151936, seed=2)
    model, tok = mlx_lm.load(str(main))
    draft_model, _ = mlx_lm.load(str(draft))
    return model, draft_model, tok


def requests():
    mcp = {t["function"]["name"]: t for t in mcp_tools()}
    weather = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    chat = [{"role": "user", "content": "Do the thing."}]
    return [
        {"prompt": "A person as JSON:", "response_format": PERSON, "max_tokens": 30},
        {"prompt": chat, "tools": [mcp["move_file"], mcp["read_graph"]], "tool_choice": "required", "max_tokens": 60},
        {"prompt": "Numbers:", "response_format": ITEMS, "max_tokens": 20},
        {"prompt": chat, "tools": weather, "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 40},
        {"prompt": "Free text:", "max_tokens": 8},
    ]


def check(request, result):
    if "response_format" in request:
        assert result.finish_reason == "stop"
        jsonschema.validate(json.loads(result.text), request["response_format"])
    elif "tools" in request:
        assert result.finish_reason == "tool_calls" and result.tool_calls
        if request.get("parallel_tool_calls") is False:
            assert len(result.tool_calls) == 1
        schemas = {t["function"]["name"]: t["function"]["parameters"] for t in request["tools"]}
        for call in result.tool_calls:
            jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[call["function"]["name"]])
    assert result.usage["completion_tokens"] <= request["max_tokens"]


def test_batch_mixes_schemas_and_tools_and_equals_one_by_one(models):
    model, _, tok = models
    greedy = engine.batch_generate(model, tok, requests())
    for request, result in zip(requests(), greedy):
        check(request, result)
        alone = engine.generate(model, tok, **request)
        assert alone.token_ids == result.token_ids, request
    for seed in range(3):  # sampled: every sequence still valid, each under its own constraint
        mx.random.seed(seed)
        sampled = engine.batch_generate(model, tok, requests(), sampler=make_sampler(temp=1.0))
        for request, result in zip(requests(), sampled):
            check(request, result)


def test_batch_rejects_bad_requests_before_generation(models):
    model, _, tok = models
    with pytest.raises(ValueError, match="needs 'prompt'"):
        engine.batch_generate(model, tok, [{"response_format": PERSON}])
    with pytest.raises(engine.errors.BudgetError):
        engine.batch_generate(model, tok, [{"prompt": "x", "response_format": PERSON, "max_tokens": 2}])


@pytest.mark.parametrize("request_index", [0, 1, 2])
def test_speculative_decoding_keeps_the_constraint(models, request_index):
    """The processor is called for every draft position and rejected drafts are trimmed without
    telling it; it follows the token history by position, so the state stays right. Greedy
    speculative decoding must give exactly the plain greedy tokens."""
    model, draft, tok = models
    request = requests()[request_index]
    plain = engine.generate(model, tok, **request)
    fast = engine.generate(model, tok, **request, draft_model=draft, num_draft_tokens=3)
    assert fast.token_ids == plain.token_ids
    for seed in range(scale(2, 6)):
        mx.random.seed(seed)
        result = engine.generate(model, tok, **request, draft_model=draft, num_draft_tokens=2,
                                 sampler=make_sampler(temp=1.0))
        check(request, result)
