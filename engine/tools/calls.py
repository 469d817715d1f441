"""What one call to one tool looks like: the offered tools, checked, and each call cut into pieces.

A call is cut after every special token at its top level, and between its literal name part and
its arguments. A piece with no schema in it (``<|tool_call_begin|>functions.NAME:3<|tool_call_argument_begin|>``)
is a literal, built directly; the others are regexes, compiled per tool (see ``tools.pieces``).

A schema that writes free values (any JSON value, nesting containers: thousands of DFA states
written out), cuts a recursion at max_depth or expands its references past the limit is
translated with its definitions linked (see automata.linked): the piece's regex holds their
markers and the piece lists their regexes; the parser reads the same definitions as the ``regex``
module's recursive groups.
"""

from __future__ import annotations

import itertools
import json
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Callable

from ..caches import Cache
from ..errors import CompileError, SchemaError
from ..json_schema import check_schema, schema_key, schema_to_regex
from ..json_schema.translate import ANNOTATIONS, expansion_stopped
from ..automata import check_regex_size
from ..regexes import escape, exclude_specials, min_units
from ..symbols import LINK_SLOTS, TEXT_REGEX, link_symbol
from .formats import FLOAT_VALUES
from .tree import Format, render

INDEX_MARK = "\x00"  # where CALL_INDEX goes in a literal piece (tool names cannot hold it)
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
FLOAT_EXACT = 10**15 - 1  # below 2**53, where a float holds every integer; a round bound keeps the regex small
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType")
# (schema key, whitespace, strict) -> (regex, unenforced, linked definitions)
TRANSLATIONS = Cache("schema translations", 4096)
UNSIZED = 10**9  # a definition's size before one of its strings is known (above any budget)
_GROUP_NAMES = itertools.count()  # the parser's names for linked definitions: unique in any regex it joins


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
    definitions: list[str] = field(default_factory=list)  # linked: marker k calls definitions[k]

    @cached_property
    def bound(self) -> int:
        """A regex piece's fewest tokens, bounded from above without compiling it (lazy grammars
        count by it; sizing the regex took a quarter of an eager 50-tool compile), its linked
        definitions' included."""
        return linked_min_units(self.text, self.definitions)


def linked_min_units(root: str, definitions: list[str]) -> int:
    """``min_units`` of a root regex whose markers call ``definitions``: each definition's fewest
    units found to a fixpoint (recursion included; a marker is written as that many bytes, as
    UNSIZED while none is known)."""
    if not definitions:
        return min_units(root)
    fewest = [UNSIZED] * len(definitions)

    def written(regex: str) -> str:
        return regex.translate({ord(link_symbol(k)): f"(?:a{{{n}}})" for k, n in enumerate(fewest)})
    changed = True
    while changed:
        changed = False
        for k, d in enumerate(definitions):
            n = min_units(written(d))
            if n < fewest[k]:
                fewest[k], changed = n, True
    return min_units(written(root))


@dataclass
class CallSpec:
    """One tool's call in one format: its pieces and the regexes the parser reads it with."""

    tool: Tool
    pieces: list[Piece]
    holes: dict[str, str]  # ARGUMENTS or PARAMETERS -> its regex
    values: dict[str, tuple[str, bool]]  # parameter -> (value regex, is a raw string)
    free_raw: set[str] = field(default_factory=set)  # parameters whose value is any raw text (no enum)
    # linked definitions as the parser's named groups, which holes and values call (_parser_form)
    groups: list[str] = field(default_factory=list)
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
    definitions: list[str] = []  # the current piece's linked definitions
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
            got, parsed = _json_regex(spec, tool.parameters, strict, whitespace, definitions)
        elif node[1] == "PARAMETERS":
            got, parsed = _parameters_regex(spec, fmt, fill_symbols, strict, whitespace, definitions)
        else:
            raise CompileError(f"format {fmt.name}: hole {node[1]} cannot appear in a call")
        spec.holes[node[1]] = parsed
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
                for r in [regex, *definitions]:
                    check_regex_size(r)  # now, before generation: lazy pieces compile at their first call
            except CompileError as e:
                raise CompileError(f"tool {tool.name!r}: its arguments: {e}") from None
            spec.pieces.append(Piece(False, regex, g, definitions=list(definitions)))
            definitions.clear()
    for a, b in zip(spec.pieces, spec.pieces[1:]):
        a.joins = a.joins and a.literal and not b.literal
    spec.pieces[-1].joins = False
    return spec


def _translate(schema_json: str, whitespace: str, strict: bool) -> tuple[str, list, list[str]]:
    """The schema's regex, written out or (when it writes free values, cuts a recursion at
    max_depth, or its references expand past the limit) with its definitions linked."""
    def build():
        schema = json.loads(schema_json)
        try:
            t = schema_to_regex(schema, whitespace=whitespace, strict=strict)
        except SchemaError as e:
            if not expansion_stopped(e, depth=True):
                raise
            failed = e
        else:
            if not (t.free_values or t.cut):
                return t.regex, list(t.unenforced), []
            failed = None
        try:
            linked = schema_to_regex(schema, whitespace=whitespace, strict=strict, link=True)
        except SchemaError:
            if failed is not None:
                raise failed from None
            return t.regex, list(t.unenforced), []
        return linked.regex, list(linked.unenforced), list(linked.definitions)
    return TRANSLATIONS.get_or_build((schema_json, whitespace, strict), build)


def _shifted(regex: str, count: int, by: int) -> str:
    """``regex``, whose markers call ``count`` definitions, with those markers numbered from ``by``."""
    return regex.translate({ord(link_symbol(k)): link_symbol(k + by) for k in range(count)}) if by else regex


def _parser_form(spec: CallSpec, regex: str, definitions: list[str]) -> str:
    """A linked regex as the parser reads it with the ``regex`` module: each marker a call
    ``(?&name)`` of a named group holding its definition, added to ``spec.groups`` (the parser
    defines them once per pattern: a hole may appear in one twice)."""
    if not definitions:
        return regex
    n = next(_GROUP_NAMES)
    calls = {ord(link_symbol(k)): f"(?&L{n}_{k})" for k in range(len(definitions))}
    spec.groups += [f"(?P<L{n}_{k}>{d.translate(calls)})" for k, d in enumerate(definitions)]
    return regex.translate(calls)


def _json_regex(spec: CallSpec, schema: Any, strict: bool, whitespace: str, definitions: list[str],
                pointer: str = "#") -> tuple[str, str]:
    """The schema's regex for the mask (its linked definitions added to ``definitions``, the
    piece's) and for the parser."""
    tool = spec.tool.name
    try:
        regex, unenforced, linked = _translate(schema_key(schema), whitespace, strict)
    except SchemaError as e:
        raise SchemaError(e.message, pointer=pointer + e.pointer[1:], keyword=e.keyword, tool=tool) from None
    spec.unenforced += [(f"tool {tool!r} {pointer}{p[1:]}", k) for p, k in unenforced]
    if len(definitions) + len(linked) > LINK_SLOTS:
        raise SchemaError(f"its parameters link more than {LINK_SLOTS} definitions", pointer=pointer,
                          keyword="$ref", tool=tool)
    by = len(definitions)
    definitions += [_shifted(d, len(linked), by) for d in linked]
    return _shifted(regex, len(linked), by), _parser_form(spec, regex, linked)


def _parameters_regex(spec: CallSpec, fmt: Format, fill_symbols, strict: bool, whitespace: str,
                      definitions: list[str]) -> tuple[str, str]:
    if "parameter" not in fmt.rules:
        raise CompileError(f"format {fmt.name} uses PARAMETERS but defines no 'parameter' rule")
    params = spec.tool.parameters
    props = dict(params.get("properties") or {})
    required = list(params.get("required") or [])
    extra = params.get("additionalProperties", True)
    for k in required:
        if k not in props:
            props[k] = extra if isinstance(extra, dict) else {}
    # each value is translated alone: it takes the parameters' definitions along for its $refs
    shared = {k: params[k] for k in ("$defs", "definitions") if k in params}
    out, parsed = [], []
    for key, sub in props.items():
        if shared and isinstance(sub, dict) and not shared.keys() & sub.keys():
            sub = {**shared, **sub}
        value, read = _value_regex(spec, fmt, key, sub, strict, whitespace, definitions)
        raw = (isinstance(sub, dict) and sub.get("type") == "string" and "RAW_STRING" in fmt.patterns) \
            or _untyped_text(fmt, sub)
        spec.values[key] = (read, raw)
        if raw and not (isinstance(sub, dict) and {"enum", "const"} & sub.keys()):
            spec.free_raw.add(key)
        for regex, into in ((value, out), (read, parsed)):
            def fill(n, key=key, regex=regex):
                got = fill_symbols(n)
                if got is not None or n[0] != "hole":
                    return got
                if n[1] == "PARAM_KEY":
                    return escape(key)
                if n[1] == "PARAM_VALUE":
                    return regex
                raise CompileError(f"format {fmt.name}: hole {n[1]} cannot appear in a parameter")

            one = render(fmt, fmt.rules["parameter"], fill)
            into.append(one if key in required else f"(?:{one})?")
    return "".join(out), "".join(parsed)


def _value_regex(spec: CallSpec, fmt: Format, key: str, sub: Any, strict: bool, whitespace: str,
                 definitions: list[str]) -> tuple[str, str]:
    pointer = f"#/properties/{key}"
    tool = spec.tool.name
    if isinstance(sub, dict) and sub.get("type") == "string" and "RAW_STRING" in fmt.patterns:
        choices = sub.get("enum", [sub["const"]] if "const" in sub else None)
        if choices is not None:
            regex = "(?:" + "|".join(escape(c) for c in choices if isinstance(c, str)) + ")"
            return regex, regex
        for kw in _STRING_KEYWORDS:
            if kw in sub:
                if strict:
                    raise SchemaError("not supported on a raw string parameter", pointer=pointer, keyword=kw, tool=tool)
                spec.unenforced.append((f"tool {tool!r} {pointer}", kw))
        regex = "(?:" + exclude_specials(fmt.patterns["RAW_STRING"]) + ")"
        return regex, regex
    if _untyped_text(fmt, sub):
        regex = "(?:" + exclude_specials(fmt.patterns["UNTYPED_STRING"]) + ")"
        return regex, regex
    if fmt.name in FLOAT_VALUES and isinstance(sub, dict) and sub.get("type") in ("integer", "number"):
        sub = {"allOf": [sub, {"minimum": -FLOAT_EXACT, "maximum": FLOAT_EXACT}]}
    return _json_regex(spec, sub, strict, whitespace, definitions, pointer)


def _untyped_text(fmt: Format, sub: Any) -> bool:
    """A parameter that takes any value, in a format whose parsers read such a value as text (its
    ``UNTYPED_STRING``)."""
    return "UNTYPED_STRING" in fmt.patterns and (sub is True or (isinstance(sub, dict) and not set(sub) - ANNOTATIONS))
