"""What one call to one tool looks like: the offered tools, checked, and each call cut into pieces.

A call is cut after every special token at its top level, and between its literal name part and
its arguments. A piece with no schema in it (``<|tool_call_begin|>functions.NAME:3<|tool_call_argument_begin|>``)
is a literal, built directly; the others are regexes, compiled per tool (see ``tools.pieces``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from ..caches import Cache
from ..errors import CompileError, SchemaError
from ..json_schema import check_schema, schema_key, schema_to_regex
from ..automata import check_regex_size
from ..regexes import escape, exclude_specials, min_units
from ..symbols import TEXT_REGEX
from .formats import FLOAT_VALUES
from .tree import Format, render

INDEX_MARK = "\x00"  # where CALL_INDEX goes in a literal piece (tool names cannot hold it)
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
FLOAT_EXACT = 10**15 - 1  # below 2**53, where a float holds every integer; a round bound keeps the regex small
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType")
TRANSLATIONS = Cache("schema translations", 4096)  # (schema key, whitespace, strict) -> (regex, unenforced)


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict
    description: str = ""

    @property
    def key(self) -> str:
        return json.dumps([self.name, schema_key(self.parameters)])

    def openai(self) -> dict:
        """The OpenAI tool definition (what the chat template is given)."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": self.parameters}}


def normalize_tools(tools: Any) -> list[Tool]:
    """OpenAI-shaped (or bare ``{"name", "parameters"}``) tool definitions, checked."""
    if isinstance(tools, (str, bytes)):
        try:
            tools = json.loads(tools)
        except ValueError as e:
            raise SchemaError(f"tools are not valid JSON: {e}") from None
    if not isinstance(tools, (list, tuple)) or not tools:
        raise SchemaError("tools must be a non-empty list of tool definitions")
    out, seen = [], set()
    for i, t in enumerate(tools):
        if not isinstance(t, dict):
            raise SchemaError(f"tool #{i} is not an object")
        f = t.get("function", t) if t.get("type", "function") == "function" else None
        if not isinstance(f, dict):
            raise SchemaError(f"tool #{i} has type {t.get('type')!r}; only 'function' tools are supported")
        name = f.get("name")
        if not isinstance(name, str) or not name:
            raise SchemaError(f"tool #{i} has no name")
        if not NAME_RE.fullmatch(name):
            raise SchemaError(f"tool #{i}: the name has characters tool-call formats cannot carry "
                              "(allowed: letters, digits, _ . -)", tool=name)
        if name in seen:
            raise SchemaError("the name is offered twice", tool=name)
        seen.add(name)
        params = f.get("parameters")
        if params is None:
            params = {"type": "object", "properties": {}}
        if not isinstance(params, dict) or params.get("type", "object") != "object":
            raise SchemaError("parameters must be an object schema, got "
                              f"{params.get('type') if isinstance(params, dict) else type(params).__name__!r}",
                              pointer="#/parameters", keyword="type", tool=name)
        check_schema(params, prefix="parameters are not a valid JSON schema", tool=name)
        # arguments are an object (the call formats and OpenAI's API say so): an untyped schema
        # would let other values through
        params = params if "type" in params else {"type": "object", **params}
        out.append(Tool(name, params, str(f.get("description", ""))))
    return out


@dataclass
class Piece:
    """One piece of a call: a literal (CALL_INDEX written as INDEX_MARK) or a regex."""

    literal: bool
    text: str
    items: list  # the call rule's items it was made from (the parser renders them again)
    indexed: bool = False  # a literal holding CALL_INDEX
    joins: bool = False  # a literal whose last tokens may run on into the next (regex) piece

    @cached_property
    def bound(self) -> int:
        """A regex piece's fewest tokens, bounded from above without compiling it (lazy grammars
        count by it; sizing the regex took a quarter of an eager 50-tool compile)."""
        return min_units(self.text)


@dataclass
class CallSpec:
    """One tool's call in one format: its pieces and the regexes the parser reads it with."""

    tool: Tool
    pieces: list[Piece]
    holes: dict[str, str]  # ARGUMENTS or PARAMETERS -> its regex
    values: dict[str, tuple[str, bool]]  # parameter -> (value regex, is a raw string)
    free_raw: set[str] = field(default_factory=set)  # parameters whose value is any raw text (no enum)
    unenforced: list[tuple[str, str]] = field(default_factory=list)  # (where, keyword)

    def items(self) -> list:
        return [it for p in self.pieces for it in p.items]


def symbol_filler(symbols: dict[str, str]) -> Callable[[Any], str | None]:
    """A ``render`` fill for special tokens (as their symbols) and free text."""
    def fill(node):
        if node[0] == "sym":
            return symbols[node[1]]
        if node[0] == "hole" and node[1] == "TEXT":
            return TEXT_REGEX
        return None
    return fill


def _literal_item(it) -> bool:
    return it[0] in ("lit", "sym") or (it[0] == "hole" and it[1] in ("TOOL_NAME", "CALL_INDEX"))


def call_spec(fmt: Format, tool: Tool, symbols: dict[str, str], *, strict: bool, whitespace: str) -> CallSpec:
    """Cut ``tool``'s call into pieces; raises SchemaError for what the mask cannot enforce."""
    spec = CallSpec(tool, [], {}, {})
    fill_symbols = symbol_filler(symbols)
    call = fmt.rules["call"]
    items = call[1] if call[0] == "seq" else [call]
    groups, cur = [], []
    for it in items:
        if cur and not _literal_item(it) and all(_literal_item(x) for x in cur):
            groups.append(cur)  # the name part is a literal, built at once; arguments wait
            cur = []
        cur.append(it)
        if it[0] == "sym":
            groups.append(cur)
            cur = []
    if cur:
        groups.append(cur)

    def fill(node):
        got = fill_symbols(node)
        if got is not None or node[0] != "hole":
            return got
        if node[1] == "TOOL_NAME":
            return escape(tool.name)
        if node[1] == "ARGUMENTS":
            got = _json_regex(spec, tool.parameters, strict, whitespace)
        elif node[1] == "PARAMETERS":
            got = _parameters_regex(spec, fmt, fill_symbols, strict, whitespace)
        else:
            raise CompileError(f"format {fmt.name}: hole {node[1]} cannot appear in a call")
        spec.holes[node[1]] = got
        return got

    for g in groups:
        if all(_literal_item(it) for it in g):
            text = "".join(it[1] if it[0] == "lit" else symbols[it[1]] if it[0] == "sym"
                           else tool.name if it[1] == "TOOL_NAME" else INDEX_MARK for it in g)
            spec.pieces.append(Piece(True, text, g, INDEX_MARK in text, joins=g[-1][0] != "sym"))
        else:
            if any(it == ("hole", "CALL_INDEX") for it in g):
                raise CompileError(f"format {fmt.name}: CALL_INDEX must sit in a piece without arguments")
            regex = render(fmt, ("seq", g), fill)
            try:
                check_regex_size(regex)  # now, before generation: lazy pieces compile at their first call
            except CompileError as e:
                raise CompileError(f"tool {tool.name!r}: its arguments: {e}") from None
            spec.pieces.append(Piece(False, regex, g))
    for a, b in zip(spec.pieces, spec.pieces[1:]):
        a.joins = a.joins and a.literal and not b.literal
    spec.pieces[-1].joins = False
    return spec


def _translate(schema_json: str, whitespace: str, strict: bool) -> tuple[str, list]:
    def build():
        t = schema_to_regex(json.loads(schema_json), whitespace=whitespace, strict=strict)
        return t.regex, list(t.unenforced)
    return TRANSLATIONS.get_or_build((schema_json, whitespace, strict), build)


def _json_regex(spec: CallSpec, schema: Any, strict: bool, whitespace: str, pointer: str = "#") -> str:
    tool = spec.tool.name
    try:
        regex, unenforced = _translate(schema_key(schema), whitespace, strict)
    except SchemaError as e:
        raise SchemaError(e.message, pointer=pointer + e.pointer[1:], keyword=e.keyword, tool=tool) from None
    spec.unenforced += [(f"tool {tool!r} {pointer}{p[1:]}", k) for p, k in unenforced]
    return regex


def _parameters_regex(spec: CallSpec, fmt: Format, fill_symbols, strict: bool, whitespace: str) -> str:
    if "parameter" not in fmt.rules:
        raise CompileError(f"format {fmt.name} uses PARAMETERS but defines no 'parameter' rule")
    params = spec.tool.parameters
    props = dict(params.get("properties") or {})
    required = list(params.get("required") or [])
    extra = params.get("additionalProperties", True)
    for k in required:
        if k not in props:
            props[k] = extra if isinstance(extra, dict) else {}
    out = []
    for key, sub in props.items():
        value = _value_regex(spec, fmt, key, sub, strict, whitespace)
        raw = isinstance(sub, dict) and sub.get("type") == "string" and "RAW_STRING" in fmt.patterns
        spec.values[key] = (value, raw)
        if raw and not {"enum", "const"} & sub.keys():
            spec.free_raw.add(key)

        def fill(n, key=key, value=value):
            got = fill_symbols(n)
            if got is not None or n[0] != "hole":
                return got
            if n[1] == "PARAM_KEY":
                return escape(key)
            if n[1] == "PARAM_VALUE":
                return value
            raise CompileError(f"format {fmt.name}: hole {n[1]} cannot appear in a parameter")

        one = render(fmt, fmt.rules["parameter"], fill)
        out.append(one if key in required else f"(?:{one})?")
    return "".join(out)


def _value_regex(spec: CallSpec, fmt: Format, key: str, sub: Any, strict: bool, whitespace: str) -> str:
    pointer = f"#/properties/{key}"
    tool = spec.tool.name
    if isinstance(sub, dict) and sub.get("type") == "string" and "RAW_STRING" in fmt.patterns:
        choices = sub.get("enum", [sub["const"]] if "const" in sub else None)
        if choices is not None:
            return "(?:" + "|".join(escape(c) for c in choices if isinstance(c, str)) + ")"
        for kw in _STRING_KEYWORDS:
            if kw in sub:
                if strict:
                    raise SchemaError("not supported on a raw string parameter", pointer=pointer, keyword=kw, tool=tool)
                spec.unenforced.append((f"tool {tool!r} {pointer}", kw))
        return "(?:" + exclude_specials(fmt.patterns["RAW_STRING"]) + ")"
    if fmt.name in FLOAT_VALUES and isinstance(sub, dict) and sub.get("type") in ("integer", "number"):
        sub = {"allOf": [sub, {"minimum": -FLOAT_EXACT, "maximum": FLOAT_EXACT}]}
    return _json_regex(spec, sub, strict, whitespace, pointer)
