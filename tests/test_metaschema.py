"""The metaschema check (engine.json_schema.check_schema) refuses exactly what python-jsonschema's
check_schema refuses, with python-jsonschema's message and keyword, on every fixture schema and on
thousands of broken copies of them; jsonschema-rs only answers the plain yes faster."""

import json
import random
import warnings

import jsonschema
import pytest

from conftest import DATA, scale
from engine import compile_json_schema
from engine.errors import SchemaError
from engine.json_schema import check_schema

WRONG = [-1, "x", [], {}, None, 1.5, ["a", "a"], "(", {"a": 3}, True, "[z-a]", "\\p{L}", "(?<n>x)", 10 ** 30,
         "#foo", "http://x y", "a{2,1}"]


def fixture_schemas() -> list:
    out = []
    for path in sorted((DATA / "jsonschemabench").glob("*.jsonl")):
        out += [json.loads(line)["schema"] for line in open(path)]
    for path in sorted((DATA / "json-schema-test-suite").glob("*.json")):
        out += [group["schema"] for group in json.loads(path.read_text())]
    return out


def broken(schema, rng: random.Random, depth: int = 0):
    """``schema`` with one value somewhere replaced by something that may not belong there."""
    if isinstance(schema, dict) and schema:
        key = rng.choice(list(schema))
        inner = rng.random() < 0.6 and depth < 8
        return {**schema, key: broken(schema[key], rng, depth + 1) if inner else rng.choice(WRONG)}
    if isinstance(schema, list) and schema:
        i = rng.randrange(len(schema))
        return schema[:i] + [broken(schema[i], rng, depth + 1)] + schema[i + 1:]
    return rng.choice(WRONG)


def python_verdict(schema):
    """None when python-jsonschema accepts ``schema``, else its (message, keyword)."""
    try:
        jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator).check_schema(schema)
    except jsonschema.SchemaError as e:
        return f"not a valid JSON schema: {e.message}", e.validator
    return None


def ours(schema):
    try:
        check_schema(schema)
    except SchemaError as e:
        return e.message, e.keyword
    return None


def test_check_agrees_with_python_jsonschema():
    schemas = fixture_schemas()
    rng = random.Random(0)
    cases = [s for s in schemas if isinstance(s, (dict, bool))]
    cases += [b for s in schemas for b in [broken(s, rng) for _ in range(scale(3, 12))]
              if isinstance(b, dict) and isinstance(b.get("$schema", ""), str)]
    refused = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # re's FutureWarnings on odd patterns
        for schema in cases:
            want = python_verdict(schema)
            assert ours(schema) == want, json.dumps(schema)[:300]
            refused += want is not None
    assert len(schemas) > 400 and refused > len(cases) // 3, (len(cases), refused)


@pytest.mark.parametrize("schema, keyword", [
    ({"type": "object", "$schema": ["x"]}, "$schema"),
    ({"type": "string", "pattern": "("}, "format"),
    ({"properties": {"a": {"minLength": -1}}}, "minimum"),
])
def test_bad_schemas_are_refused_naming_the_keyword(qwen3_tokenizer, schema, keyword):
    with pytest.raises(SchemaError) as info:
        compile_json_schema(qwen3_tokenizer, schema)
    assert info.value.keyword == keyword, str(info.value)


def test_a_schema_that_is_not_an_object_is_refused(qwen3_tokenizer):
    with pytest.raises(SchemaError, match="object or a boolean") as info:
        compile_json_schema(qwen3_tokenizer, 3)
    assert info.value.keyword == "" and "unset" not in str(info.value), str(info.value)
