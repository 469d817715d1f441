"""JSON Schema -> regex: the translator, numeric ranges, patterns, and cache keys."""

from .keys import schema_key
from .translate import WHITESPACE, Translation, schema_to_regex

__all__ = ["WHITESPACE", "Translation", "schema_key", "schema_to_regex"]
