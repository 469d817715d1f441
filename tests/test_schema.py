"""The JSON-schema translator: exact ranges, strict refusals, lenient bookkeeping."""

import json
import math
import re
from decimal import Decimal

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from conftest import scale
from engine.errors import SchemaError
from engine.json_schema.translate import NEAR_MULTIPLES, Unsatisfiable, key_except
from engine.json_schema import schema_to_regex
from engine.regexes import py_regex as python_spelling


def py_regex(rust: str) -> re.Pattern:
    """Our regex run by Python's re, to check the translator apart from the automaton builder."""
    return re.compile(python_spelling(rust))

bound = st.one_of(st.none(), st.integers(-1200, 1200))


@settings(max_examples=150, deadline=None)
@given(lo=bound, hi=bound)
def test_integer_ranges_are_exact(lo, hi):
    schema = {"type": "integer"}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    if lo is not None and hi is not None and lo > hi:
        with pytest.raises(SchemaError):
            schema_to_regex(schema)
        return
    rx = py_regex(schema_to_regex(schema).regex)
    for n in range(-1500, 1501):
        inside = (lo is None or n >= lo) and (hi is None or n <= hi)
        assert bool(rx.fullmatch(str(n))) == inside, (schema, n)


@pytest.mark.parametrize("lo, hi", [(-10**15 + 1, 10**15 - 1), (0, 10**9), (7, 10**6 - 1), (-10**12, -3), (99, 10**5)])
def test_wide_integer_ranges_are_exact(lo, hi):
    """Bounds many digits wide (whole lengths share one branch): exact at and around every power of ten."""
    rx = py_regex(schema_to_regex({"type": "integer", "minimum": lo, "maximum": hi}).regex)
    for k in range(17):
        for n in (10**k - 1, 10**k, 10**k + 1, 2 * 10**k, lo - 1, lo, lo + 1, hi - 1, hi, hi + 1):
            for v in (n, -n):
                assert bool(rx.fullmatch(str(v))) == (lo <= v <= hi), (lo, hi, v)
    assert not rx.fullmatch("0" + str(hi)) and not rx.fullmatch("-0")


numbers = st.decimals(min_value=-300, max_value=300, places=3, allow_nan=False, allow_infinity=False)


@settings(max_examples=150, deadline=None)
@given(lo=st.one_of(st.none(), st.integers(-50, 50)), hi=st.one_of(st.none(), st.integers(-50, 50)),
       lo_ex=st.booleans(), hi_ex=st.booleans(), samples=st.lists(numbers, min_size=20, max_size=40))
def test_number_ranges_never_admit_outside_values(lo, hi, lo_ex, hi_ex, samples):
    schema = {"type": "number"}
    if lo is not None:
        schema["exclusiveMinimum" if lo_ex else "minimum"] = lo
    if hi is not None:
        schema["exclusiveMaximum" if hi_ex else "maximum"] = hi
    try:
        rx = py_regex(schema_to_regex(schema).regex)
    except SchemaError:
        assert lo is not None and hi is not None and (lo > hi or (lo == hi and (lo_ex or hi_ex)))
        return
    validator = jsonschema.Draft202012Validator(schema)
    for d in samples + [lo or 0, hi or 0]:
        for text in {str(d), format(d, "f")}:
            if rx.fullmatch(text):
                assert validator.is_valid(json.loads(text)), (schema, text)
    # every integer strictly inside the range is expressible
    if lo is not None and hi is not None:
        for n in range(lo + 1, hi):
            assert rx.fullmatch(str(n))


@pytest.mark.parametrize("schema,keyword,pointer", [
    ({"type": "string", "not": {"pattern": "^a"}}, "not", "#"),
    ({"type": "object", "properties": {"a": {"type": "string", "format": "color"}}}, "format", "#/properties/a"),
    ({"type": "array", "contains": {"type": "integer"}, "minItems": 2}, "contains", "#"),
    ({"type": "array", "uniqueItems": True, "minItems": 2}, "uniqueItems", "#"),
    ({"$ref": "#/$defs/missing"}, "$ref", "#"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "maximum", "#"),
    ({"type": "string", "pattern": "(a)\\1"}, "pattern", "#/pattern"),
    ({"type": "object", "properties": {"x": {"type": "integer", "multipleOf": 7}}}, "multipleOf", "#/properties/x"),
    ({"type": "object", "properties": {"a": False}, "required": ["a"]}, "false", "#/properties/a"),
    ({"$ref": "https://example.com/schema.json"}, "$ref", "#"),
    ({"oneOf": [{"type": "string"}, {"type": "string", "pattern": "^a"}]}, "oneOf", "#"),
])
def test_strict_refusals_name_keyword_and_pointer(schema, keyword, pointer):
    with pytest.raises(SchemaError) as e:
        schema_to_regex(schema)
    assert e.value.keyword == keyword
    assert e.value.pointer == pointer
    assert keyword in str(e.value)


def test_lenient_lists_what_it_does_not_enforce():
    t = schema_to_regex({"type": "array", "contains": True, "minItems": 2, "items": {"type": "integer", "multipleOf": 7}},
                        strict=False)
    assert ("#", "contains") in t.unenforced
    assert ("#/items", "multipleOf") in t.unenforced


CASES = [
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "required": ["b"]},
     ['{"b":"x"}', '{"a":1,"b":""}', '{ "a" : -3 , "b" : "\\u00e9\\n" }'], ['{"a":1}', '{"b":"x","a":1}', '{}', '{"b":"x"']),
    ({"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 3},
     ["[true,false]", "[true, true, false]"], ["[]", "[true]", "[true,true,true,true]"]),
    ({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "items": False},
     ["[]", "[1]", '[1,"a"]'], ['[1,"a",2]', '["a"]']),
    ({"type": "string", "minLength": 2, "maxLength": 3}, ['"ab"', '"abc"', '"\\"b"'], ['"a"', '"abcd"']),
    ({"type": "string", "pattern": "^[A-Z]{2}-\\d+$"}, ['"AB-12"'], ['"ab-12"', '"AB-"', '"xAB-1"']),
    ({"type": "string", "pattern": "ab"}, ['"xxabyy"', '"ab"'], ['"a b"']),
    ({"enum": ["red", 3, None, [1, {"k": "v"}]]}, ['"red"', "3", "null", '[1,{"k":"v"}]'], ['"blue"', "4"]),
    # near zero, each multiple jsonschema takes (it divides in floats: 0.07 / 0.01 is not an integer)
    ({"type": "number", "multipleOf": 0.01, "minimum": 0}, ["0", "12.5", "12.25", "0.75", "3.00", "3.14"],
     ["-1", "3.141", "1e5", "0.07", "0.29"]),
    # o46322's whole pounds: a number that is a multiple of 1 may be written 6000.0
    ({"type": "number", "multipleOf": 1, "minimum": 0, "maximum": 99999999}, ["6000", "6000.0", "0", "7.00"],
     ["6000.5", "-1", "100000000", "1e3"]),
    ({"anyOf": [{"type": "null"}, {"type": "string", "format": "date"}]}, ["null", '"2024-02-29"'], ['"2024-13-01"']),
    ({"type": "object", "additionalProperties": {"type": "integer"}}, ['{}', '{"x":1,"y":2}'], ['{"x":"a"}']),
    ({"type": "array", "uniqueItems": True, "items": {"type": "integer"}}, ["[]", "[3]"], ["[1,2]", "[1,1]"]),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}},
      "minProperties": 1, "maxProperties": 2}, ['{"a":1}', '{"a":1,"b":2}'], ['{}', '{"a":1,"b":2,"c":3}']),
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "dependentRequired": {"a": ["b"]}}, ['{}', '{"b":2}'], ['{"a":1}']),
    ({"type": "object", "properties": {"x_1": {"type": "integer"}, "y": {"type": "string"}},
      "patternProperties": {"^x_": {"minimum": 5}}}, ['{"x_1":5}', '{"y":"q"}'], ['{"x_1":4}']),
    ({"type": "object", "patternProperties": {".*": {"type": "string"}}},  # every key matches: free keys
     ['{}', '{"a":"x","Content-Type":"y"}'], ['{"a":1}', '{"a":"x","b":null}']),
    ({"type": "object", "required": ["k"]}, ['{"k":[1,{"a":null}]}'], ['{}']),
    ({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                {"properties": {"a": {"minimum": 10}}}]}, ['{"a":10}'], ['{"a":9}']),
    ({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
     ['{}', '{"next":{"next":{}}}'], ['{"next":1}']),
    # propertyNames: a declared name it refuses is never written (false refuses every name)
    ({"type": "object", "properties": {"a": {"type": "integer"}}, "propertyNames": False}, ['{}'], ['{"a":1}']),
    ({"type": "object", "properties": {"ab": {"type": "integer"}, "abc": {"type": "integer"}},
      "propertyNames": {"maxLength": 2}}, ['{}', '{"ab":1}'], ['{"abc":1}', '{"ab":1,"abc":2}']),
]


@pytest.mark.parametrize("schema,good,bad", CASES)
def test_translations_accept_and_reject(schema, good, bad):
    rx = py_regex(schema_to_regex(schema).regex)
    for text in good:
        assert rx.fullmatch(text), (text, schema)
        jsonschema.validate(json.loads(text), schema)
    for text in bad:
        assert not rx.fullmatch(text), (text, schema)


def test_a_required_name_that_property_names_refuses_is_unsatisfiable():
    with pytest.raises(Unsatisfiable, match="propertyNames"):
        schema_to_regex({"type": "object", "properties": {"a": {}}, "required": ["a"], "propertyNames": False})


def test_a_chain_of_distinct_refs_expands_in_full():
    """Only recursion is cut at max_depth; five nested distinct definitions keep their innermost value
    (Kubernetes schemas nest this way, and cutting them rejected valid objects)."""
    defs = {f"d{i}": {"type": "object", "properties": {"next": {"$ref": f"#/$defs/d{i + 1}"}}} for i in range(5)}
    defs["d5"] = {"type": "integer"}
    rx = py_regex(schema_to_regex({"$ref": "#/$defs/d0", "$defs": defs}).regex)
    assert rx.fullmatch('{"next":' * 5 + "7" + "}" * 5)
    assert not rx.fullmatch('{"next":' * 5 + '"x"' + "}" * 5)


NOT_CASES = [
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "not": {"required": ["b"]}},
     [{"a": 1}, {"a": 1, "b": "x"}, {}, 3]),
    ({"not": {"type": ["string", "null"]}}, [1, "x", None, [], {}, 2.5]),
    ({"not": {"type": "number"}}, [1, 2.5, "x", True]),
    ({"type": "object", "properties": {"x": {"not": {}}, "y": {"type": "integer"}}}, [{"y": 1}, {"x": 1}, {}]),
    ({"properties": {"foo": {"not": {}}}}, [{}, {"foo": 1}]),  # (undeclared keys are never written)
    ({"not": {"not": {"type": "integer"}}}, [1, "a", 1.5]),
    ({"properties": {"ios": {"type": "boolean"}, "android": {"type": "boolean"}},
      "not": {"anyOf": [{"required": ["ios"]}, {"required": ["android"]}]}}, [{}, {"ios": True}, {"android": False}, 1]),
    ({"type": "object", "properties": {"a": {}, "b": {}}, "required": ["a"], "not": {"required": ["a", "b"]}},
     [{"a": 1}, {"a": 1, "b": 2}]),
    ({"allOf": [{"not": {"type": "string"}}, {"not": {"type": "null"}}]}, ["a", None, 1, True]),
    ({"type": "object", "not": {"required": ["k"]}}, [{}, {"k": 1}]),
    ({"not": {"minLength": 2}}, ["", "a", "ab", "abc", 1, None]),
    ({"not": {"type": "string", "maxLength": 2}}, ["", "ab", "abc", 1, None, [], {}]),
    ({"type": "string", "not": {"minLength": 1, "maxLength": 3}}, ["", "a", "abc", "abcd"]),
    ({"allOf": [{"type": "string", "minLength": 3}, {"not": {"type": "string", "minLength": 5, "maxLength": 3}},
                {"not": {"type": "string", "maxLength": 0}}, {"maxLength": 3}]}, ["", "ab", "abc", "abcd"]),
    ({"allOf": [{"enum": [1, True, "x"]}, {"not": {"enum": [True]}}]}, [1, True, "x", 2]),
    ({"allOf": [{"enum": [{"foo": "bar", "fooooo": 2}, {"foo": "bar"}]},
                {"not": {"patternProperties": {"f.*o": {"type": "integer"}}}}]}, [{"foo": "bar", "fooooo": 2}, {"foo": "bar"}]),
]


@pytest.mark.parametrize("schema,instances", NOT_CASES)
def test_not_forms_agree_with_jsonschema(schema, instances):
    """The `not` forms written as other keywords: excluded types, forbidden keys, a schema that
    accepts everything, double negation, anyOf of these, two `not`s under allOf."""
    rx = re.compile(python_spelling(schema_to_regex(schema).regex), re.DOTALL)
    for value in instances:
        text = json.dumps(value, separators=(",", ":"))
        assert (rx.fullmatch(text) is not None) == jsonschema.Draft202012Validator(schema).is_valid(value), text


def test_not_of_everything_drops_an_optional_key_and_refuses_a_required_one():
    assert '"x"' not in schema_to_regex({"type": "object", "properties": {"x": {"not": {}}, "y": {}}}).regex
    with pytest.raises(SchemaError, match="not"):
        schema_to_regex({"type": "object", "properties": {"x": {"not": {}}}, "required": ["x"]})


ONE_OF_CASES = [
    ({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
      "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, [{"a": 1}, {"b": 1}, {"a": 1, "b": 2}, {}]),
    ({"type": "object", "properties": {"a": {}, "b": {}, "c": {}}, "required": ["a"],
      "oneOf": [{"required": ["b"]}, {"required": ["c"]}]}, [{"a": 1, "b": 1}, {"a": 1, "c": 1}, {"a": 1, "b": 1, "c": 1}, {"a": 1}]),
    ({"$defs": {"s": {"type": "string"}}, "oneOf": [{"$ref": "#/$defs/s"}, {"type": "integer"}]}, ["x", 1, None]),
    # told apart by the constants of a key both require (the base requires it)
    ({"type": "object", "required": ["kind"], "properties": {"kind": {"type": "string"}, "n": {}},
      "oneOf": [{"properties": {"kind": {"enum": ["a"]}, "n": {"type": "string"}}},
                {"properties": {"kind": {"enum": ["b", "c"]}, "n": {"type": "boolean"}}}]},
     [{"kind": "a", "n": "x"}, {"kind": "b", "n": True}, {"kind": "a", "n": True}, {"kind": "d"}, {}]),
    # told apart by a key one requires and the other's closed key set leaves out
    ({"oneOf": [{"type": "object", "properties": {"a": {}, "b": {}}, "additionalProperties": False, "required": ["a"]},
                {"type": "object", "properties": {"a": {}, "c": {}}, "required": ["c"]}]},
     [{"a": 1}, {"a": 1, "b": 2}, {"c": 1}, {"a": 1, "c": 1}, {"b": 1}, {}]),
    # a branch's type beside a reference, an enum against a type
    ({"$defs": {"o": {"type": "object"}}, "oneOf": [{"type": "object", "$ref": "#/$defs/o"}, {"type": "array"}]},
     [{}, [], 1]),
    ({"oneOf": [{"type": "boolean"}, {"type": "string", "enum": ["table", "inline"]}]}, [True, "table", "x", 1]),
    ({"oneOf": [{"enum": [1, 2]}, {"const": 1.0}]}, [1, 1.0, 2, 3]),  # 1 and 1.0 are one value: only 2
    ({"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]}, ["", "abc", "abcd", 1]),  # one value, both branches: never written
]


@pytest.mark.parametrize("schema,instances", ONE_OF_CASES)
def test_overlapping_one_of_as_each_branch_without_the_others(schema, instances):
    """oneOf whose branches overlap is written as each branch and not the others, when that `not`
    is exact (branches told apart by required keys); branches that are references are looked
    through to tell them apart by type."""
    rx = re.compile(python_spelling(schema_to_regex(schema).regex), re.DOTALL)
    for value in instances:
        text = json.dumps(value, separators=(",", ":"))
        assert (rx.fullmatch(text) is not None) == jsonschema.Draft202012Validator(schema).is_valid(value), text


ANNOTATION_AND_LENGTH_CASES = [
    ({"type": "string", "format": "path"}, ["", "a/b", 1]),  # a format no validator knows: an annotation
    ({"type": "string", "format": "byte"}, ["", "QUJD", "QUI=", "QQ==", "QUJ", "Q===", "QU I="]),
    ({"type": "string", "maxLength": 12, "pattern": "^[a-zA-Z0-9_.]+$"}, ["", "a", "a" * 12, "a" * 13, "a b"]),
    ({"type": "string", "minLength": 4, "maxLength": 5, "pattern": "^ab[0-9]*$"},
     ["ab", "ab1", "ab12", "ab123", "ab1234", "abx1"]),
    ({"type": "object", "properties": {"k": {"type": "object", "enum": ["A", "B"]}, "n": {"type": "integer"}}},
     [{}, {"n": 1}, {"k": "A"}, {"k": {}}]),  # no enum value is an object: k is never written
]


@pytest.mark.parametrize("schema,instances", ANNOTATION_AND_LENGTH_CASES)
def test_unknown_formats_pattern_lengths_and_empty_enums_agree_with_jsonschema(schema, instances):
    """An unknown format is an annotation; OpenAPI's ``byte`` is base64; length bounds fold into an
    anchored pattern of one repeated class; an enum no value of which fits drops its optional key."""
    rx = re.compile(python_spelling(schema_to_regex(schema).regex), re.DOTALL)
    checker = jsonschema.Draft202012Validator(schema, format_checker=jsonschema.FormatChecker())
    for value in instances:
        text = json.dumps(value, separators=(",", ":"))
        expected = checker.is_valid(value)
        if schema.get("format") == "byte" and isinstance(value, str):  # jsonschema does not know it
            expected = bool(re.fullmatch(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?", value))
        assert (rx.fullmatch(text) is not None) == expected, text


def test_length_bounds_beside_other_patterns_are_still_refused():
    with pytest.raises(SchemaError, match="pattern"):
        schema_to_regex({"type": "string", "maxLength": 32, "pattern": "^(ab)+$"})
    with pytest.raises(SchemaError, match="pattern"):
        schema_to_regex({"type": "string", "maxLength": 3, "pattern": "ab"})


@settings(max_examples=150, deadline=None)
@given(pieces=st.lists(st.sampled_from(["a", "[0-9]", ".", "b+", "[a-c]*", "\\d{2,4}", "(x?)", ".*", "\\."]),
                       min_size=1, max_size=6),
       lo=st.integers(0, 12), span=st.integers(0, 12), data=st.data())
def test_length_bounds_shared_among_pattern_repeats(pieces, lo, span, data):
    """An anchored pattern of one-character items and repeats with minLength/maxLength: the
    length is shared among the repeats (exact for one repeat, a narrowing for more), so every
    string drawn from the regex has the pattern and the lengths (jsonschema agrees)."""
    schema = {"type": "string", "pattern": "^" + "".join(pieces) + "$", "minLength": lo, "maxLength": lo + span}
    try:
        rx = py_regex(schema_to_regex(schema).regex)
    except SchemaError as e:
        assert e.keyword in ("maxLength", "minLength"), e  # no string has the pattern and the lengths
        return
    for _ in range(5):
        text = data.draw(st.from_regex(rx, fullmatch=True))
        jsonschema.validate(json.loads(text), schema)


@pytest.mark.parametrize("n", range(1, 12))
def test_member_lists_are_every_ordered_choice_and_grow_linearly(n):
    """Object members in declared order, optional ones left out at will, commas between: the
    regex accepts exactly those lists (checked against all 2^n choices and misplaced commas), and
    no member is written more than three times (the earlier form wrote the k-th member k times)."""
    import itertools
    import random
    from engine.json_schema.translate import _member_list
    members = [chr(97 + i) for i in range(n)]
    patterns = itertools.product([False, True], repeat=n) if n <= 5 else \
        [[r.random() < 0.3 for _ in range(n)] for r in [random.Random(n)] for _ in range(12)] + [[False] * n]
    for required in patterns:
        regex = _member_list(members, list(required), ",")
        assert all(regex.count(m) <= 3 for m in members), regex
        rx = re.compile(regex)
        for mask in itertools.product([0, 1], repeat=n):
            text = ",".join(m for m, keep in zip(members, mask) if keep)
            assert bool(rx.fullmatch(text)) == all(keep or not r for keep, r in zip(mask, required)), (required, text)
        for text in (",a", "a,", "a,,b", "b,a"):
            assert not rx.fullmatch(text)


def test_lenient_writes_references_loosely_past_the_size_bound():
    """A reference graph that expands past the regex bound: strict mode refuses it naming $ref;
    lenient mode writes the deeper references as free values of their declared types, lists
    them as unenforced, and stays within the bound."""
    defs = {f"d{i}": {"type": "object", "properties": {f"p{j}": {"$ref": f"#/$defs/d{i + 1}"} for j in range(6)}}
            for i in range(8)}
    defs["d8"] = {"type": "object", "properties": {"s": {"type": "string"}}}
    schema = {"$defs": defs, "$ref": "#/$defs/d0"}
    with pytest.raises(SchemaError) as e:
        schema_to_regex(schema, max_chars=200_000)
    assert e.value.keyword == "$ref"
    t = schema_to_regex(schema, strict=False, max_chars=200_000)
    assert len(t.regex) <= 200_000
    assert any(k == "$ref" for _, k in t.unenforced)
    rx = re.compile(python_spelling(t.regex), re.DOTALL)
    assert rx.fullmatch('{"p0":{"p1":{}}}') and not rx.fullmatch('{"p0":3}')


KEYS = ["a", "b", "c"]
# (text without private-use characters: the engine's symbols live there, and strings never hold them)
VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 5),
                   st.text(st.characters(blacklist_categories=("Cs", "Co")), max_size=3), st.just([1]), st.just({}))
TYPES = ["object", "array", "string", "number", "integer", "boolean", "null"]


@st.composite
def negated_schemas(draw):
    """Object schemas over three keys with a `not` of a form written exactly (or a string length
    range), a oneOf whose branches differ by required keys, closed key sets, constants or types,
    or an allOf that lists the values."""
    required = draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=2))
    # typed: an untyped one leaves other types free (test_conditions_and_untyped_keywords_... checks those)
    base = {"type": draw(st.sampled_from([["object"], ["object", "null"], ["object", "integer", "string"]])),
            "properties": {k: {} for k in KEYS}, "required": required}
    form = draw(st.sampled_from(["required", "anyOf", "type", "oneOf", "branches", "length", "listed"]))
    if form == "required":
        base["not"] = {"required": draw(st.lists(st.sampled_from(KEYS), unique=True, min_size=1, max_size=3))}
    elif form == "anyOf":
        base["not"] = {"anyOf": [{"required": [k]} for k in draw(st.lists(st.sampled_from(KEYS), unique=True, min_size=1))]}
    elif form == "type":
        base["not"] = {"type": draw(st.lists(st.sampled_from(TYPES), unique=True, min_size=1, max_size=3))}
    elif form == "oneOf":
        base["oneOf"] = [{"required": draw(st.lists(st.sampled_from(KEYS), unique=True, min_size=1, max_size=2))}
                         for _ in range(draw(st.integers(2, 3)))]
    elif form == "branches":  # told apart (or not) by closed key sets, constants of required keys, types
        base["oneOf"] = [draw(one_of_branch()) for _ in range(draw(st.integers(2, 3)))]
    elif form == "length":
        lo, hi = draw(st.integers(0, 3)), draw(st.integers(0, 3))
        base["not"] = {"minLength": lo, "maxLength": hi, **({"type": "string"} if draw(st.booleans()) else {})}
    else:
        base["allOf"] = [{"enum": draw(st.lists(st.sampled_from(LISTED), unique_by=json.dumps, min_size=1, max_size=4))}]
    return base


LISTED = [None, 1, "x", "", {}, {"a": 1}, {"a": 1, "b": None}, {"c": "x"}, [1]]


@st.composite
def one_of_branch(draw):
    b = {}
    if draw(st.booleans()):
        b["type"] = draw(st.sampled_from(["object", "integer", "string", ["object", "null"]]))
    if draw(st.booleans()):
        b["required"] = draw(st.lists(st.sampled_from(KEYS), unique=True, min_size=1, max_size=2))
    if draw(st.booleans()):
        b["properties"] = {k: {"enum": draw(st.lists(st.integers(-2, 2), unique=True, min_size=1, max_size=2))}
                           for k in draw(st.lists(st.sampled_from(KEYS), unique=True, min_size=1, max_size=2))}
    if draw(st.booleans()):
        b["additionalProperties"] = False
        b["properties"] = {**{k: {} for k in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=2))},
                           **b.get("properties", {})}
    return b


@settings(max_examples=scale(120, 600), deadline=None)
@given(schema=negated_schemas(), data=st.data())
def test_not_and_one_of_agree_with_jsonschema(schema, data):
    """Whatever the translator writes for `not` and overlapping `oneOf` accepts exactly what
    jsonschema accepts, on objects with any subset of the keys (in schema order) and on other
    values; a schema it refuses is refused with the keyword named."""
    try:
        rx = re.compile(python_spelling(schema_to_regex(schema).regex), re.DOTALL)
    except SchemaError as e:
        assert e.keyword in ("not", "oneOf", "anyOf", "additionalProperties", "allOf", "false"), e
        return
    for _ in range(8):
        keys = data.draw(st.lists(st.sampled_from(KEYS), unique=True))
        pick = data.draw(st.integers(0, 5))
        value = ({k: data.draw(VALUES | st.integers(-2, 2)) for k in KEYS if k in keys} if pick > 1
                 else data.draw(st.sampled_from(LISTED)) if pick == 1 else data.draw(VALUES))
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))  # as the engine writes JSON
        assert (rx.fullmatch(text) is not None) == jsonschema.Draft202012Validator(schema).is_valid(value), (schema, text)


SMALL = st.one_of(st.just(True), st.just(False), st.builds(lambda k: {"required": [k]}, st.sampled_from(KEYS)),
                  st.builds(lambda t: {"type": t}, st.sampled_from(TYPES)),
                  st.builds(lambda n: {"maxLength": n}, st.integers(0, 3)),
                  st.builds(lambda x: {"minimum": x}, st.integers(-3, 3)),
                  st.builds(lambda k, t: {"properties": {k: {"type": t}}}, st.sampled_from(KEYS), st.sampled_from(TYPES)))
CONDITION = st.one_of(st.builds(lambda k: {"required": [k]}, st.sampled_from(KEYS)),
                      st.builds(lambda t: {"type": t}, st.sampled_from(["string", "object", "null", "number"])),
                      st.builds(lambda n: {"minLength": n}, st.integers(0, 3)),
                      st.builds(lambda k, x: {k: x}, st.sampled_from(["minimum", "exclusiveMaximum"]), st.integers(-3, 3)))
# a dependent schema that every non-object passes (dependentSchemas ignores non-objects; the
# translation applies it as 'then' to them, which is exact only for such schemas)
DEPENDENT = st.one_of(st.builds(lambda k: {"required": [k]}, st.sampled_from(KEYS)),
                      st.builds(lambda k, t: {"properties": {k: {"type": t}}}, st.sampled_from(KEYS), st.sampled_from(TYPES)),
                      st.builds(lambda ks: {"required": ks}, st.lists(st.sampled_from(KEYS), unique=True, min_size=2)))


@st.composite
def conditional_schemas(draw):
    """Untyped schemas (keywords of one type leave the other types free) with if/then/else,
    dependentSchemas, or a `not` of number bounds; objects over three keys in schema order."""
    base = {"properties": {k: {} for k in KEYS}}
    for kw, strategy in (("required", st.lists(st.sampled_from(KEYS), unique=True, max_size=1)),
                         ("minLength", st.integers(1, 2)), ("maximum", st.integers(-2, 2))):
        if draw(st.booleans()):
            base[kw] = draw(strategy)
    form = draw(st.sampled_from(["if", "if", "dependent", "not"]))
    if form == "if":
        base["if"] = draw(CONDITION)
        for kw in ("then", "else"):
            if draw(st.booleans()):
                base[kw] = draw(SMALL)
    elif form == "dependent":
        base["dependentSchemas"] = {k: draw(DEPENDENT) for k in draw(st.lists(st.sampled_from(KEYS), unique=True,
                                                                                  min_size=1, max_size=2))}
    else:
        base["not"] = {k: draw(st.integers(-3, 3)) for k in draw(st.lists(st.sampled_from(
            ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"]), unique=True, min_size=1, max_size=2))}
        if draw(st.booleans()):
            base["not"]["type"] = "number"
    return base


def _plain_number(x: float) -> float | int:
    """A number as the engine writes it: integers without a fraction (1, not 1.0: jsonschema
    counts 1.0 as an integer), no negative zero (narrowings of their own)."""
    x = round(x, 1) + 0.0
    return int(x) if x == int(x) else x


@settings(max_examples=scale(60, 600), deadline=None)
@given(schema=conditional_schemas(), data=st.data())
def test_conditions_and_untyped_keywords_agree_with_jsonschema(schema, data):
    """if/then/else (as a choice: if and then, or not-if and else), dependentSchemas (if the key
    is present, then), a `not` of number bounds, and untyped keywords that leave other types
    free: the regex accepts exactly what jsonschema accepts, on scalars, [1], {} and objects over
    the keys in schema order; a schema it refuses names the keyword."""
    def value():
        keys = data.draw(st.lists(st.sampled_from(KEYS), unique=True))
        return ({k: data.draw(VALUES) for k in KEYS if k in keys} if data.draw(st.booleans())
                else data.draw(VALUES | st.floats(-4, 4, allow_nan=False).map(_plain_number)))

    _exactly_as_jsonschema(schema, (value() for _ in range(10)), ("if", "dependentSchemas", "not"))


def _exactly_as_jsonschema(schema, values, refusals: tuple[str, ...]) -> None:
    """The schema's regex accepts each of ``values`` (compact JSON) exactly when jsonschema does
    (none when no value satisfies the schema); a refusal names one of ``refusals``."""
    try:
        rx = re.compile(python_spelling(schema_to_regex(schema).regex), re.DOTALL)
    except Unsatisfiable:
        rx = None
    except SchemaError as e:
        assert e.keyword in refusals, e
        return
    for value in values:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        accepted = rx is not None and rx.fullmatch(text) is not None
        assert accepted == jsonschema.Draft202012Validator(schema).is_valid(value), (schema, text)


ITEM = st.one_of(st.builds(lambda t: {"type": t}, st.sampled_from(["integer", "string", "null", ["integer", "null"]])),
                 st.builds(lambda x: {"minimum": x}, st.integers(0, 3)), st.just(True), st.just(False))


@st.composite
def containing_schemas(draw):
    schema = {"contains": draw(ITEM)}
    if draw(st.booleans()):
        schema["type"] = "array"
    if draw(st.booleans()):
        schema["items"] = draw(ITEM)
    for kw in ("minContains", "maxContains"):
        if draw(st.booleans()):
            schema[kw] = draw(st.integers(0, 3))
    return schema


@settings(max_examples=scale(60, 400), deadline=None)
@given(schema=containing_schemas(), data=st.data())
def test_contains_agrees_with_jsonschema(schema, data):
    """contains with minContains/maxContains (the other items written as 'items and not contains'
    under maxContains) accepts exactly what jsonschema accepts on arrays of scalars and on other
    values; a refusal names the keyword."""
    arrays = st.lists(st.sampled_from([0, 1, 2, 5, None, "x", True]), max_size=5)
    _exactly_as_jsonschema(schema, (data.draw(arrays | VALUES) for _ in range(12)), ("maxContains", "not"))


@st.composite
def unevaluated_schemas(draw):
    """unevaluatedProperties/unevaluatedItems beside a schema's own keywords, or beside an allOf
    (where the translator must refuse rather than read it as additionalProperties)."""
    if draw(st.booleans()):
        schema = {"properties": {k: {} for k in draw(st.lists(st.sampled_from(KEYS), unique=True, max_size=2))},
                  "unevaluatedProperties": draw(ITEM)}
        if draw(st.booleans()):
            schema["additionalProperties"] = draw(ITEM)
    else:
        schema = {"prefixItems": [draw(ITEM) for _ in range(draw(st.integers(0, 2)))], "unevaluatedItems": draw(ITEM)}
    if draw(st.booleans()):
        schema = {"allOf": [{"properties": {"c": {}}, "prefixItems": [True]}], **schema}
    return schema


@settings(max_examples=scale(60, 400), deadline=None)
@given(schema=unevaluated_schemas(), data=st.data())
def test_unevaluated_beside_own_keywords_agrees_with_jsonschema(schema, data):
    """Beside a schema's own keywords only, unevaluatedProperties/Items mean what the properties or
    items those keywords leave must be, and are written so: exact on objects over the keys (in
    schema order), arrays of scalars and other values; beside an applicator they are refused."""
    try:
        rx = re.compile(python_spelling(schema_to_regex(schema).regex), re.DOTALL)
    except Unsatisfiable:
        rx = None
    except SchemaError as e:
        assert "allOf" in schema and e.keyword in ("unevaluatedProperties", "unevaluatedItems"), e
        return
    assert "allOf" not in schema, "unevaluated* beside allOf must be refused"
    for _ in range(12):
        keys = data.draw(st.lists(st.sampled_from(KEYS), unique=True))
        value = data.draw(st.one_of(st.just({k: data.draw(VALUES) for k in KEYS if k in keys}),
                                    st.lists(st.sampled_from([0, 1, 2, 5, None, "x", True]), max_size=4), VALUES))
        if isinstance(value, dict):  # in schema order: the declared keys first
            declared = list(schema.get("properties", {}))
            value = {k: value[k] for k in sorted(value, key=lambda k: (k not in declared, declared.index(k) if k in declared else 0))}
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        accepted = rx is not None and rx.fullmatch(text) is not None
        if accepted:
            assert jsonschema.Draft202012Validator(schema).is_valid(value), (schema, text)
        elif jsonschema.Draft202012Validator(schema).is_valid(value):
            # the one narrowing: undeclared keys are not written (extra_keys=False)
            assert isinstance(value, dict) and set(value) - set(schema.get("properties", {})), (schema, text)


def test_dependent_keys_are_written_after_the_key_they_need():
    """An optional key that needs one optional key (and required ones) is written right after it;
    one that needs two optional keys, or a key that is itself dependent, is never written. Over
    every set of keys, in every order, the regex never accepts an object jsonschema refuses, and
    accepts every valid set written in its order (the dropped keys aside)."""
    import itertools
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcdefg"}, "required": ["c"],
              "dependentRequired": {"d": ["b"], "e": ["b", "c"], "f": ["a", "b"], "g": ["d"]}}
    rx = py_regex(schema_to_regex(schema).regex)
    order = "abdecfg"  # d and e follow b
    for n in range(0, 5):
        for keys in itertools.permutations("abcdefg", n):
            text = "{" + ",".join(f'"{k}":1' for k in keys) + "}"
            valid = jsonschema.Draft202012Validator(schema).is_valid(json.loads(text))
            if rx.fullmatch(text):
                assert valid, text
            elif valid and list(keys) == sorted(keys, key=order.index) and not set(keys) & {"f", "g"}:
                raise AssertionError(f"{text} is valid and in order, but refused")
    assert rx.fullmatch('{"b":1,"d":1,"e":1,"c":1}') and not rx.fullmatch('{"d":1,"c":1}')



@pytest.mark.parametrize("min_p,max_p", [(1, None), (2, None), (3, 4)])
def test_free_form_min_properties_writes_distinct_keys(min_p, max_p):
    """A free-form object with minProperties writes min_p keys that differ first (one key of any
    spelling when min_p is 1): the i-th of i characters, the last no digit, or ending in the digit
    i; then any more: repeated keys, escapes or look-alike keys past those can never leave fewer
    than min_p properties."""
    import itertools
    schema = {"type": "object", "additionalProperties": {"type": "integer"}, "minProperties": min_p}
    if max_p:
        schema["maxProperties"] = max_p
    rx = py_regex(schema_to_regex(schema).regex)
    keys = ["a", "b", "bb", "\\u0061", "ccc", "dd", "", "1", "x1", "\\u0031", "a\\u0031", "y2", "22", "1\\u0032"]
    accepted = 0
    for n in range(0, 6):
        for combo in itertools.product(keys, repeat=n) if n < 4 else itertools.islice(itertools.product(keys, repeat=n), 4000):
            text = "{" + ",".join(f'"{k}":1' for k in combo) + "}"
            if rx.fullmatch(text):
                accepted += 1
                jsonschema.validate(json.loads(text), schema)
    assert accepted > 0
    assert rx.fullmatch("{" + ",".join(['"a":1', '"bb":2', '"ccc":3'][:min_p]) + "}")
    # numbered keys of one length, as people write them
    assert rx.fullmatch("{" + ",".join(['"feed1":1', '"feed2":2', '"feed3":3'][:min_p]) + "}")



def test_all_of_branches_merge_their_members_exactly():
    """allOf branches with their own properties and additionalProperties (false, true or a
    schema): a key takes every branch's schema for it (its property there, else that branch's
    additionalProperties) and a key some branch closes out is never written. Over every pair of
    such branches, every object over the keys in write order gets jsonschema's verdict."""
    import itertools
    kinds = {"i": {"type": "integer"}, "s": {"type": "string"}}
    branch_shapes = []
    for keys in ("a", "ab", "bc"):
        for extra in (True, False, {"type": "integer"}):
            for kind in "is":
                b = {"type": "object", "properties": {k: kinds[kind if k != "b" else "i"] for k in keys}}
                if extra is not True:
                    b["additionalProperties"] = extra
                branch_shapes.append(b)
    values = [1, "x"]
    for b1, b2 in itertools.combinations(branch_shapes, 2):
        schema = {"allOf": [b1, b2]}
        rx = py_regex(schema_to_regex(schema).regex)
        validator = jsonschema.Draft202012Validator(schema)
        order = list(dict.fromkeys([*b1["properties"], *b2["properties"]]))
        for n in range(len(order) + 1):
            for keys in itertools.combinations(order, n):
                for vals in itertools.product(values, repeat=n):
                    value = dict(zip(keys, vals))
                    text = json.dumps(value, separators=(",", ":"))
                    assert bool(rx.fullmatch(text)) == validator.is_valid(value), (schema, text)


def test_one_of_reads_an_all_of_branch_as_its_merge():
    """A oneOf branch that is an allOf (a reference plus narrowing) is proved apart from the
    others by the merge of its parts: here each branch requires a different constant type."""
    defs = {"section": {"type": "object", "properties": {"type": {"const": "section"}, "name": {"type": "string"}},
                        "required": ["type", "name"], "additionalProperties": False},
            "ref": {"type": "object", "properties": {"type": {"const": "reference"}, "id": {"type": "string"}},
                    "required": ["type"], "additionalProperties": False}}
    schema = {"$defs": defs, "oneOf": [{"$ref": "#/$defs/section"},
                                       {"allOf": [{"$ref": "#/$defs/ref"}, {"properties": {"id": {"maxLength": 3}}}]}]}
    rx = py_regex(schema_to_regex(schema).regex)
    for value in [{"type": "section", "name": "a"}, {"type": "reference"}, {"type": "reference", "id": "abc"},
                  {"type": "reference", "id": "abcd"}, {"type": "section"}, {"type": "other", "name": "a"}]:
        text = json.dumps(value, separators=(",", ":"))
        assert bool(rx.fullmatch(text)) == jsonschema.Draft202012Validator(schema).is_valid(value), text


def test_overlapping_object_branches_are_narrowed_apart_by_keys():
    """oneOf of object branches that overlap (a card, a stored card requiring one more key, a
    token): each is written without a key that every other overlapping branch requires and it
    does not (so those fail), the stored card, which needs every key of the card, not at all.
    Every object over the keys, in write order, that the regex takes matches exactly one branch;
    the card without an id and the token are taken. Draft 4 (no const) reads the left-out keys too."""
    import itertools
    card = {"type": "object", "properties": {k: {"type": "string"} for k in ("id", "number", "type")},
            "required": ["number", "type"]}
    stored = {**card, "required": ["id", "number", "type"]}
    token = {"type": "object", "properties": {"cc": {"type": "string"}, "type": {"type": "string"}}, "required": ["cc"]}
    for extra in ({}, {"$schema": "http://json-schema.org/draft-04/schema#"}):
        schema = {**extra, "oneOf": [card, stored, token]}
        rx = py_regex(schema_to_regex(schema).regex)
        validator = jsonschema.validators.validator_for(schema)(schema)
        for n in range(5):
            for keys in itertools.combinations(["id", "number", "type", "cc"], n):
                for order in itertools.permutations(keys):
                    value = {k: "x" for k in order}
                    if rx.fullmatch(json.dumps(value, separators=(",", ":"))):
                        assert validator.is_valid(value), value
        assert rx.fullmatch('{"number":"1","type":"v"}') and rx.fullmatch('{"cc":"1"}')
        assert not rx.fullmatch('{"id":"1","number":"1","type":"v"}')


@settings(max_examples=60, deadline=None)
@given(decimals=st.integers(1, 3), lo=st.one_of(st.none(), st.integers(-10**6, 10**6)),
       span=st.one_of(st.none(), st.integers(0, 10**6)), data=st.data())
def test_decimal_multiples_pass_jsonschema_float_division(decimals, lo, span, data):
    """multipleOf 10**-k: every number drawn from the regex passes jsonschema, which divides in
    floats (so 0.07 is not a multiple of 0.01 there): only multiples a float holds exactly are
    written, under 2**53 once scaled."""
    schema = {"type": "number", "multipleOf": float(f"1e-{decimals}")}
    if lo is not None:
        schema["minimum"] = lo
    if span is not None:
        schema["maximum"] = (lo or 0) + span
    rx = py_regex(schema_to_regex(schema).regex)
    for _ in range(10):
        jsonschema.validate(json.loads(data.draw(st.from_regex(rx, fullmatch=True))), schema)



def _number_texts(value: float | int) -> list[str]:
    """Spellings of a number as a model may write it: shortest, fixed to a few places, trailing zeros."""
    texts = {repr(value), str(int(value)) if value == int(value) else repr(value)}
    texts |= {f"{value:.{k}f}" for k in range(5)}
    return [t for t in texts if not t.startswith("-0") or t.strip("-0.")]  # "-0.0": a narrowing


@settings(max_examples=120, deadline=None)
@given(step=st.sampled_from([0.01, 0.05, 0.1, 0.25, 2.5, 0.001, 1.5, 3, 7, 0.3]),
       integer=st.booleans(), lo=st.integers(-500, 500), span=st.integers(0, 200),
       exclusive=st.booleans(), data=st.data())
def test_bounded_multiples_agree_with_jsonschema(step, integer, lo, span, exclusive, data):
    """Between two bounds every multiple jsonschema accepts is written and no other number: it
    divides a float step in floats, so 38.1 is a multiple of 0.01 there and 0.07 is not."""
    scale = step / 100 if isinstance(step, float) else 1
    schema = {"type": "integer" if integer else "number", "multipleOf": step,
              "minimum": round(lo * scale * 10, 6), ("exclusiveMaximum" if exclusive else "maximum"): round((lo + span) * scale * 10, 6)}
    try:
        rx = re.compile(py_regex(schema_to_regex(schema).regex))
    except Unsatisfiable:  # no multiple written in the step's decimals passes (0.3 / 0.05 is 5.999...)
        lo_v, hi_v, exact = schema["minimum"], (lo + span) * scale * 10, Decimal(str(step))
        assert not any(jsonschema.Draft202012Validator(schema).is_valid(json.loads(str(k * exact)))
                       for k in range(math.floor(lo_v / step) - 1, math.ceil(hi_v / step) + 2))
        return
    validator = jsonschema.Draft202012Validator(schema)
    lo_v, hi_v = schema["minimum"], (lo + span) * scale * 10
    for _ in range(40):
        k = data.draw(st.integers(math.floor(lo_v / step) - 2, math.ceil(hi_v / step) + 2))
        near = data.draw(st.sampled_from([0, 0, 0.001, -0.01, 0.5]))
        for text in _number_texts(round(k * step + near, 6)):
            if integer and "." in text:
                continue  # integers are written without a fraction (a narrowing)
            assert bool(rx.fullmatch(text)) == validator.is_valid(json.loads(text)), (schema, text)


def test_a_percent_to_two_places_takes_what_jsonschema_takes():
    """o46322's percentage (0 to 99.99, multipleOf 0.01): 38.1 and 38.10 are written; 0.07, which
    jsonschema's float division refuses, and 38.111 are not."""
    rx = re.compile(py_regex(schema_to_regex({"type": "number", "minimum": 0, "maximum": 99.99,
                                              "multipleOf": 0.01}).regex))
    assert all(rx.fullmatch(t) for t in ["38.1", "38.10", "99.99", "0", "7.5", "12.25", "0.0"])
    assert not any(rx.fullmatch(t) for t in ["0.07", "38.111", "100", "-0.01", "99.991"])


@pytest.mark.parametrize("bounds", [{"minimum": -100_000_000, "maximum": 100_000_000}, {}, {"minimum": 0},
                                    {"minimum": 1000, "exclusiveMaximum": 10**9}, {"maximum": -5000}])
def test_multiples_near_zero_are_written_past_the_bound(bounds):
    """Bounds holding more than MAX_MULTIPLES multiples of 0.01 (o46322's money, plus or minus
    100,000,000): the NEAR_MULTIPLES nearest zero are each written as jsonschema takes them (3.05
    passes, 0.07 does not); farther out, the exact fractions only. Every spelling of every
    multiple in the window and one step past it agrees with jsonschema."""
    schema = {"type": "number", "multipleOf": 0.01, **bounds}
    rx = re.compile(py_regex(schema_to_regex(schema).regex))
    validator = jsonschema.Draft202012Validator(schema)
    lo, hi = bounds.get("minimum"), bounds.get("maximum")
    center = lo if lo is not None and lo > 0 else hi if hi is not None and hi < 0 else 0  # nearest zero
    width = NEAR_MULTIPLES // 2
    accepted = 0
    for k in range(round(center * 100) - width - 1, round(center * 100) + width + 2):
        for text in _number_texts(round(k * 0.01, 2)):
            ok = validator.is_valid(json.loads(text))
            inside = abs(k - round(center * 100)) <= width
            if inside or not ok:  # past the window a valid multiple may be left out (a narrowing)
                assert bool(rx.fullmatch(text)) == ok, (schema, text)
            accepted += bool(rx.fullmatch(text))
    assert accepted > NEAR_MULTIPLES  # the window is written, not only .25, .5 and .75
    if center == 0:
        assert rx.fullmatch("3.05") and not rx.fullmatch("0.07")


@settings(max_examples=80, deadline=None)
@given(step=st.sampled_from([2, 4, 5, 8, 10, 20, 25, 40, 50, 125, 200, 250, 500, 1000, 3, 6, 12, 15, 30, 60,
                             75, 300]),
       lo=st.one_of(st.none(), st.integers(-3000, 3000)), hi=st.one_of(st.none(), st.integers(-3000, 3000)),
       data=st.data())
def test_integer_multiples_by_their_last_digits(step, lo, hi, data):
    """A step dividing 1000 (or three times one of 100) with a side unbounded: multiples are the
    integers whose last digits are (and whose digits sum to a multiple of 3), beside the small ones
    spelled out; the regex agrees with jsonschema on integers of every size. A step of thirds
    is refused, naming multipleOf, on a side without a bound whose magnitudes start past 10**k
    (k: the digits its divisor of 100 takes)."""
    schema = {"type": "integer", "multipleOf": step}
    if lo is not None:
        schema["minimum"] = lo
    if hi is not None:
        schema["maximum"] = hi
    try:
        rx = re.compile(py_regex(schema_to_regex(schema).regex))
    except Unsatisfiable:
        assert lo is not None and hi is not None and not any(k % step == 0 for k in range(lo, hi + 1))
        return
    except SchemaError as e:
        first = 10 ** next(k for k in range(3) if 10**k % (step // 3 or 1) == 0) if step % 3 == 0 else None
        assert e.keyword == "multipleOf" and first is not None, (schema, e)
        assert (hi is None and lo is not None and lo > first) or (lo is None and hi is not None and -hi > first)
        return
    validator = jsonschema.Draft202012Validator(schema)
    for _ in range(60):
        x = data.draw(st.one_of(st.integers(-5000, 5000), st.integers(-10**30, 10**30),
                                st.integers(-10**6, 10**6).map(lambda v: v * step)))
        assert bool(rx.fullmatch(str(x))) == validator.is_valid(x), (schema, x)


@pytest.mark.parametrize("bounds", [{}, {"minimum": -75, "maximum": 400}])
def test_all_of_integer_steps_merge_to_their_least_common_multiple(bounds):
    """allOf with multipleOf 4 and 10: the multiples of 20, nothing else (branches that disagree
    on a float step, or on any other keyword, are still refused)."""
    schema = {"allOf": [{"type": "integer", "multipleOf": 4}, {"multipleOf": 10}], **bounds}
    rx = py_regex(schema_to_regex(schema).regex)
    validator = jsonschema.Draft202012Validator(schema)
    for x in [*range(-500, 500), 10**12 + 20, 10**12 + 10, -(10**15) - 40]:
        assert bool(rx.fullmatch(str(x))) == validator.is_valid(x), x
    with pytest.raises(SchemaError, match="multipleOf"):
        schema_to_regex({"allOf": [{"type": "number", "multipleOf": 0.5}, {"multipleOf": 0.25}]})


def test_a_required_key_closed_out_leaves_the_other_types():
    """allOf: a branch closes out a key another requires, so no object fits; strings still do
    (hypothesis found the merge dropping the whole branch, which let a oneOf beside it overlap)."""
    schema = {"allOf": [{"type": ["object", "string"], "properties": {"a": {}}, "required": ["a"]},
                        {"additionalProperties": False}]}
    rx = py_regex(schema_to_regex(schema).regex)
    for value in ["x", {"a": 1}, {}]:
        text = json.dumps(value, separators=(",", ":"))
        assert bool(rx.fullmatch(text)) == jsonschema.Draft202012Validator(schema).is_valid(value), text
    with pytest.raises(SchemaError):
        schema_to_regex({"type": ["object", "integer", "string"], "properties": {"a": {}}, "required": ["a"],
                         "oneOf": [{}, {"additionalProperties": False, "properties": {}}]})


KEY_NAMES = ["a", "ab", "b", "a\"", "é", "x-y", "c\\"]
MEMBER_VALUES = ["1", '"s"', "[]", '{"q":null}']


@st.composite
def open_objects(draw):
    """An object schema over names that are prefixes of each other or need escapes, with
    additionalProperties absent, true, a schema or false, and an instance written as a model
    could write it: some declared keys in order, then any keys (declared, undeclared, escaped)."""
    names = draw(st.lists(st.sampled_from(KEY_NAMES), unique=True, max_size=4))
    props = {n: draw(st.sampled_from([{"type": "integer"}, {"type": "string"}, {}])) for n in names}
    schema = {"type": "object", "properties": props,
              "required": draw(st.lists(st.sampled_from(names), unique=True)) if names else []}
    extra = draw(st.sampled_from(["absent", True, {"type": "integer"}, False]))
    if extra != "absent":
        schema["additionalProperties"] = extra
    if names and draw(st.booleans()):
        schema["dependentRequired"] = {names[0]: names[1:2]}
    declared = [n for n in names if draw(st.booleans())]
    fresh = ["", "abc", "ba", "zz", "a\"b", "éa", "x-"]
    more = draw(st.lists(st.sampled_from(KEY_NAMES + fresh * 2), max_size=3))
    members = []
    for k in declared + more:
        key = json.dumps(k, ensure_ascii=False)
        if k and draw(st.integers(0, 3)) == 0:  # the first character escaped: the key spelled otherwise
            key = '"\\u%04x' % ord(k[0]) + key[2:]
        members.append(key + ":" + draw(st.sampled_from(MEMBER_VALUES)))
    return schema, "{" + ",".join(members) + "}", declared, more


@settings(max_examples=scale(60, 400), deadline=None)
@given(case=open_objects())
def test_extra_keys_agree_with_jsonschema(case):
    """extra_keys: whatever the regex accepts is valid, and a valid object written with its
    declared keys in order, then undeclared plain keys with values the schema allows, is accepted."""
    schema, text, declared, more = case
    rx = py_regex(schema_to_regex(schema, extra_keys=True).regex)
    value = json.loads(text)
    valid = jsonschema.Draft202012Validator(schema).is_valid(value)
    if rx.fullmatch(text):
        assert valid, (schema, text)
    plain = "\\u" not in text and len(set(declared + more)) == len(declared + more) and not set(more) & set(schema["properties"])
    writable = plain and all(k[-1:] not in '"\\' and '"' not in k for k in more)
    extra = schema.get("additionalProperties", True)
    # a dependent key is written right after the key it needs, not in schema order (where the
    # generator puts it, before that key): see test_dependent_keys_are_written_after_the_key_they_need
    in_order = not set(schema.get("dependentRequired", {})) & set(declared)
    if valid and writable and in_order and extra is not False and \
            all(json.dumps(value[k]) in ("1", "\"s\"") or extra is True for k in more):
        assert rx.fullmatch(text), (schema, text)


NAME_CHARS = "ab$-é\""


@settings(max_examples=scale(80, 400), deadline=None)
@given(names=st.lists(st.text(NAME_CHARS, max_size=4), max_size=6),
       keys=st.lists(st.text(NAME_CHARS + "\\\n", max_size=6), max_size=10))
def test_a_key_except_names_is_none_of_them(names, keys):
    """key_except: whatever it matches is a JSON string that is none of the names, and every key
    written with plain characters that is none of them is matched (names, their prefixes and
    extensions drawn)."""
    rx = py_regex(key_except(sorted(set(names))))
    candidates = set(keys) | set(names) | {n[:i] for n in names for i in range(len(n))} | {n + "a" for n in names}
    for key in candidates:
        text = json.dumps(key, ensure_ascii=False)
        if rx.fullmatch(text):
            assert key not in names, (names, text)
        elif text == '"' + key + '"':  # nothing escaped
            assert key in names, (names, text)
    for raw in keys:  # drawn characters between quotes as they are: stray quotes, lone backslashes
        if rx.fullmatch(f'"{raw}"'):
            assert json.loads(f'"{raw}"') not in names, (names, raw)
    for name in names:  # an escaped spelling of a name is still that name
        escaped = json.dumps(name, ensure_ascii=True).replace("a", "\\u0061")
        assert not rx.fullmatch(escaped), (names, escaped)


def test_extra_keys_default_to_declared_keys_only():
    """By default only declared keys are written; extra_keys=True writes undeclared ones wherever
    the schema allows them, None only where additionalProperties is given (taking its values)."""
    implicit = {"type": "object", "properties": {"a": {"type": "integer"}}}
    explicit = {**implicit, "additionalProperties": {"type": "string"}}
    anything = {**implicit, "additionalProperties": True}

    def accepts(schema, text, **kw):
        return py_regex(schema_to_regex(schema, **kw).regex).fullmatch(text) is not None
    for schema in (implicit, explicit, anything):
        assert not accepts(schema, '{"a":1,"b":"x"}')
    assert accepts(implicit, '{"a":1,"b":2}', extra_keys=True)
    assert not accepts(implicit, '{"a":1,"b":2}', extra_keys=None)
    assert accepts(explicit, '{"a":1,"b":"x"}', extra_keys=None) and not accepts(explicit, '{"a":1,"b":2}', extra_keys=None)
    assert accepts(anything, '{"a":1,"b":[2,{"c":null}]}', extra_keys=None)
    for schema in (explicit, anything):
        assert not accepts(schema, '{"a":1,"a":"x"}', extra_keys=None)  # a declared name is never written twice
    assert not accepts({**implicit, "additionalProperties": False}, '{"a":1,"b":"x"}', extra_keys=True)
