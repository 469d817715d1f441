"""JSON Schema -> regex: the metaschema check, the translator, numeric ranges, patterns, and cache keys."""

from .keys import schema_key
from .metaschema import check_schema
from .translate import WHITESPACE, Translation, schema_to_regex

__all__ = ["WHITESPACE", "Translation", "check_schema", "schema_key", "schema_to_regex"]
