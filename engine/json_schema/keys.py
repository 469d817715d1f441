"""Cache keys for schemas: equal for schemas that differ only where the output cannot tell."""

from __future__ import annotations

import json
from typing import Any

_ORDERED = ("properties", "patternProperties")  # their order is the output's order
_DATA = ("enum", "const", "default", "examples")  # instance values: written as given


def schema_key(schema: Any) -> str:
    """JSON text equal for schemas that differ only in key order, except where order shows in the
    output (the order of ``properties``)."""
    return json.dumps(_canonical(schema), separators=(",", ":"), ensure_ascii=False)


def _canonical(node: Any, names: bool = False) -> Any:
    if isinstance(node, list):
        return [_canonical(v) for v in node]
    if not isinstance(node, dict):
        return node
    if names:  # property name -> schema, in the given order
        return {k: _canonical(v) for k, v in node.items()}
    return {k: (v if k in _DATA else _canonical(v, names=k in _ORDERED)) for k, v in sorted(node.items())}
