"""Write a JSON value the way the engine's grammars write it (used to walk test instances).

The rule: object keys in the schema's property order (then those allOf branches add, then those
of the first anyOf/oneOf branch the value fits; undeclared keys after, as they came),
compact separators, non-ASCII characters as themselves. Whitespace is optional in the
grammar, so compact text is always one of the accepted spellings.
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema


def _resolve(schema: Any, root: Any, depth: int = 0) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#") and depth < 16:
        target = root
        for part in schema["$ref"][1:].split("/"):
            if part:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
        schema, depth = target, depth + 1
    return schema


def _fits(value: Any, schema: Any, root: Any) -> bool:
    if isinstance(root, dict) and isinstance(schema, dict):
        schema = {**{k: root[k] for k in ("definitions", "$defs", "$schema") if k in root}, **schema}
    try:
        return jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema).is_valid(value)
    except Exception:
        return False


def _properties(schema: Any, root: Any, value: Any) -> dict:
    """The declared properties in the order the grammar writes them: the schema's own, then those
    its allOf branches add, then those of the first anyOf/oneOf branch the value fits."""
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return {}
    props = dict(schema.get("properties") or {})
    subs = list(schema.get("allOf", []))
    for kw in ("anyOf", "oneOf"):
        fitting = [b for b in schema.get(kw) or [] if _fits(value, b, root)]
        subs += fitting[:1]
    for sub in subs:
        for k, v in _properties(sub, root, value).items():
            props[k] = {"allOf": [props[k], v]} if k in props else v
    return props


def _item_schema(schema: Any, key: str, props: dict) -> Any:
    if key in props:
        return props[key]
    return schema.get("additionalProperties") if isinstance(schema, dict) else None


def reorder(value: Any, schema: Any, root: Any = None) -> Any:
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if isinstance(value, dict):
        props = _properties(schema, root, value)
        keys = [k for k in props if k in value] + [k for k in value if k not in props]
        return {k: reorder(value[k], _item_schema(schema, k, props), root) for k in keys}
    if isinstance(value, list) and isinstance(schema, dict):
        prefix = schema.get("prefixItems") or (schema.get("items") if isinstance(schema.get("items"), list) else [])
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        return [reorder(v, prefix[i] if i < len(prefix) else items, root) for i, v in enumerate(value)]
    return value


def canonical_text(value: Any, schema: Any) -> str:
    return json.dumps(reorder(value, schema), ensure_ascii=False, separators=(",", ":"))
