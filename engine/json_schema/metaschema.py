"""Is this a JSON schema? The check against its draft's metaschema, before anything compiles.

python-jsonschema's ``check_schema`` is the authority (its errors name the keyword and the
place), but it takes milliseconds, a third of a typical compile. jsonschema-rs answers the same
question in tens of microseconds, so it goes first with the same format check for patterns
(Python's ``re``, as python-jsonschema's); only a schema it does not plainly accept goes on to
python-jsonschema, whose verdict and message stand, raised as a SchemaError naming the keyword
and the place.
"""

from __future__ import annotations

import functools
import re
from typing import Any

import jsonschema
import jsonschema_rs

from ..errors import SchemaError


def _python_regex(text: str) -> bool:
    try:
        re.compile(text)
    except re.error:
        return False
    return True


@functools.cache
def _fast_validator(cls: type) -> Any:
    """jsonschema-rs's validator of ``cls``'s metaschema (one per draft), or None where it cannot
    read that metaschema (python-jsonschema alone then)."""
    try:
        return jsonschema_rs.validator_for(cls.META_SCHEMA, validate_formats=True, formats={"regex": _python_regex})
    except Exception:
        return None


def check_schema(schema: Any, *, prefix: str = "not a valid JSON schema", tool: str = "") -> None:
    """Raise SchemaError("``prefix``: python-jsonschema's message", naming its keyword and JSON
    pointer, and ``tool``) when ``schema`` is not valid against the metaschema of its draft
    (``$schema``; 2020-12 when absent)."""
    try:
        _check(schema)
    except jsonschema.SchemaError as e:
        keyword = e.validator if isinstance(e.validator, str) else ""
        raise SchemaError(f"{prefix}: {e.message}", pointer="#/" + "/".join(map(str, e.absolute_path)),
                          keyword=keyword, tool=tool) from None


def _check(schema: Any) -> None:
    if not isinstance(schema, (dict, bool)):
        raise jsonschema.SchemaError(f"a schema is an object or a boolean, not {type(schema).__name__}")
    if isinstance(schema, dict) and not isinstance(schema.get("$schema", ""), str):
        raise jsonschema.SchemaError("$schema must be a string (a metaschema's URI)", validator="$schema",
                                     path=["$schema"])
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    fast = _fast_validator(cls)
    try:
        if fast is not None and fast.is_valid(schema):
            return
    except Exception:
        pass  # a value jsonschema-rs cannot take (a non-string key, a huge integer): ask python-jsonschema
    cls.check_schema(schema)
