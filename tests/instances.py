"""Write a JSON value the way the engine's grammars write it (used to walk test instances).

The rule: object keys in the schema's property order (undeclared keys after, as they came),
compact separators, non-ASCII characters as themselves. Whitespace is optional in the
grammar, so compact text is always one of the accepted spellings.
"""

from __future__ import annotations

import json
from typing import Any


def _resolve(schema: Any, root: Any, depth: int = 0) -> Any:
    while isinstance(schema, dict) and isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#") and depth < 16:
        target = root
        for part in schema["$ref"][1:].split("/"):
            if part:
                part = part.replace("~1", "/").replace("~0", "~")
                target = target.get(part) if isinstance(target, dict) else None
        schema, depth = target, depth + 1
    return schema


def _properties(schema: Any, root: Any) -> dict:
    schema = _resolve(schema, root)
    if not isinstance(schema, dict):
        return {}
    props = dict(schema.get("properties") or {})
    for sub in schema.get("allOf", []):
        for k, v in _properties(sub, root).items():
            props.setdefault(k, v)
    return props


def reorder(value: Any, schema: Any, root: Any = None) -> Any:
    root = schema if root is None else root
    schema = _resolve(schema, root)
    if isinstance(value, dict):
        props = _properties(schema, root)
        keys = [k for k in props if k in value] + [k for k in value if k not in props]
        return {k: reorder(value[k], props.get(k), root) for k in keys}
    if isinstance(value, list) and isinstance(schema, dict):
        prefix = schema.get("prefixItems") or (schema.get("items") if isinstance(schema.get("items"), list) else [])
        items = schema.get("items") if isinstance(schema.get("items"), dict) else None
        return [reorder(v, prefix[i] if i < len(prefix) else items, root) for i, v in enumerate(value)]
    return value


def canonical_text(value: Any, schema: Any) -> str:
    return json.dumps(reorder(value, schema), ensure_ascii=False, separators=(",", ":"))
