"""Random-weight model, real Qwen3 vocabulary: every output parses, validates and closes in budget."""

import json

import jsonschema
import mlx.core as mx
import mlx_lm
import pytest
from mlx_lm.sample_utils import make_sampler

import engine
from conftest import scale
from engine.errors import BudgetError, GenerationError

SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 12},
                                      "age": {"type": "integer", "minimum": 0, "maximum": 130},
                                      "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
     "required": ["name", "age"]},
    {"type": "object", "properties": {"location": {"type": "string"},
                                      "unit": {"enum": ["celsius", "fahrenheit"]},
                                      "days": {"type": "integer", "minimum": 1, "maximum": 14}},
     "required": ["location"], "additionalProperties": False},
    {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "number"}, "ok": {"type": "boolean"}},
                                "required": ["x", "ok"]}, "minItems": 1},
    {"anyOf": [{"type": "null"}, {"type": "string", "format": "date"}, {"type": "integer", "exclusiveMinimum": 0}]},
    {"type": "object", "properties": {"id": {"type": "string", "format": "uuid"},
                                      "score": {"type": "number", "minimum": 0, "maximum": 1},
                                      "nested": {"type": "object", "properties": {"a": {"type": "string"}}}},
     "required": ["id", "score"]},
]


def run(model, tok, schema, max_tokens, seed):
    mx.random.seed(seed)
    return engine.generate(model, tok, "Answer in JSON:", response_format=schema, max_tokens=max_tokens,
                           sampler=make_sampler(temp=1.0))


def check(result, schema, max_tokens):
    assert result.finish_reason == "stop"
    assert result.usage["completion_tokens"] <= max_tokens
    value = json.loads(result.text)
    jsonschema.validate(value, schema)
    assert result.parsed == value and result.errors == []


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_random_sampling_always_valid(tiny_model, index):
    model, tok = tiny_model
    schema = SCHEMAS[index]
    g = engine.compile_json_schema(tok, schema)
    for seed in range(scale(4, 6)):  # four seeds by default (CI), six with --full
        for max_tokens in (g.min_tokens + 2, 48):
            check(run(model, tok, schema, max_tokens, seed), schema, max_tokens)


def test_budget_sweep_from_the_minimum(tiny_model):
    model, tok = tiny_model
    schema = SCHEMAS[0]
    g = engine.compile_json_schema(tok, schema)
    m = g.min_tokens
    assert m >= 5
    for max_tokens in range(m, m + 41):
        check(run(model, tok, schema, max_tokens, seed=max_tokens), schema, max_tokens)
    with pytest.raises(BudgetError, match=f"needs {m} tokens"):
        g.matcher(m - 1)
    with pytest.raises(BudgetError):
        engine.generate(model, tok, "x", response_format=schema, max_tokens=m - 1)


def test_min_tokens_is_reachable(tiny_model, qwen3_tokenizer):
    """An output of exactly min_tokens tokens exists: following tokens whose next state's bound is
    one less finds it, and it is valid."""
    _, tok = tiny_model
    g = engine.compile_json_schema(tok, SCHEMAS[1])
    a, state, path = g.automaton, 0, []
    while not a.final[state]:
        options = a.successors_within(state, int(a.bound[state]) - 1)
        path.append(int(options[0]))
        state = a.next_state(state, path[-1])
    assert len(path) == g.min_tokens
    jsonschema.validate(json.loads(tok.decode(path)), SCHEMAS[1])


def test_processor_under_plain_mlx_lm_generate(tiny_model):
    """Pipelined generate_step: tokens include the prompt; one extra call past max_tokens."""
    model, tok = tiny_model
    g = engine.compile_json_schema(tok, SCHEMAS[1])
    for max_tokens in (g.min_tokens, 20, 60):
        proc = g.matcher(max_tokens)
        mx.random.seed(max_tokens)
        text = mlx_lm.generate(model, tok, "A long prompt with several tokens in it", max_tokens=max_tokens,
                               sampler=make_sampler(temp=1.0), logits_processors=[proc])
        jsonschema.validate(json.loads(text), SCHEMAS[1])
        assert proc.accepting


def test_processor_refuses_foreign_tokens(tiny_model):
    _, tok = tiny_model
    g = engine.compile_json_schema(tok, SCHEMAS[1])
    proc = g.matcher(30)
    logits = mx.zeros((1, 151936))
    proc(mx.array([1, 2, 3]), logits)
    with pytest.raises(GenerationError, match="not allowed"):
        proc(mx.array([1, 2, 3] + tok.encode("hello", add_special_tokens=False)[:1]), logits)


def test_masks_never_empty_and_eos_forced_at_the_end(tiny_model):
    _, tok = tiny_model
    g = engine.compile_json_schema(tok, SCHEMAS[1])
    proc = g.matcher(g.min_tokens)
    prompt = [1, 2]
    logits = mx.zeros((1, 151936))
    seq = list(prompt)
    for _ in range(g.min_tokens + 2):
        out = proc(mx.array(seq), logits)
        allowed = mx.isfinite(out).sum().item()
        assert allowed >= 1
        seq.append(int(mx.argmax(out, axis=-1).item()))
    assert proc.ended and seq[-1] in g.vocab.eos_ids


def test_independent_matchers_share_nothing(tiny_model):
    """Two matchers of one grammar, driven in turns along different outputs: each one's state is
    the automaton's state for its own tokens, as if the other did not exist."""
    _, tok = tiny_model
    g = engine.compile_json_schema(tok, SCHEMAS[0])
    texts = ['{"name":"Ann","age":41}', '{ "name": "Bob", "age": 7, "tags": ["x"] }']
    outputs = [tok.encode(t, add_special_tokens=False) for t in texts]
    matchers = [g.matcher(40), g.matcher(40)]
    prompts = [[5], [9, 9]]
    logits = mx.zeros((1, 151936))
    for n in range(max(map(len, outputs)) + 1):
        for m, prompt, out in zip(matchers, prompts, outputs):
            if n <= len(out):
                row = m(mx.array(prompt + out[:n]), logits)
                if n < len(out):
                    assert row[0, out[n]].item() == 0  # the next token of its own output is allowed
                assert m.state == g.automaton.walk(out[:n])
    assert all(m.accepting for m in matchers)


def test_end_tokens_after_the_end_are_tolerated_others_refused(tiny_model):
    """mlx-lm builds one step past EOS before it stops: that call must not fail."""
    _, tok = tiny_model
    g = engine.compile_json_schema(tok, {"enum": ["yes"]})
    proc = g.matcher(10)
    logits = mx.zeros((1, 151936))
    seq = [7]
    proc(mx.array(seq), logits)
    seq += tok.encode('"yes"', add_special_tokens=False) + [g.vocab.eos_ids[0]]
    out = proc(mx.array(seq), logits)
    assert proc.ended and mx.argmax(out, axis=-1).item() == g.vocab.eos_ids[0]
    proc(mx.array(seq + [g.vocab.eos_ids[0]]), logits)
    with pytest.raises(GenerationError, match="after the output had ended"):
        proc(mx.array(seq + [g.vocab.eos_ids[0], 42]), logits)


def test_long_string_bound_counted_beside_the_dfa(tiny_model):
    """A maxLength above the DFA's count (counted beside the state): random sampling runs the
    string up to the bound, where the masks must close it in time; every output valid."""
    model, tok = tiny_model
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 300}}, "required": ["s"]}
    g = engine.compile_json_schema(tok, schema)
    assert g.counters == [300]
    lengths = []
    for seed in range(3):
        result = run(model, tok, schema, 400, seed)
        check(result, schema, 400)
        lengths.append(len(json.loads(result.text)["s"]))
    assert max(lengths) > 250, lengths  # the runs reached the last tokens before the bound


def test_extra_keys_through_the_model(tiny_model):
    """extra_keys=True: undeclared keys after the declared ones walk through the token automaton,
    random sampling stays valid at every budget tried, and the default writes declared keys only."""
    model, tok = tiny_model
    schema = {"type": "object", "properties": {"id": {"enum": [1, 2]}, "name": {"type": "string"}},
              "required": ["id"]}
    g = engine.compile_json_schema(tok, schema, extra_keys=True)
    plain = engine.compile_json_schema(tok, schema)
    for text, fits in (('{"id": 1, "note": [1, {"a": null}]}', True), ('{"id": 1, "name": "x", "n": 2}', True),
                       ('{"id": 1, "id": 2}', False), ('{"name": "x"}', False)):
        state = g.walk(tok.encode(text))
        assert (state is not None and g.is_final(state)) == fits, text
        state = plain.walk(tok.encode(text))
        assert not (state is not None and plain.is_final(state)) or text == '{"id": 1}'
    extras = 0
    for seed in range(6):
        mx.random.seed(seed)
        r = engine.generate(model, tok, "JSON:", response_format=g, max_tokens=g.min_tokens + 10 * seed,
                            sampler=make_sampler(temp=1.0))
        jsonschema.validate(json.loads(r.text), schema)
        extras += bool(set(json.loads(r.text)) - {"id", "name"})
    assert extras, "a random model writes undeclared keys when they are allowed"
