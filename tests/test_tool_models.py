"""Tool calls through mlx-lm's own generation loop, on random-weight models with each family's
real vocabulary: engine.generate renders the chat template with the tools, and whatever the
model samples comes back as valid calls or text with an honest finish_reason."""

import json

import jsonschema
import mlx.core as mx
import mlx_lm
import numpy as np
import pytest
from mlx_lm.sample_utils import make_sampler

from conftest import load_tokenizer, scale, tokenizer_dir
from engine import compile_tools, generate
from models import write_random_model
from test_toolcalls import MLX_LM_PARSERS, TOKENIZER_OF, mlx_lm_calls, offered_tools

_models = {}


def model_for(family, tmp_path_factory):
    name = TOKENIZER_OF[family]
    if name not in _models:
        folder = tokenizer_dir(name)
        size = len(load_tokenizer(name))
        out = write_random_model(folder, tmp_path_factory.mktemp(f"random-{name}"), vocab_size=size + (-size % 64))
        _models[name] = mlx_lm.load(str(out))
    return _models[name]


def eager(grammar, boost=12.0):
    """A client that likes special tokens (so calls do open in auto mode); runs before our mask."""
    ids = sorted(grammar.vocab.symbols)

    def processor(tokens, logits):
        bias = np.zeros(logits.shape[-1], dtype=np.float32)
        bias[[i for i in ids if i < len(bias)]] = boost
        return logits + mx.array(bias)

    return processor


# mistral_args needs a tekken tokenizer, which is not available here (its random-client tests use
# the v3 vocabulary with [ARGS] added, which mlx_lm.load cannot give a model)
@pytest.mark.parametrize("family", [f for f in TOKENIZER_OF if f != "mistral_args"])
def test_generate_with_tools_on_a_random_model(family, tmp_path_factory):
    model, tok = model_for(family, tmp_path_factory)
    tools = offered_tools()
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    messages = [{"role": "user", "content": "Move a.txt to b.txt, then show the graph."}]
    outcomes = set()
    # three turns per family by default (a required call, an auto turn, none); five, longer, with --full
    runs = [("required", 60), ("auto", scale(80, 200)), ("none", 30), ("auto", 60), ("required", 150)]
    for seed, (choice, max_tokens) in enumerate(runs[:scale(3, 5)]):
        g = compile_tools(tok, tools, format=family, tool_choice=choice)
        mx.random.seed(seed)
        result = generate(model, tok, messages, tools=tools, tool_choice=choice, format=family,
                          max_tokens=max_tokens, sampler=make_sampler(temp=1.0),
                          logits_processors=[eager(g)] if choice == "auto" else None)
        assert result.usage["completion_tokens"] <= max_tokens
        assert result.finish_reason in ("tool_calls", "stop", "length")
        outcomes.add(result.finish_reason)
        if choice == "none":
            assert not result.tool_calls
        if choice == "required":
            assert result.finish_reason == "tool_calls" and result.tool_calls
        for call in result.tool_calls:
            args = json.loads(call["function"]["arguments"])
            jsonschema.validate(args, by_name[call["function"]["name"]])
        if result.tool_calls:
            assert result.finish_reason == "tool_calls"
            if family in MLX_LM_PARSERS:
                p = g.parser()
                text = p.plain(p.symbol_text(result.token_ids))
                assert mlx_lm_calls(family, text, tools) == [
                    (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in result.tool_calls]
    assert "tool_calls" in outcomes


def test_stream_generate_reassembles_to_generate(tmp_path_factory):
    """Same seed, same request: the streamed deltas add up to exactly the non-streamed result."""
    from engine import accumulate_deltas, stream_generate

    model, tok = model_for("hermes", tmp_path_factory)
    tools = offered_tools()
    messages = [{"role": "user", "content": "Move a.txt to b.txt."}]
    for choice, thinking in (("required", True), ("auto", None)):
        g = compile_tools(tok, tools, format="hermes", tool_choice=choice, thinking=thinking)
        kwargs = dict(tools=tools, tool_choice=choice, thinking=thinking, format="hermes", max_tokens=80)
        mx.random.seed(4)
        whole = generate(model, tok, messages, sampler=make_sampler(temp=1.0),
                         logits_processors=[eager(g)] if choice == "auto" else None, **kwargs)
        mx.random.seed(4)
        deltas = list(stream_generate(model, tok, messages, sampler=make_sampler(temp=1.0),
                                      logits_processors=[eager(g)] if choice == "auto" else None, **kwargs))
        assert deltas[-1]["finish_reason"] == whole.finish_reason
        assert deltas[-1]["result"].token_ids == whole.token_ids
        got = accumulate_deltas(deltas)
        assert got["content"] == whole.content and got["reasoning_content"] == whole.reasoning
        assert [c["function"] for c in got["tool_calls"]] == [c["function"] for c in whole.tool_calls]
        assert [c["id"] for c in got["tool_calls"]] == [c["id"] for c in deltas[-1]["result"].tool_calls]
