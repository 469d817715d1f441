"""Fail safe: bad requests, pathological schemas, misuse, caches under threads, forward progress.

Property tests print how many inputs they tried (run with -s to see it); the counts are asserted
too, so a strategy that stops producing inputs fails instead of passing empty.
"""

import json
import multiprocessing
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import mlx.core as mx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import engine
from conftest import DATA, load_tokenizer, scale
from engine.automata import AUTOMATA, LinkedAutomaton, automaton_key, builders, compile_regex, store
from engine.grammar import GRAMMARS
from engine.vocabulary import build_vocab

# hypothesis examples per property (light by default, --full for the long form)
N_SCHEMAS, N_TOOL_LISTS = scale(20, 60), scale(15, 40)
N_PARSER_TEXTS, N_PARSER_IDS = scale(100, 300), scale(100, 200)
BOUND = scale(4, 8)  # seconds a pathological build may take

TRIED: dict[str, int] = {}


def tried(name):
    TRIED[name] = TRIED.get(name, 0) + 1


def tool(name="f", params=None):
    params = params if params is not None else {"type": "object", "properties": {"a": {"type": "integer"}}}
    return {"type": "function", "function": {"name": name, "parameters": params}}


def obj(prop):
    return {"type": "object", "properties": {"a": prop}, "required": ["a"]}


# ---- bad requests: a specific exception naming the tool, keyword and pointer, before generation ----

BAD_TOOLS = [
    ("not JSON", "{not json", engine.errors.SchemaError, None, None, None, "not valid JSON"),
    ("duplicate names", [tool("f"), tool("f")], engine.errors.SchemaError, "f", None, None, "offered twice"),
    ("unwritable name", [tool("a b<")], engine.errors.SchemaError, "a b<", None, None, "cannot carry"),
    ("parameters not an object", [tool("f", {"type": "string"})], engine.errors.SchemaError, "f", "type", "#/parameters", "object schema"),
    ("missing $ref", [tool("f", obj({"$ref": "#/$defs/x"}))], engine.errors.SchemaError, "f", "$ref", "#/properties/a", "points to nothing"),
    ("remote $ref", [tool("f", obj({"$ref": "https://example.com/s.json"}))], engine.errors.SchemaError, "f", "$ref", "#/properties/a", "only local"),
    ("false", [tool("f", obj(False))], engine.errors.SchemaError, "f", "false", "#/properties/a", "accepts nothing"),
    ("contradictory types", [tool("f", obj({"allOf": [{"type": "string"}, {"type": "integer"}]}))], engine.errors.SchemaError, "f", "allOf", "#/properties/a", "different types"),
    ("minimum above maximum", [tool("f", obj({"type": "integer", "minimum": 5, "maximum": 1}))], engine.errors.SchemaError, "f", "maximum", "#/properties/a", "between 5 and 1"),
    ("lookbehind pattern", [tool("f", obj({"type": "string", "pattern": "(?<=a)b"}))], engine.errors.SchemaError, "f", "pattern", "#/properties/a/pattern", "cannot enforce"),
    ("invalid pattern", [tool("f", obj({"type": "string", "pattern": "(ab"}))], engine.errors.SchemaError, "f", "format", "#/properties/a/pattern", "'regex'"),
    ("enormous enum", [tool("f", obj({"enum": [f"v{i}" for i in range(20000)]}))], engine.errors.SchemaError, "f", "enum", "#/properties/a", "20000 values"),
    ("unsupported keyword", [tool("f", obj({"type": "string", "not": {"pattern": "^a"}}))], engine.errors.SchemaError, "f", "not", "#/properties/a", "cannot be expressed"),
]


@pytest.mark.parametrize("case", BAD_TOOLS, ids=[c[0] for c in BAD_TOOLS])
def test_bad_tools_are_named_before_generation(case):
    _, tools, kind, name, keyword, pointer, words = case
    tok = load_tokenizer("qwen3")
    t = time.perf_counter()
    with pytest.raises(kind, match=words) as e:
        engine.compile_tools(tok, tools, format="hermes")
    assert time.perf_counter() - t < 5
    if name is not None:
        assert e.value.tool == name and f"tool {name!r}" in str(e.value)
    if keyword is not None:
        assert e.value.keyword == keyword and repr(keyword) in str(e.value)
    if pointer is not None:
        assert e.value.pointer == pointer and pointer in str(e.value)


def test_bad_request_options():
    tok = load_tokenizer("qwen3")
    tools = [tool("f")]
    with pytest.raises(engine.errors.RequestError, match="'g', which is not among the offered"):
        engine.compile_tools(tok, tools, tool_choice={"type": "function", "function": {"name": "g"}})
    with pytest.raises(engine.errors.RequestError, match="tool_choice must be"):
        engine.compile_tools(tok, tools, tool_choice="sometimes")
    with pytest.raises(engine.errors.RequestError, match="unknown tool-call format"):
        engine.compile_tools(tok, tools, format="nope")
    with pytest.raises(engine.errors.TokenizerError, match="special tokens"):
        engine.compile_tools(load_tokenizer("llama3"), tools, format="hermes")
    with pytest.raises(engine.errors.BudgetError, match="max_tokens=3"):
        engine.compile_tools(tok, tools, tool_choice="required").matcher(3)
    with pytest.raises(engine.errors.BudgetError):
        engine.compile_json_schema(tok, {"const": "the quick brown fox jumps over the lazy dog, again and again"}).matcher(5)
    for schema, keyword in [(False, "false"), ({"type": "number", "minimum": 3, "maximum": 2}, "maximum"),
                            ({"$ref": "#/definitions/nope"}, "$ref"), ({"type": "string", "pattern": "(?=x)"}, "pattern"),
                            ({"type": "integer", "minimum": "zero"}, "type")]:
        with pytest.raises(engine.errors.SchemaError) as e:
            engine.compile_json_schema(tok, schema)
        assert e.value.keyword == keyword, (schema, e.value)
    assert all(issubclass(k, engine.ToolgateError) for k in (engine.errors.SchemaError, engine.errors.RequestError,
               engine.errors.TokenizerError, engine.errors.BudgetError, engine.errors.CompileError, engine.errors.GenerationError))


# ---- pathological schemas: bounded, clear, and the process stays healthy ----

def _deep(n):
    s = {"type": "integer"}
    for _ in range(n):
        s = {"type": "object", "properties": {"x": s, "y": {"type": "string", "maxLength": 40}}, "required": ["x"]}
    return s


EXPLODING = {
    "deep nesting": _deep(60),
    "long enum": {"enum": [f"value number {i}" for i in range(9000)]},
    "wide anyOf": {"anyOf": [{"type": "object", "properties": {f"k{i}": {"type": "string", "maxLength": 200}},
                              "required": [f"k{i}"]} for i in range(400)]},
    "large repetition": {"type": "string", "pattern": "^(a|b)*a(a|b){200}$"},
    "nested bounded strings": {"type": "array", "maxItems": 200, "items": {"type": "array", "maxItems": 200,
                                                                         "items": {"type": "string", "maxLength": 200}}},
}


def working_threads() -> list[str]:
    """This process's threads but the disk cache's writer (one for the process, started by the
    first compile that saves, and kept)."""
    return sorted(t.name for t in threading.enumerate() if t.name != "toolgate-cache-writer")


@pytest.mark.parametrize("name", EXPLODING)
def test_pathological_schemas_are_bounded(name):
    tok = load_tokenizer("qwen3")
    threads = working_threads()
    t = time.perf_counter()
    try:
        g = engine.compile_json_schema(tok, EXPLODING[name], timeout=BOUND)
    except engine.ToolgateError as e:
        print(f"{name}: {type(e).__name__}: {e} after {time.perf_counter() - t:.1f} s")
    else:
        a = g.automaton
        size = (f"{sum(map(len, a.final))} states in {len(a.final)} linked parts" if isinstance(a, LinkedAutomaton)
                else f"{a.num_states} states")
        print(f"{name}: compiled in {time.perf_counter() - t:.1f} s, {size}")
    assert time.perf_counter() - t < BOUND + 20  # the bound, plus translating and killing the builder
    assert working_threads() == threads
    idle = set(builders.idle_builders())
    assert {c.pid for c in multiprocessing.active_children()} <= idle  # no build left running
    assert len(idle) <= builders.MAX_IDLE_BUILDERS
    small = engine.compile_json_schema(tok, {"type": "object", "properties": {"n": {"type": "integer"}}})
    assert small.automaton.walk(tok.encode('{"n":12}', add_special_tokens=False)) >= 0


def test_hardest_jsonschemabench_schemas_are_bounded():
    """The first schemas (by id) of the subsets where compiles run longest: each compiles or is
    refused with a ToolgateError within its bound, and the process carries on."""
    tok = load_tokenizer("qwen3")
    rows = [json.loads(line) for line in open(DATA / "jsonschemabench" / "hardest.jsonl")]
    assert len(rows) == 4
    threads = working_threads()
    for row in rows:
        t = time.perf_counter()
        try:
            engine.compile_json_schema(tok, row["schema"], timeout=8)
            outcome = "compiled"
        except engine.ToolgateError as e:
            outcome = f"{type(e).__name__}: {str(e)[:100]}"
        print(f"{row['id']}: {outcome} in {time.perf_counter() - t:.1f} s")
        assert time.perf_counter() - t < 8 + 20
        assert working_threads() == threads
    assert engine.compile_json_schema(tok, {"type": "boolean"}).min_tokens == 1


def test_a_killed_build_leaves_nothing_behind(tmp_path, monkeypatch):
    """A build stopped by its time bound writes no cache file and the next build works."""
    monkeypatch.setenv("TOOLGATE_CACHE_DIR", str(tmp_path))
    tok = load_tokenizer("qwen3")
    with pytest.raises(engine.errors.CompileError, match="longer than the 0.05 s limit") as info:
        engine.grammar.compile_regex_grammar(tok, r"(a|b)*a(a|b){14}[a-z]{0,200}", timeout=0.05)
    if os.path.exists("/proc/self/stat"):  # the builder's CPU time tells a slow build from a stuck one
        assert re.search(r"\(the build ran \d+\.\d s of CPU\)$", str(info.value)), str(info.value)
    assert list(tmp_path.iterdir()) == []
    assert engine.grammar.compile_regex_grammar(tok, r"[0-9]{1,3}", timeout=30).automaton.num_states > 0


def test_memory_bound_is_enforced():
    tok = load_tokenizer("qwen3")
    vocab = build_vocab(tok)
    with pytest.raises(engine.errors.CompileError, match="memory bound|transitions"):
        compile_regex(r"[^\x00]{0,300}", vocab, max_memory=64 << 20, timeout=60)


def test_transition_bound_stops_the_walk(monkeypatch):
    """The compiled trie walk counts the tokens it reaches and the build refuses past the bound,
    naming it; the same regex builds under a larger one (102 transitions)."""
    monkeypatch.setenv("TOOLGATE_CACHE_DIR", "off")
    vocab = build_vocab(load_tokenizer("qwen3"))
    regex = r"(?:[0-9]|true|null){1,3}"
    engine.clear_caches(vocabularies=False)
    with pytest.raises(engine.errors.CompileError, match="exceeds 60 transitions"):
        compile_regex(regex, vocab, timeout=None, max_transitions=60)
    engine.clear_caches(vocabularies=False)
    assert len(compile_regex(regex, vocab, timeout=None, max_transitions=10_000).tokens) == 102


# ---- no silent loosening ----

def test_unenforced_keywords_are_refused_or_listed_and_checked():
    tok = load_tokenizer("qwen3")
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "integer"},
                                                     "uniqueItems": True, "contains": {"const": 3}}},
              "required": ["a"]}
    with pytest.raises(engine.errors.SchemaError, match="contains"):
        engine.compile_json_schema(tok, schema)
    g = engine.compile_json_schema(tok, schema, strict=False)
    assert ("#/properties/a", "contains") in g.unenforced
    assert g.validate('{"a":[1,2]}')[1]  # the after-generation check catches what the mask let through
    assert g.validate('{"a":[3]}')[1] == []


# ---- processors: one sequence each ----

def _run(p, prompt, out, width):
    logits = mx.zeros((1, width))
    return p(mx.array(prompt + out), logits)


def test_processor_refuses_a_second_sequence(qwen3_tokenizer):
    g = engine.compile_json_schema(qwen3_tokenizer, {"type": "array", "items": {"type": "integer"}})
    width = g.vocab.size
    ids = qwen3_tokenizer.encode("[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15]", add_special_tokens=False)
    p = g.matcher(100)
    for i in range(len(ids) + 1):
        _run(p, [1, 2, 3], ids[:i], width)
    with pytest.raises(engine.errors.GenerationError, match="prompt differs"):
        _run(p, [9, 9, 9, 9], ids[:3], width)  # reused for another request
    with pytest.raises(engine.errors.GenerationError, match="went back"):
        _run(p, [1, 2, 3], ids[:2], width)  # reused for a new run of the same prompt
    other = qwen3_tokenizer.encode("[7,7,7,7,7,7,7,7,7,7,7,7,7,7,7]", add_special_tokens=False)
    with pytest.raises(engine.errors.GenerationError, match="changed"):
        _run(p, [1, 2, 3], other[:len(ids)] + ids[len(ids):], width)  # shared with another sequence
    q = g.matcher(100)
    for i in range(4):
        _run(q, [1, 2, 3], ids[:i], width)
    _run(q, [1, 2, 3], ids[:2], width)  # a speculative draft taken back: followed, not refused


def test_processors_share_nothing_mutable(qwen3_tokenizer):
    g = engine.compile_json_schema(qwen3_tokenizer, {"type": "array", "items": {"type": "integer"}})
    a, b = g.matcher(40), g.matcher(40)
    x = qwen3_tokenizer.encode("[1,2,3]", add_special_tokens=False)
    y = qwen3_tokenizer.encode("[45", add_special_tokens=False)
    for i in range(len(x) + 1):
        _run(a, [5], x[:i], g.vocab.size)
    for i in range(len(y) + 1):
        _run(b, [5], y[:i], g.vocab.size)
    assert a.accepting and not b.accepting
    assert a.consumed == x and b.consumed == y


# ---- caches: threads, corruption, bounds ----

SCHEMAS = [{"type": "array", "items": {"type": "integer", "minimum": i}, "maxItems": 3 + i} for i in range(4)] + [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8 + i}}, "required": ["name"]} for i in range(3)]


def _arrays(g):
    """The automaton's tables and the tokens of its first state (a row built on demand)."""
    a = g.automaton
    return [a.trans, a.final, a.bound, np.sort(a.row(0)[0]), a.min_tokens]


def _forget():
    """Forget compiled grammars and automata (the vocabulary's tables stay)."""
    GRAMMARS.clear()
    AUTOMATA.clear()


_ALONE: dict = {}


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(jobs=st.permutations([i % len(SCHEMAS) for i in range(5 * len(SCHEMAS))]), workers=st.integers(2, 8))
def test_caches_are_thread_safe(tmp_path_factory, jobs, workers):
    """Many threads compiling the same and different schemas at once, on cold caches, in an order
    hypothesis picks: the same automata as one thread, and one grammar per schema."""
    tok = load_tokenizer("qwen3")
    old = os.environ.get("TOOLGATE_CACHE_DIR")
    try:
        if not _ALONE:
            os.environ["TOOLGATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("alone"))
            _forget()
            _ALONE.update({i: _arrays(engine.compile_json_schema(tok, s)) for i, s in enumerate(SCHEMAS)})
        os.environ["TOOLGATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("threads"))
        _forget()
        with ThreadPoolExecutor(workers) as ex:
            got = list(ex.map(lambda i: (i, engine.compile_json_schema(tok, SCHEMAS[i])), jobs))
    finally:
        if old is None:
            os.environ.pop("TOOLGATE_CACHE_DIR", None)
        else:
            os.environ["TOOLGATE_CACHE_DIR"] = old
    tried("thread interleavings")
    for i, g in got:
        tried("threaded compile requests")
        assert all(np.array_equal(x, y) for x, y in zip(_arrays(g), _ALONE[i]))
        assert g is engine.compile_json_schema(tok, SCHEMAS[i])  # one grammar per schema


def test_corrupt_or_foreign_cache_files_are_rebuilt(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLGATE_CACHE_DIR", str(tmp_path))
    tok = load_tokenizer("qwen3")
    vocab = build_vocab(tok)
    _forget()
    good = _arrays(engine.compile_json_schema(tok, SCHEMAS[0]))
    regex = engine.compile_json_schema(tok, SCHEMAS[0]).regex
    key = automaton_key(regex, vocab, lazy=True)
    path = tmp_path / f"{key}.npz"
    store.flush()
    assert path.exists()
    other = engine.compile_json_schema(tok, SCHEMAS[1]).automaton
    store.flush()
    other_path = tmp_path / f"{other.key}.npz"
    for damage in (b"garbage", path.read_bytes()[:100], other_path.read_bytes()):  # junk, cut short, another key
        path.write_bytes(damage)
        _forget()
        assert all(np.array_equal(x, y) for x, y in zip(_arrays(engine.compile_json_schema(tok, SCHEMAS[0])), good))
        store.flush()
        assert store.load(path, key) is not None  # rewritten whole


def test_disk_cache_is_bounded(tmp_path, monkeypatch):
    monkeypatch.setenv("TOOLGATE_CACHE_DIR", str(tmp_path))
    tok = load_tokenizer("qwen3")
    _forget()
    sizes = []
    for s in SCHEMAS:
        engine.compile_json_schema(tok, s)
        store.flush()
        sizes.append(sum(f.stat().st_size for f in tmp_path.glob("*.npz")))
    limit = sizes[-1] // 2
    monkeypatch.setenv("TOOLGATE_CACHE_BYTES", str(limit))
    _forget()
    engine.compile_json_schema(tok, {"type": "array", "items": {"type": "boolean"}})
    store.flush()
    kept = list(tmp_path.glob("*.npz"))
    assert sum(f.stat().st_size for f in kept) <= limit and kept


def test_memory_caches_are_bounded_by_bytes(monkeypatch):
    tok = load_tokenizer("qwen3")
    _forget()
    monkeypatch.setattr(GRAMMARS, "max_size", 1)
    monkeypatch.setattr(AUTOMATA, "max_size", 1)
    for s in SCHEMAS:
        engine.compile_json_schema(tok, s)
    assert len(GRAMMARS) == 1 and len(AUTOMATA) == 1  # only the newest
    _forget()


# ---- forward progress and random schemas ----

def _walk(g, max_tokens, rng):
    """A random client through the processor: every row must allow something."""
    p = g.matcher(max_tokens)
    logits = mx.zeros((1, g.vocab.size))
    out = []
    for _ in range(max_tokens + 1):
        row = np.array(p(mx.array([7] + out), logits)[0])
        allowed = np.flatnonzero(row == 0)
        assert len(allowed) > 0 and not np.isnan(row).any()
        t = int(rng.choice(allowed))
        if t in g.vocab.eos_ids:
            return out
        out.append(t)
    raise AssertionError("the processor let the output run past max_tokens")


names = st.text("abcdefgh_", min_size=1, max_size=6)
leaf = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.builds(lambda lo, span: {"type": "integer", "minimum": lo, "maximum": lo + span},
              st.integers(-1000, 1000), st.integers(0, 5000)),
    st.builds(lambda lo, ex: {"type": "number", "minimum": lo, "exclusiveMaximum": lo + 100} if ex else {"type": "number"},
              st.integers(-50, 50), st.booleans()),
    st.builds(lambda lo, span: {"type": "string", "minLength": lo, "maxLength": lo + span},
              st.integers(0, 5), st.integers(0, 20)),
    st.sampled_from([{"type": "string", "pattern": "^[a-z]{2,5}$"}, {"type": "string", "format": "date"},
                     {"type": "string", "pattern": "^(ab|cd)+[0-9]?$"}, {"type": "string", "enum": ["x", "y z", "\u00e9"]},
                     {"const": {"k": [1, 2]}}, {"enum": [1, "1", None, True]}]),
)


def _extend(children):
    return st.one_of(
        st.builds(lambda c, lo, span: {"type": "array", "items": c, "minItems": lo, "maxItems": lo + span},
                  children, st.integers(0, 2), st.integers(0, 3)),
        st.builds(lambda props, req, closed: {"type": "object", "properties": props,
                                              "required": [k for k in props if req.get(k)],
                                              **({"additionalProperties": False} if closed else {})},
                  st.dictionaries(names, children, min_size=1, max_size=4), st.dictionaries(names, st.booleans()),
                  st.booleans()),
        st.builds(lambda a, b: {"anyOf": [a, b]}, children, children),
    )


random_schemas = st.recursive(leaf, _extend, max_leaves=6)


@settings(max_examples=N_SCHEMAS, deadline=None, suppress_health_check=list(HealthCheck))
@given(schema=random_schemas, seed=st.integers(0, 2**32 - 1), extra=st.integers(0, 25))
def test_random_schemas_give_valid_outputs_at_every_budget(schema, seed, extra):
    tok = load_tokenizer("qwen3")
    tried("random schemas")
    try:
        g = engine.compile_json_schema(tok, schema, timeout=30)
    except engine.ToolgateError:
        tried("random schemas refused")
        return
    rng = np.random.default_rng(seed)
    out = _walk(g, g.min_tokens + extra, rng)
    text = tok.decode(out)
    jsonschema.validate(json.loads(text), schema)
    tried("random schema outputs validated")


FAMILIES = {"hermes": "qwen3", "qwen3_coder": "qwen3", "kimi_k2": "kimi-k2", "glm47": "glm4", "glm45": "glm4",
            "harmony": "gpt-oss", "llama3_json": "llama3", "mistral": "mistral"}
TOOLS = [tool("get_weather", {"type": "object", "properties": {"city": {"type": "string"},
                                                               "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                              "required": ["city"]}),
         tool("ping", {"type": "object", "properties": {}})]


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_always_allows_a_token(family):
    tok = load_tokenizer(FAMILIES[family])
    rng = np.random.default_rng(0)
    for choice in ("auto", "required"):
        g = engine.compile_tools(tok, TOOLS, format=family, tool_choice=choice)
        for extra in range(0, 40, 3):
            budget = g.min_tokens + extra
            ids = _walk(g, budget, rng)  # every row allowed a token, none was NaN
            state = g.walk(ids, budget)
            assert len(ids) <= budget and state is not None and g.is_final(state)
            parsed = g.parse(ids)
            assert parsed.errors == []
            if choice == "required":
                assert parsed.tool_calls
            tried(f"forward-progress walks ({family})")


tool_names = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True)
param_names = st.from_regex(r"[a-z][a-z_]{0,7}", fullmatch=True)
tool_lists = st.lists(
    st.tuples(tool_names, st.dictionaries(param_names, st.one_of(leaf, _extend(leaf)), max_size=3),
              st.dictionaries(param_names, st.booleans())),
    min_size=1, max_size=4, unique_by=lambda t: t[0],
).map(lambda ts: [tool(name, {"type": "object", "properties": props,
                              "required": [k for k in props if req.get(k)]}) for name, props, req in ts])


@settings(max_examples=N_TOOL_LISTS, deadline=None, suppress_health_check=list(HealthCheck))
@given(tools=tool_lists, family=st.sampled_from(sorted(FAMILIES)), choice=st.sampled_from(["auto", "required"]),
       seed=st.integers(0, 2**32 - 1), extra=st.integers(0, 30))
def test_random_tool_lists_give_parsable_valid_calls(tools, family, choice, seed, extra):
    tok = load_tokenizer(FAMILIES[family])
    tried("random tool lists")
    try:
        g = engine.compile_tools(tok, tools, format=family, tool_choice=choice, timeout=30)
    except engine.ToolgateError:
        tried("random tool lists refused")
        return
    ids = _walk(g, g.min_tokens + extra, np.random.default_rng(seed))
    parsed = g.parse(ids)
    assert parsed.errors == []
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for call in parsed.tool_calls:
        jsonschema.validate(json.loads(call["function"]["arguments"]), by_name[call["function"]["name"]])
    if choice == "required":
        assert parsed.tool_calls
    tried("random tool-list outputs validated")


# ---- robust parsing ----

@settings(max_examples=N_PARSER_TEXTS, deadline=None, suppress_health_check=list(HealthCheck))
@given(text=st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace")),
                      st.lists(st.sampled_from(['<tool_call>', '</tool_call>', '{"name": "get_weather", ',
                                                '"arguments": {', '"city": "Oslo"', '}', '}}', '\n', '<think>',
                                                '</think>', '"days": 9', 'hello']), max_size=12).map("".join)))
def test_parse_never_crashes_or_returns_half_calls(text):
    tok = load_tokenizer("qwen3")
    g = engine.compile_tools(tok, TOOLS, format="hermes")
    tried("parser inputs")
    t = time.perf_counter()
    try:
        parsed = g.parse(text)
    except engine.errors.GenerationError:
        tried("parser inputs refused")
        return
    finally:
        assert time.perf_counter() - t < 2
    for call in parsed.tool_calls:
        args = json.loads(call["function"]["arguments"])
        assert call["function"]["name"] in ("get_weather", "ping") and isinstance(args, dict)
        if not parsed.errors:
            jsonschema.validate(args, next(x for x in TOOLS if x["function"]["name"] == call["function"]["name"])
                                ["function"]["parameters"])
    tried("parser inputs read")


@settings(max_examples=N_PARSER_IDS, deadline=None, suppress_health_check=list(HealthCheck))
@given(ids=st.lists(st.integers(-5, 160000), max_size=40))
def test_parse_of_arbitrary_token_ids(ids):
    tok = load_tokenizer("qwen3")
    g = engine.compile_tools(tok, TOOLS, format="hermes")
    tried("token-id inputs")
    try:
        g.parse(ids)
    except engine.errors.GenerationError:
        pass


def test_zz_report_property_counts():
    """Runs last in this file: the counts the closing note quotes."""
    print("\nproperty inputs tried:", json.dumps(TRIED, indent=1))
    if "random schemas" in TRIED:
        assert TRIED["random schemas"] >= N_SCHEMAS and TRIED.get("random schema outputs validated", 0) >= N_SCHEMAS // 3
    if "parser inputs" in TRIED:
        assert TRIED["parser inputs"] >= N_PARSER_TEXTS
    if "random tool lists" in TRIED:
        assert TRIED["random tool lists"] >= N_TOOL_LISTS and TRIED.get("random tool-list outputs validated", 0) >= N_TOOL_LISTS // 4
