"""Cache keys for schemas: equal for schemas that differ only where the output cannot tell."""

from __future__ import annotations

import json
import marshal
from typing import Any

from ..caches import Cache

_ORDERED = ("properties", "patternProperties")  # their order is the output's order
_DATA = ("enum", "const", "default", "examples")  # instance values: written as given
# the schema's marshal bytes -> its key: a request that sends the same schema again (an agent's
# tool list, every turn) pays one marshal (0.13 ms for a 150 KB schema), not the Python walk and
# dump (1.5 ms). Equal bytes load as equal values of the same types, so a hit is always the right
# key. Format 2 writes no object references or interning marks (3 and later do, from refcounts),
# so the bytes depend on the value alone (were they not to, a schema would miss, never take a
# wrong key).
KEYS = Cache("schema keys", 64 << 20, lambda key: 2 * len(key))


def schema_key(schema: Any) -> str:
    """JSON text equal for schemas that differ only in key order, except where order shows in the
    output (the order of ``properties``)."""
    try:
        data = marshal.dumps(schema, 2)
    except ValueError:  # not plain data (a dict subclass, an object): json says what is wrong
        return _walked_key(schema)
    return KEYS.get_or_build(data, lambda: _walked_key(schema))


def _walked_key(schema: Any) -> str:
    return json.dumps(_canonical(schema), separators=(",", ":"), ensure_ascii=False)


def _canonical(node: Any, names: bool = False) -> Any:
    if isinstance(node, list):
        return [_canonical(v) for v in node]
    if not isinstance(node, dict):
        return node
    if names:  # property name -> schema, in the given order
        return {k: _canonical(v) for k, v in node.items()}
    return {k: (v if k in _DATA else _canonical(v, names=k in _ORDERED)) for k, v in sorted(node.items())}
