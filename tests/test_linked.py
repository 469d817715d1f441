"""Linked reference graphs (engine.automata.linked): each definition compiled once, calls and
returns in the match state.

Linking must not change the language where expansion is exact: on every fixture schema with
references that both compile, random walks see the same masks and the fixture instances the same
verdicts. Where expansion cuts recursion at max_depth, linking nests as deep as the instance
goes, and hypothesis-drawn trees (and near misses) get jsonschema's verdict token by token, the
mask allowing a token exactly when the step takes it. Under every budget from the minimum up, a
random client that samples only allowed tokens ends with a complete, valid value.
"""

import json
import math
import random

import jsonschema
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import engine
from conftest import DATA, scale
from instances import canonical_text
from engine.automata import allowed_bools
from engine.errors import BudgetError, CompileError, SchemaError
from engine.grammar import LinkedGrammar
from engine.json_schema import schema_to_regex

BIG = 1 << 30
TREE = {"$defs": {"node": {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 4},
    "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}},
    "required": ["name"], "additionalProperties": False}}, "$ref": "#/$defs/node"}
# two definitions calling each other, an any-value leaf, numbers that end where the caller goes on
MUTUAL = {"definitions": {
    "expr": {"anyOf": [{"type": "integer", "minimum": -50, "maximum": 5000}, {"$ref": "#/definitions/call"}]},
    "call": {"type": "object", "properties": {"fn": {"enum": ["add", "neg"]},
                                               "args": {"type": "array", "items": {"$ref": "#/definitions/expr"}},
                                               "meta": {}},
             "required": ["fn", "args"]}},
    "type": "array", "items": {"$ref": "#/definitions/expr"}, "minItems": 1}


def _mask(g, state, left):
    return np.flatnonzero(allowed_bools(g.mask(state, left, g.vocab.size), g.vocab.size))


def _verdict(tok, g, schema, value, masks=True):
    """Walk ``value`` as the engine writes JSON; the verdict must be jsonschema's (and with
    ``masks``, each token allowed by the mask exactly when the step takes it)."""
    text = canonical_text(value, schema)
    ids = tok.encode(text, add_special_tokens=False)
    state = g.initial_state
    for t in ids:
        nxt = g.step(state, t, BIG)
        if masks:
            allowed = allowed_bools(g.mask(state, BIG, g.vocab.size), g.vocab.size)[t]
            assert allowed == (nxt is not None), (text[:200], t, allowed)
        state = nxt
        if state is None:
            break
    accepted = state is not None and g.is_final(state)
    valid = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema).is_valid(value)
    assert accepted == valid, (text[:300], accepted, valid)
    return valid


def _same_masks(expanded, linked, rng, special, walks, steps, label):
    """Random walks (ordinary tokens only) see the same masks and the same final states."""
    for walk in range(walks):
        se, sl = expanded.initial_state, linked.initial_state
        for _ in range(steps):
            me, ml = _mask(expanded, se, BIG), _mask(linked, sl, BIG)
            assert np.array_equal(me, ml), label
            if walk == 0:  # the mask allows the tokens listed, class blocks included
                listed = np.zeros(linked.vocab.size, dtype=bool)
                listed[linked.automaton.allowed(sl, BIG)] = True
                listed[[i for i in linked.vocab.eos_ids if linked.is_final(sl)]] = True
                assert np.array_equal(ml, np.flatnonzero(listed)), label
            choices = [t for t in me.tolist() if t not in special]
            if not choices:
                break
            t = rng.choice(choices)
            se, sl = expanded.step(se, t, BIG), linked.step(sl, t, BIG)
            assert se is not None and sl is not None
            assert expanded.is_final(se) == linked.is_final(sl)


def _ref_rows():
    rows = []
    for path in sorted((DATA / "jsonschemabench").glob("*.jsonl")):
        rows += [json.loads(line) for line in open(path)]
    return [r for r in rows if "$ref" in json.dumps(r["schema"])]


def test_linked_equals_expanded_on_fixture_schemas(qwen3_tokenizer):
    """Same masks along random walks and the same verdicts on the fixture instances, for every
    fixture schema with references that compiles both ways."""
    rng = random.Random(7)
    special = set(qwen3_tokenizer.all_special_ids)  # a property the tokenizer recomputes per call
    compared = 0
    for row in _ref_rows():
        try:
            expanded = engine.compile_json_schema(qwen3_tokenizer, row["schema"], link=False)
            linked = engine.compile_json_schema(qwen3_tokenizer, row["schema"], link=True)
        except (SchemaError, CompileError):
            continue
        assert isinstance(linked, LinkedGrammar) and not isinstance(expanded, LinkedGrammar)
        compared += 1
        _same_masks(expanded, linked, rng, special, scale(4, 20), 80, row["id"])
        for test in row["tests"]:
            ids = qwen3_tokenizer.encode(canonical_text(test["data"], row["schema"]), add_special_tokens=False)
            verdicts = []
            for g in (expanded, linked):
                s = g.walk(ids)
                verdicts.append(s is not None and g.is_final(s))
            assert verdicts[0] == verdicts[1], (row["id"], test["description"])
    assert compared >= 3


def test_long_members_are_definitions_with_the_same_masks(qwen3_tokenizer):
    """Linking, a property value written longer than LINK_MEMBERS_FROM is a definition of its own
    (a big object is many small DFAs): same masks as the expansion along random walks."""
    from engine.json_schema.translate import LINK_MEMBERS_FROM
    inner = {"type": "object", "properties": {f"q{j}": {"enum": [f"value{j}-{k}" for k in range(40)]} for j in range(5)},
             "required": ["q0"], "additionalProperties": False}
    schema = {"type": "object", "properties": {f"p{i}": inner for i in range(4)}, "required": ["p0", "p2"],
              "additionalProperties": False}
    expanded = engine.compile_json_schema(qwen3_tokenizer, schema, link=False)
    linked = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    assert len(linked.definitions) == 4 and max(map(len, linked.definitions)) > LINK_MEMBERS_FROM
    assert len(linked.regex) < len(expanded.regex) / 4
    special = set(qwen3_tokenizer.all_special_ids)
    _same_masks(expanded, linked, random.Random(3), special, scale(4, 20), 120, "long members")


def test_many_optional_members_are_block_definitions_with_the_same_masks(qwen3_tokenizer):
    """Linking, an object with more than LINK_BLOCKS_FROM optional members writes its blocks of
    members as definitions: the same masks as the expansion along random walks (keys sharing
    prefixes across blocks: k1, k10, k11, ...), and the same verdicts on key subsets in order,
    out of order and repeated, empty included."""
    from engine.json_schema.translate import LINK_BLOCKS_FROM
    n = LINK_BLOCKS_FROM + 13
    values = [{"type": "integer"}, {"enum": ["x", "yy"]}, {"type": "boolean"}, {"type": "string", "maxLength": 3}]
    schema = {"type": "object", "properties": {f"k{i}": values[i % 4] for i in range(n)},
              "additionalProperties": False}
    expanded = engine.compile_json_schema(qwen3_tokenizer, schema, link=False)
    linked = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    assert len(linked.definitions) >= 2 * 6 and len(linked.regex) < len(expanded.regex) / 4
    # a later block is an optional call of a definition that is never empty: after a member the
    # match state holds the member's configuration, its caller's and one call per later block (a
    # definition that may be empty returns at once, and held each block's call and return twice)
    blocks = -(-n // math.isqrt(n))
    for text in ('{"k0":7', '{"k0":7,"k9":"x"'):
        assert len(linked.walk(qwen3_tokenizer.encode(text, add_special_tokens=False))) <= blocks + 1, text
    special = set(qwen3_tokenizer.all_special_ids)
    _same_masks(expanded, linked, random.Random(5), special, scale(3, 24), 150, "many optional members")
    rng = random.Random(6)
    sample = {"x": 7, "y": "yy", "z": True, "w": "ab"}
    for trial in range(scale(30, 300)):
        keys = sorted(rng.sample(range(n), rng.randint(0, min(n, 12))))
        if trial % 3 == 1 and len(keys) > 1:
            i = rng.randrange(len(keys) - 1)
            keys[i], keys[i + 1] = keys[i + 1], keys[i]  # out of declared order: never written
        if trial % 3 == 2 and keys:
            keys.append(keys[-1])  # a key twice
        text = "{" + ",".join(f'"k{k}":{json.dumps(list(sample.values())[k % 4])}' for k in keys) + "}"
        ids = qwen3_tokenizer.encode(text, add_special_tokens=False)
        verdicts = []
        for g in (expanded, linked):
            st_ = g.walk(ids)
            verdicts.append(st_ is not None and g.is_final(st_))
        assert verdicts[0] == verdicts[1], text
        assert verdicts[0] == (keys == sorted(set(keys))), text


def test_counted_items_and_repeated_members_are_definitions_with_the_same_masks(qwen3_tokenizer):
    """Linking, array items repeated LINK_REPEATS_FROM times or more are a definition (the root
    counts calls, not an item's states), and so is a member value with a repetition bounded that
    high (members spelled alike share it): the expansion's masks along random walks, and the
    same verdicts as jsonschema on item counts around minItems and maxItems."""
    from engine.json_schema.translate import LINK_REPEATS_FROM
    top = LINK_REPEATS_FROM + 4
    url = {"type": "string", "pattern": "^[a-z]{1,20}://[a-z.]{1,30}$"}
    schema = {"type": "object", "properties": {
        "ids": {"type": "array", "items": {"type": "string", "pattern": "^[0-9a-f]{6}$"}, "minItems": 2, "maxItems": top},
        "home": url, "docs": url, "wiki": url, "n": {"type": "integer"}}, "required": ["ids"],
        "additionalProperties": False}
    expanded = engine.compile_json_schema(qwen3_tokenizer, schema, link=False)
    linked = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    assert isinstance(linked, LinkedGrammar) and len(linked.definitions) == 3  # the item, the url, the list
    special = set(qwen3_tokenizer.all_special_ids)
    _same_masks(expanded, linked, random.Random(8), special, scale(3, 24), 150, "counted items")
    rng = random.Random(9)
    for count in (0, 1, 2, 3, top - 1, top, top + 1):
        value = {"ids": [f"{rng.randrange(16 ** 6):06x}" for _ in range(count)], "docs": "https://a.b", "n": 3}
        assert _verdict(qwen3_tokenizer, linked, schema, value) == (2 <= count <= top), count
        assert _verdict(qwen3_tokenizer, expanded, schema, value, masks=False) == (2 <= count <= top), count
    assert not _verdict(qwen3_tokenizer, linked, schema, {"ids": ["abcdef", "012345"], "home": "x://" + "a" * 31})


def _trees(depth):
    leaf = st.fixed_dictionaries({"name": st.text("abcé\"\\", max_size=5)})
    if depth == 0:
        return leaf
    return leaf | st.fixed_dictionaries({"name": st.text("ab", max_size=5)},
                                        optional={"kids": st.lists(_trees(depth - 1), max_size=4)})


@settings(max_examples=scale(40, 400), deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=_trees(6), drop=st.sampled_from([None, None, None, "name", "extra"]))
def test_recursive_trees_agree_with_jsonschema(qwen3_tokenizer, tree, drop):
    """Trees nest up to 7 levels (expansion would cut at max_depth=3); near misses: long names,
    four kids, a missing name, an undeclared key."""
    g = engine.compile_json_schema(qwen3_tokenizer, TREE, link=True)
    value = dict(tree)
    if drop == "name":
        value.pop("name")
    elif drop == "extra":
        value["x"] = 1
    _verdict(qwen3_tokenizer, g, TREE, value)


def _exprs(depth):
    num = st.integers(-60, 5010)
    if depth == 0:
        return num
    return num | st.fixed_dictionaries({"fn": st.sampled_from(["add", "neg", "mul"]),
                                        "args": st.lists(_exprs(depth - 1), max_size=3)},
                                       optional={"meta": st.none() | st.lists(st.integers(), max_size=2)
                                                 | st.dictionaries(st.text("k", max_size=2), st.booleans(), max_size=2)})


@settings(max_examples=scale(40, 400), deadline=None, suppress_health_check=list(HealthCheck))
@given(items=st.lists(_exprs(4), max_size=4))
def test_mutual_recursion_agrees_with_jsonschema(qwen3_tokenizer, items):
    """Definitions calling each other, numbers whose end is only known when the caller goes on,
    and an any-value leaf (one recursive definition when linked)."""
    g = engine.compile_json_schema(qwen3_tokenizer, MUTUAL, link=True)
    _verdict(qwen3_tokenizer, g, MUTUAL, items)


# a counted string (its bounds LINK_COUNT_FROM apart) under a recursive reference
COUNTED = {"$defs": {"n": {"type": "object", "properties": {
    "s": {"type": "string", "minLength": 3, "maxLength": 259}, "k": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}


@pytest.mark.parametrize("schema", [TREE, MUTUAL, COUNTED], ids=["tree", "mutual", "counted"])
def test_random_client_finishes_valid_in_every_budget(qwen3_tokenizer, schema):
    """A client that samples among allowed tokens (end-of-sequence when it is allowed, half the
    time; for the counted string, one of the longest allowed tokens most of the time, so strings
    reach their limit within the budget) ends complete and valid for every max_tokens from the
    minimum up."""
    g = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    eos = set(qwen3_tokenizer.all_special_ids) & set(g.vocab.eos_ids)
    rng = random.Random(3)
    validator = jsonschema.validators.validator_for(schema)(schema)
    lengths = np.array([len(t or b"") for t in g.vocab.texts])
    longest = 0
    for max_tokens in range(g.min_tokens, g.min_tokens + scale(12, 40)):
        for _ in range(scale(3, 10)):
            state, out = g.initial_state, []
            while True:
                allowed = _mask(g, state, max_tokens - len(out)).tolist()
                assert allowed, (max_tokens, out)
                ends = [t for t in allowed if t in eos]
                if ends and (len(ends) == len(allowed) or rng.random() < 0.5):
                    break
                options = [t for t in allowed if t not in eos]
                if schema is COUNTED and rng.random() < 0.8:
                    options = sorted(options, key=lambda t: -lengths[t])[:20]
                t = rng.choice(options)
                out.append(t)
                state = g.step(state, t, max_tokens - len(out))
                assert state is not None
            assert len(out) <= max_tokens and g.is_final(state)
            value = json.loads(qwen3_tokenizer.decode(out))
            validator.validate(value)
            while isinstance(value, dict):  # the counted strings' lengths, down the references
                longest = max(longest, len(value.get("s", "")))
                value = value.get("k")
    assert schema is not COUNTED or longest == 259, longest  # the strings reached their limit
    with pytest.raises(BudgetError):
        g.matcher(g.min_tokens - 1)


def test_a_recursion_the_expansion_would_cut_is_linked_by_default(qwen3_tokenizer):
    """Written out, a recursive reference stops at max_depth (3) and deeper trees are refused;
    by default such a schema is linked, and a tree seven levels deep passes, as jsonschema says."""
    expanded = engine.compile_json_schema(qwen3_tokenizer, TREE, link=False)
    assert schema_to_regex(TREE).cut > 0
    deep = {"name": "a"}
    for k in range(6):
        deep = {"name": "b" * (k % 4), "kids": [deep, {"name": "c"}][: 1 + k % 2]}
    jsonschema.validate(deep, TREE)
    ids = qwen3_tokenizer.encode(canonical_text(deep, TREE), add_special_tokens=False)
    assert expanded.walk(ids) is None
    g = engine.compile_json_schema(qwen3_tokenizer, TREE)
    assert isinstance(g, LinkedGrammar)
    assert _verdict(qwen3_tokenizer, g, TREE, deep)


def test_linking_compiles_what_expansion_refuses(qwen3_tokenizer):
    """Github_ultra o10335 (VS Code's debug protocol, 115 definitions): expanding its references
    passes the regex bound; linked, it compiles in strict mode and checks its instances."""
    row = next(r for r in _ref_rows() if r["id"] == "Github_ultra---o10335")
    with pytest.raises(SchemaError, match="expanding the references"):
        engine.compile_json_schema(qwen3_tokenizer, row["schema"], link=False)
    g = engine.compile_json_schema(qwen3_tokenizer, row["schema"])
    assert isinstance(g, LinkedGrammar) and len(g.definitions) > 100
    for test in row["tests"]:
        _verdict(qwen3_tokenizer, g, row["schema"], test["data"], masks=False)


def test_an_expansion_stops_at_the_probe_when_links_cost_far_less(qwen3_tokenizer, monkeypatch):
    """Github_ultra o10335's references expand past the bound and link to ~65 k characters: the
    expansion stops once its references have produced LINK_PROBE characters, never run to
    MAX_EXPANSION, and the grammar is the linked one it was before the probe (the same regexes).
    A schema whose links do not cost a SHRINK-th of the probe runs its expansion on (here with the
    probe lowered under it)."""
    from engine import grammar
    from engine.json_schema import schema_to_regex
    row = next(r for r in _ref_rows() if r["id"] == "Github_ultra---o10335")
    limits = []
    real = grammar.schema_to_regex

    def spy(*args, **kw):
        limits.append(kw.get("max_expansion"))
        return real(*args, **kw)
    monkeypatch.setattr(grammar, "schema_to_regex", spy)
    engine.clear_caches(vocabularies=False)
    g = engine.compile_json_schema(qwen3_tokenizer, row["schema"], timeout=None)
    assert isinstance(g, LinkedGrammar) and limits == [grammar.LINK_PROBE, None]
    linked = schema_to_regex(row["schema"], link=True, max_length=grammar.LINKED_MAX_LENGTH,
                             count_above=grammar.COUNT_ABOVE, link_count_from=max(grammar.LINK_COUNT_FROM,
                                                                                 g.vocab.longest))
    assert (g.regex, g.definitions) == (linked.regex, linked.definitions)
    with pytest.raises(SchemaError, match="expanding the references gives a regex over 1000 characters"):
        schema_to_regex(row["schema"], max_expansion=1000)
    monkeypatch.setattr(grammar, "LINK_PROBE", 20_000)  # under the links' cost times SHRINK: expand on
    limits.clear()
    engine.clear_caches(vocabularies=False)
    assert isinstance(engine.compile_json_schema(qwen3_tokenizer, row["schema"], timeout=None), LinkedGrammar)
    assert limits == [20_000, None, grammar.MAX_EXPANSION]


def test_generation_with_a_linked_grammar(tiny_model):
    """engine.generate with a linked grammar on a random-weight model: every output parses,
    validates and reports how it ended, in budgets from the minimum up."""
    import mlx.core as mx
    from mlx_lm.sample_utils import make_sampler
    model, tok = tiny_model
    g = engine.compile_json_schema(tok, MUTUAL, link=True)
    for max_tokens in range(g.min_tokens, g.min_tokens + scale(6, 30)):
        mx.random.seed(max_tokens)
        r = engine.generate(model, tok, "JSON:", response_format=g, max_tokens=max_tokens,
                            sampler=make_sampler(temp=1.0))
        assert r.finish_reason == "stop" and r.usage["completion_tokens"] <= max_tokens
        jsonschema.validate(json.loads(r.text), MUTUAL)
        assert r.errors == []


def _string_of(n: int, rng: random.Random) -> str:
    """``n`` characters mixing one-byte, escaped and multi-byte ones (as JSON text writes them)."""
    pieces = ["a", "é", "\n", "b", "€", '"', " ", "é", "🙂", "x"]
    return "".join(rng.choice(pieces) for _ in range(n))


def _string_schema(lo: int, hi: int) -> dict:
    return {"$defs": {"n": {"type": "object", "properties": {"s": {"type": "string", "minLength": lo, "maxLength": hi},
                                                             "k": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}


@pytest.mark.parametrize("lo,hi", [(0, 13), (5, 30), (20, 21)] + [(0, 40), (9, 17), (16, 24)][:scale(0, 3)])
def test_linked_strings_past_the_bound_are_chunked_exactly(qwen3_tokenizer, monkeypatch, lo, hi):
    """A linked grammar spells a string bound past its max_length as whole chunks (one definition)
    and a last partial one. With chunks of 8 characters past 12 (strings counted past 4), masks
    and verdicts agree with jsonschema at every length from below minLength to past maxLength
    (tokens that run from one chunk into the next included)."""
    from engine import grammar
    from engine.json_schema import translate
    monkeypatch.setattr(translate, "LINK_CHUNK", 8)
    monkeypatch.setattr(grammar, "LINKED_MAX_LENGTH", 12)
    monkeypatch.setattr(grammar, "COUNT_ABOVE", 4)
    schema = {**_string_schema(lo, hi), "$comment": "chunks of 8"}  # its own cache entry
    g = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    assert isinstance(g, LinkedGrammar) and any(d.endswith("{8,8}") for d in g.definitions)
    rng = random.Random(lo * 100 + hi)
    for n in range(max(0, lo - 2), hi + 3):
        for _ in range(2):
            assert _verdict(qwen3_tokenizer, g, schema, {"k": {"s": _string_of(n, rng)}}) == (lo <= n <= hi), n


def test_linked_strings_count_past_the_expansion_bound(qwen3_tokenizer):
    """A linked grammar counts a string's length exactly past LINKED_MAX_LENGTH too (its loop
    counted, as the expansion's is)."""
    from engine.grammar import LINKED_MAX_LENGTH
    from engine.json_schema.translate import LINK_CHUNK
    hi = LINKED_MAX_LENGTH + LINK_CHUNK + 7
    g = engine.compile_json_schema(qwen3_tokenizer, _string_schema(3, hi), link=True)
    assert isinstance(g, LinkedGrammar) and max(map(len, g.definitions)) < 1000  # no bound spelled at once
    rng = random.Random(11)
    for n in (2, 3, 40):
        assert _verdict(qwen3_tokenizer, g, _string_schema(3, hi), {"k": {"s": _string_of(n, rng)}}) == (n >= 3)
    # the walk only past the first chunk (the masks at chunk edges are the test above's)
    for n in (LINK_CHUNK, LINK_CHUNK + 1, hi, hi + 1):
        value = {"k": {"s": _string_of(n, rng)}}
        assert _verdict(qwen3_tokenizer, g, _string_schema(3, hi), value, masks=False) == (n <= hi)


@pytest.mark.parametrize("lo,hi", [(0, 300), (7, 263)])
def test_linked_long_strings_are_counted_with_the_masks_of_the_expansion(qwen3_tokenizer, lo, hi):
    """Bounds LINK_COUNT_FROM apart or more are counted in a linked grammar (a short definition,
    not 16 DFA states a character), as the expansion counts them: along texts that fill the
    string to its bound and one past (one-byte, escaped and multi-byte characters), every mask is
    the expanded grammar's, lists the tokens the automaton allows, and the verdicts are jsonschema's."""
    from engine.grammar import LINK_COUNT_FROM
    assert hi - lo >= LINK_COUNT_FROM
    schema = _string_schema(lo, hi)
    linked = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    expanded = engine.compile_json_schema(qwen3_tokenizer, schema, link=False)
    assert isinstance(linked, LinkedGrammar) and not isinstance(expanded, LinkedGrammar) and expanded.counters
    assert max(map(len, linked.definitions)) < 300
    rng = random.Random(hi)
    for n in (lo, hi - 1, hi, hi + 1):
        value = {"k": {"s": _string_of(n, rng)}}
        sl, se = linked.initial_state, expanded.initial_state
        for t in qwen3_tokenizer.encode(canonical_text(value, schema), add_special_tokens=False):
            ml = _mask(linked, sl, BIG)
            assert np.array_equal(ml, _mask(expanded, se, BIG)), n
            listed = np.zeros(linked.vocab.size, dtype=bool)
            listed[linked.automaton.allowed(sl, BIG)] = True
            listed[[i for i in linked.vocab.eos_ids if linked.is_final(sl)]] = True
            assert np.array_equal(ml, np.flatnonzero(listed)), n
            sl, se = linked.step(sl, t, BIG), expanded.step(se, t, BIG)
            assert (sl is None) == (se is None), n
            if sl is None:
                break
        assert _verdict(qwen3_tokenizer, linked, schema, value) == (lo <= n <= hi), n


@settings(max_examples=scale(6, 30), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lo=st.integers(0, 40), extra=st.integers(0, 40), data=st.data())
def test_linked_counted_strings_agree_with_jsonschema(qwen3_tokenizer, lo, extra, data):
    """Counted linked strings of drawn bounds (LINK_COUNT_FROM apart or more): drawn lengths around
    and between them, with drawn characters (one-byte, escaped, multi-byte), walk through masks
    that allow each token exactly when the step takes it, to jsonschema's verdict."""
    from engine.grammar import LINK_COUNT_FROM
    hi = lo + LINK_COUNT_FROM + extra
    schema = _string_schema(lo, hi)
    g = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    assert any("\\x{E000}-\\x{EFFF}]" in d and d.endswith(")*\"") for d in g.definitions)  # counted, not spelled
    rng = random.Random(data.draw(st.integers(0, 1 << 30)))
    n = data.draw(st.sampled_from([max(0, lo - 1), lo, hi, hi + 1]) | st.integers(lo, hi))
    assert _verdict(qwen3_tokenizer, g, schema, {"k": {"s": _string_of(n, rng)}}) == (lo <= n <= hi), n


@pytest.mark.parametrize("n", [0, 1, 39, 40, 41])
def test_linked_bounded_strings_are_definitions_of_their_own(qwen3_tokenizer, n):
    """In a linked grammar a plain string bounded above grammar.COUNT_ABOVE is one definition per
    bound (every value with that bound calls it); masks and verdicts stay exact at the bound,
    with tokens that straddle the call (the key's `":"` and the string's opening quote)."""
    schema = {"$defs": {"n": {"type": "object", "properties": {
        "s": {"type": "string", "minLength": 1, "maxLength": 40}, "t": {"type": "string", "minLength": 1, "maxLength": 40},
        "k": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"}
    g = engine.compile_json_schema(qwen3_tokenizer, schema, link=True)
    assert isinstance(g, LinkedGrammar)
    assert sum(d.endswith('{1,40}"') for d in g.definitions) == 1
    value = {"s": "x" * n, "k": {"t": "é" * n, "s": "ab"}}
    assert _verdict(qwen3_tokenizer, g, schema, value) == (1 <= n <= 40)


def test_link_decision_weighs_spelled_string_bounds(qwen3_tokenizer, monkeypatch):
    """The expansion counts strings bounded past COUNT_ABOVE beside its DFA, a linked grammar
    spells those whose bounds are less than LINK_COUNT_FROM apart (here raised past 1,000): a
    large schema whose linked regexes are short but spell long bounds compiles expanded, and the
    same schema with short bounds links."""
    from engine import grammar
    from engine.json_schema import schema_to_regex
    monkeypatch.setattr(grammar, "LINK_COUNT_FROM", 2000)

    def schema(bound):
        inner = {"type": "object", "properties": {"note": {"type": "string", "maxLength": bound},
                                                  "kind": {"enum": [f"kind-number-{k}" for k in range(30)]}}}
        return {"$defs": {"inner": inner}, "type": "object",
                "properties": {f"p{i}": {"$ref": "#/$defs/inner"} for i in range(10)}}
    long, short = schema(1000), schema(20)
    assert len(schema_to_regex(long, count_above=32).regex) > grammar.SHRINK_FROM
    assert not isinstance(engine.compile_json_schema(qwen3_tokenizer, long), LinkedGrammar)
    assert isinstance(engine.compile_json_schema(qwen3_tokenizer, short), LinkedGrammar)


def test_one_state_rows_walk_as_the_general_walk(qwen3_tokenizer):
    """A state with no class block reads its row in one compiled walk (kernels.walk_row): the same
    tokens, next states and boundary hits, in the same order, as token_edges' walk from it, for
    every state of every part of a linked schema and of its expansion."""
    from engine.automata.index import NO_EDGE_LIMIT, token_edges, token_row, token_row_hits, vocabulary_trie
    linked = engine.compile_json_schema(qwen3_tokenizer, MUTUAL, link=True)
    expanded = engine.compile_json_schema(qwen3_tokenizer, MUTUAL, link=False)
    trie = vocabulary_trie(linked.vocab)
    a = linked.automaton
    rows = 0
    for trans, boundary in zip(a.trans, a.boundary):
        for s in range(trans.shape[0] - 1):
            hits: list = []
            _, tok, dst, blocks = token_edges(trans, trie, NO_EDGE_LIMIT, (), np.array([s], dtype=np.int32), boundary,
                                              hits, twins=True)
            if blocks:
                continue
            hit_node = np.concatenate([h[1] for h in hits]).astype(np.int32) if hits else np.zeros(0, np.int32)
            hit_state = np.concatenate([h[2] for h in hits]).astype(np.int32) if hits else np.zeros(0, np.int32)
            block, *got = token_row_hits(trans, trie, s, boundary)
            assert block is None
            for want, have in zip((tok, dst, hit_node, hit_state), got):
                assert want.dtype == have.dtype and np.array_equal(want, have), (s, want[:8], have[:8])
            rows += 1
    trans = expanded.automaton.trans
    for s in range(trans.shape[0] - 1):
        _, tok, dst, blocks = token_edges(trans, trie, NO_EDGE_LIMIT, (), np.array([s], dtype=np.int32), twins=True)
        if not blocks:
            block, have_tok, have_dst = token_row(trans, trie, s)
            assert block is None and np.array_equal(tok, have_tok) and np.array_equal(dst, have_dst), s
            rows += 1
    assert rows > 50
