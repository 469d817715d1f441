"""JSON Schema -> regex (Rust regex syntax, as outlines-core reads it).

Our own translator rather than outlines-core's: it enforces what it claims (numeric bounds,
lengths, item counts, \\u escapes), refuses what it cannot enforce by naming the keyword and its
JSON pointer, and keeps private-use symbols (special tokens) out of strings.

Output shape rules (what "valid output" looks like, and how test instances are compared):
object properties appear in the schema's order, at most once each; optional whitespace is
``whitespace`` (default ``[ ]?``) between structural characters; enum/const objects and arrays
are written compactly. Strict mode (the default) raises SchemaError for any keyword the regex
does not enforce; lenient mode records it in ``Translation.unenforced`` instead, and results are
then checked with ``jsonschema`` after generation.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Callable
from urllib.parse import unquote

import jsonschema

from ..errors import SchemaError
from ..regexes import STRING_CHAR, alternation, escape, repeat_bounds, sre_constants, sre_parse
from ..symbols import COUNTER_SLOTS, LINK_SLOTS, SPECIAL_CLASS, counter_symbol, link_symbol
from .numbers import int_multiples, int_range, multiples, number_range
from .patterns import PatternRegex

WHITESPACE = r"[ ]?"
LINK_MEMBERS_FROM = 1500  # linking, a property value written longer than this is a definition of its own
# linking, an object with more optional members than this writes each block of them (see
# _member_list) as definitions: outlines-core's time per DFA state grows with the regex
LINK_BLOCKS_FROM = 64
# linking, array items repeated up to this many times or more are a definition, and so is a
# member value holding a repetition bounded this high (a {1,200} URI is 200 DFA states per copy)
LINK_REPEATS_FROM = 16
# linking, a string bound past max_length is spelled in chunks of LINK_CHUNK characters, at most
# MAX_CHUNKS of them (a {0,8192} string spelled at once is 131,000 DFA states)
LINK_CHUNK, MAX_CHUNKS = 256, 256
PLAIN_CHAR = rf'[^"\\\x00-\x1F{SPECIAL_CLASS}]'  # a string character written as itself
NON_DIGIT_CHAR = rf'[^"\\\x00-\x1F0-9{SPECIAL_CLASS}]'
MAX_EXCLUDED_KEY = 64  # longest declared name a key regex steers around (groups nest per character)


def _distinct_key(i: int) -> str:
    """The i-th (from 1) of a free-form object's first keys, which no other position can spell:
    i characters without escapes, the last no digit, or (i up to 9) any key ending in the digit i
    ("feed1", "feed2"). Two positions' keys differ in length or in their last character."""
    length = f"{PLAIN_CHAR}{{{i - 1}}}{NON_DIGIT_CHAR}" if i > 1 else NON_DIGIT_CHAR
    return f"(?:{length}|{STRING_CHAR}*{i})" if i <= 9 else length


def _plain(c: str) -> bool:
    return c not in '"\\' and ord(c) >= 0x20 and not 0xE000 <= ord(c) <= 0xEFFF


def key_except(names: list[str]) -> str | None:
    """A JSON string (quotes included) whose text is none of ``names``, or None when a name is
    too long to steer around. While the key is still a prefix of some name it is written without
    escapes (an escaped spelling of a name would be that name); once it differs, anything goes."""
    if any(len(n) > MAX_EXCLUDED_KEY for n in names):
        return None
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[""] = {}  # a name ends here
    # A character class spelled at every trie node costs its UTF-8 continuation states at every
    # node (outlines-core does not minimise): the non-ASCII characters no name holds leave the
    # trie through one class after one alternation of all prefixes, so those states exist once.
    held = sorted({c for n in names for c in n if ord(c) > 0x7F})
    foreign = f'[^\\x00-\\x7F{SPECIAL_CLASS}{"".join(map(escape, held))}]'

    def stop(node: dict) -> list[str]:
        """Prefixes of names, themselves no name: the key ends there."""
        kids = sorted(c for c in node if c and _plain(c))  # others need escapes
        alts = [] if "" in node else [""]
        for c in kids:
            below = stop(node[c])
            if below:
                alts.append(escape(c) + alternation(below))
        return alts

    def prefix(node: dict) -> list[str]:
        """Every prefix of a name, written plainly (the empty one included)."""
        return [""] + [escape(c) + alternation(prefix(node[c])) for c in sorted(node) if c and _plain(c)]

    def turn(node: dict) -> list[str]:
        """Prefixes of names, then an ASCII character or a non-ASCII one some name holds that
        leaves them: any string may follow."""
        kids = sorted(c for c in node if c)
        alts = [f'[^"\\\\\\x00-\\x1F\\x80-\\x{{10FFFF}}{"".join(map(escape, kids))}]']
        alts += [escape(c) for c in held if c not in kids and _plain(c)]
        alts += [escape(c) + alternation(turn(node[c])) for c in kids if _plain(c)]
        return alts
    # the free tail once written, not once per trie node: the regex grows with the names' length only
    ends = stop(trie)
    free = f"(?:{alternation(turn(trie))}|{alternation(prefix(trie))}{foreign}){STRING_CHAR}*"
    return f'"(?:{alternation(ends)}|{free})"' if ends else f'"{free}"'


# With extra keys, a translation written out (not linked) lets objects of at most this many declared
# keys write undeclared ones (each declared key written copies the undeclared key's DFA states);
# grammar.compile_json_schema links a schema whose objects hold more
EXPANDED_EXTRA_AFTER = 8
# free-form objects with minProperties write that many keys that differ (_distinct_key), up to this many
MAX_FREE_MIN_PROPERTIES = 32
MAX_DECIMALS = 6  # multipleOf 10**-k up to this k: 2**k exact fractions are written
# past MAX_MULTIPLES within the bounds, each of the multiples this close to zero is still tried
NEAR_MULTIPLES = 2_000
INTEGER = r"-?(?:0|[1-9][0-9]*)"
FRACTION = r"(?:\.[0-9]+)?"
EXPONENT = r"(?:[eE][+-]?[0-9]+)?"
NUMBER = INTEGER + FRACTION + EXPONENT
BOOLEAN = r"(?:true|false)"
NULL = r"null"

# a calendar date, years 0001-9999 (Python's date refuses year 0), February 29th in leap years
DATE = (r"(?:(?:[1-9][0-9]{3}|0(?:[1-9][0-9]{2}|0(?:[1-9][0-9]|0[1-9])))-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])"
        r"|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1[0-9]|2[0-8]))"
        r"|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][48]|[13579][26]|[2468]0)00)-02-29)")
STRING_FORMATS = {
    "date": f'"{DATE}"',
    "time": r'"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"',
    "date-time": f'"{DATE}[T ]' r'(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"',
    "uuid": r'"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"',
    "ipv4": r'"(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"',
    "email": r'"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]{1,63}(?:\.[A-Za-z0-9-]{1,63}){1,4}"',
    "hostname": r'"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?){0,8}"',
    "uri": r'"[A-Za-z][A-Za-z0-9+.-]{0,15}:[A-Za-z0-9\-._~:/?#\[\]@!$&\x27()*+,;=%]{1,200}"',
    "byte": r'"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?"',  # OpenAPI: base64
}


def _more_formats() -> dict[str, str]:
    """Formats written as a subset of what they name: ASCII IRIs and hostnames, URI references
    without percent-escapes, regexes without metacharacters (always valid, if plain)."""
    h = "[0-9a-fA-F]{1,4}"
    ipv6 = "|".join([f"(?:{h}:){{7}}{h}", f"(?:{h}:){{1,7}}:", f"(?:{h}:){{1,6}}:{h}"]
                    + [f"(?:{h}:){{1,{k}}}(?::{h}){{1,{7 - k}}}" for k in range(1, 6)]
                    + [f":(?:(?::{h}){{1,7}}|:)"])
    sec, day = "[0-9]+S", "[0-9]+D"
    minute = f"[0-9]+M(?:{sec})?"
    time = f"T(?:[0-9]+H(?:{minute})?|{minute}|{sec})"
    month = f"[0-9]+M(?:{day})?"
    duration = f"P(?:(?:{day}|{month}|[0-9]+Y(?:{month})?)(?:{time})?|{time}|[0-9]+W)"
    pointer = f"(?:/(?:[^\"\\\\~/\\x00-\\x1F{SPECIAL_CLASS}]|~[01])*)*"
    part = "[A-Za-z0-9\\-._~!$&\x27()*+,;=@:/?]*"
    relative = f"(?:/?[A-Za-z0-9\\-._~!$&\x27()*+,;=@]+(?:/[A-Za-z0-9\\-._~!$&\x27()*+,;=@:]*)*)?(?:\\?{part})?(?:#{part})?"
    uri = STRING_FORMATS["uri"][1:-1]
    var = "[A-Za-z0-9_]+(?:\\*|:[1-9][0-9]{0,3})?"
    label = "[A-Za-z0-9](?:-?[A-Za-z0-9]){0,30}"
    return {
        "ipv6": f'"(?:{ipv6})"', "duration": f'"{duration}"', "json-pointer": f'"{pointer}"',
        "relative-json-pointer": f'"(?:0|[1-9][0-9]*)(?:#|{pointer})"', "uri-reference": f'"(?:{uri}|{relative})"',
        "iri": STRING_FORMATS["uri"], "iri-reference": f'"(?:{uri}|{relative})"',
        "uri-template": f'"(?:[A-Za-z0-9\\-._~:/?#\\[\\]@!$&\x27()*+,;=]|\\{{[+#./;?&]?{var}(?:,{var})*\\}})*"',
        "idn-email": STRING_FORMATS["email"], "idn-hostname": f'"{label}(?:\\.{label}){{0,8}}"',
        "host-name": STRING_FORMATS["hostname"], "ip-address": STRING_FORMATS["ipv4"], "regex": '"[A-Za-z0-9 _]*"',
    }


STRING_FORMATS.update(_more_formats())
# The ASCII classes the formats' states loop on or count (each as the bytes it holds): their
# token runs are built with the vocabulary (automata.warm_runs), not on a format's first mask
# (~2 ms each); tests/test_lazy.py checks that the formats' states take no other.
FORMAT_CLASSES = tuple(c.encode() for c in (
    "0123456789ABCDEFabcdef", "+/0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "-0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "+-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz",
    "%+-.0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz",
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz",
    " 0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz",
    "!$&'()*+,-./0123456789:;=@ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~",
    "!$&'()*+,-./0123456789:;=?@ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~",
    "!$&'()*+,-.0123456789;=@ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz~",
    "!#$%&'()*+,-./0123456789:;=?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]_abcdefghijklmnopqrstuvwxyz~",
    "!#$&'()*+,-./0123456789:;=?@ABCDEFGHIJKLMNOPQRSTUVWXYZ[]_abcdefghijklmnopqrstuvwxyz~",
))
# Formats a validator may assert (JSON Schema's, earlier drafts', OpenAPI's); any other name is
# an annotation: validators ignore it, so any string is valid.
ASSERTED_FORMATS = set(STRING_FORMATS) | {"host-name", "ip-address", "color", "utc-millisec",
    "date-time", "date", "time", "duration", "email", "idn-email", "hostname", "idn-hostname", "ipv4",
    "ipv6", "uri", "uri-reference", "iri", "iri-reference", "uuid", "uri-template", "json-pointer",
    "relative-json-pointer", "regex", "int32", "int64", "float", "double", "byte"}

CONDITIONS = {"if", "then", "else", "dependentSchemas"}
# a number bound and the bound of the numbers it leaves out
COMPLEMENTS = {"minimum": "exclusiveMaximum", "exclusiveMinimum": "maximum", "maximum": "exclusiveMinimum",
               "exclusiveMaximum": "minimum"}
MAX_CONDITIONS = 4  # each doubles the schema (written as a choice)
MAX_ENUM = 10_000  # an enum's values become one alternation in the regex
MAX_EXPANSION = 4_000_000  # characters all $ref expansions may produce (an automaton takes 2 M at most)

# Keywords that describe or organise a schema without constraining instances.
ANNOTATIONS = {
    "title", "description", "default", "examples", "example", "$schema", "$id", "id", "$comment",
    "deprecated", "readOnly", "writeOnly", "definitions", "$defs", "contentMediaType",
    "contentEncoding", "$anchor", "markdownDescription", "enumDescriptions", "x-examples",
    "discriminator", "xml", "externalDocs", "nullable", "errorMessage", "additionalItems_doc",
}

TYPE_KEYWORDS = {
    "string": {"minLength", "maxLength", "pattern", "format"},
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
    "array": {"items", "prefixItems", "minItems", "maxItems", "uniqueItems", "contains", "additionalItems"},
    "object": {"properties", "required", "additionalProperties", "minProperties", "maxProperties",
               "patternProperties", "propertyNames", "dependencies", "dependentRequired"},
}
TYPE_KEYWORDS["integer"] = TYPE_KEYWORDS["number"]
# patternProperties patterns that re.search finds in every string (so in every key)
MATCH_ANY_KEY = {"", ".*", "^.*", ".*$", "^", "$", "(.*)", "^(.*)"}
ALL_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")


@dataclass
class Options:
    whitespace: str = WHITESPACE
    strict: bool = True
    max_depth: int = 3  # how deep recursive $refs and untyped values nest
    max_repeat: int = 256  # the largest bound on item counts written into the regex
    max_length: int = 256  # the largest bound on string lengths (each character a DFA state)
    ref_budget: int | None = None  # lenient: $ref expansion characters before references are written loosely
    count_above: int | None = None  # plain strings with a longer maxLength are counted beside the DFA
    link: bool = False  # each referenced definition written once, uses as markers (automata.linked)
    # undeclared keys after the declared ones: True where the schema allows them, None where an
    # object's additionalProperties says so explicitly, False (default) never
    extra_keys: bool | None = False
    link_count_from: int | None = None  # linking: strings whose bounds differ this much are counted
    max_expansion: int = MAX_EXPANSION  # characters all $ref expansions may produce


@dataclass
class Translation:
    regex: str
    unenforced: list[tuple[str, str]] = field(default_factory=list)  # (pointer, keyword)
    counters: list[int] = field(default_factory=list)  # limits of the counted strings' loops, by marker
    definitions: list[str] = field(default_factory=list)  # with link: the k-th definition's regex
    # free values nesting containers, written out (thousands of DFA states each; linked, one small definition)
    free_values: int = 0
    narrowed: int = 0  # objects whose undeclared keys this translation leaves out (EXPANDED_EXTRA_AFTER)
    cut: int = 0  # recursive $refs cut at max_depth (linked, they nest as deep as the budget allows)


def _json_literal(value: Any) -> str:
    return escape(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _ptr(pointer: str, *parts: Any) -> str:
    return pointer + "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)




class _Translator:
    def __init__(self, root: Any, options: Options) -> None:
        self.root = root
        self.o = options
        self.ws = options.whitespace
        self.unenforced: list[tuple[str, str]] = []
        self.expanding: list[str] = []  # $refs being expanded, outermost first
        self.expanded = 0  # characters produced by $ref expansions so far
        self.counters: list[int] = []  # the characters each counted string's loop may take
        self.links: dict[str, int] = {}  # with link: a reference (and its siblings) -> its definition
        self.definitions: list[str | None] = []  # with link: each definition's regex (None while written)
        self.free_values = 0
        self.narrowed = 0
        self.cut = 0
        # embedded resources: an $id below the root with more than a fragment (a "#name" id is an anchor)
        self.resources = any(isinstance(x.get("$id"), str) and not x["$id"].startswith("#")
                             for x in _subschemas(root) if x is not root)

    def skip(self, pointer: str, keyword: str, why: str) -> None:
        if self.o.strict:
            raise SchemaError(why, pointer=pointer, keyword=keyword)
        self.unenforced.append((pointer, keyword))

    # ---- dispatch ----

    def value(self, s: Any, p: str) -> str:
        if s is True or s == {}:
            return self.any_value(self.o.max_depth, p)
        if s is False:
            raise Unsatisfiable("the schema `false` accepts nothing", pointer=p, keyword="false")
        if not isinstance(s, dict):
            raise SchemaError(f"a schema must be an object or a boolean, not {type(s).__name__}", pointer=p)
        if "$ref" in s:
            return self.ref(s, p)
        if "allOf" in s:
            finite = self.finite_values(s, p)
            return finite if finite is not None else self.value(self.merge_all_of(s, p), p)
        if "anyOf" in s or "oneOf" in s:
            return self.choice(s, p)
        if "not" in s:
            return self.value(self.fold_not(s, p), p)
        if CONDITIONS & s.keys():
            try:
                return self.value(self.fold_conditions(s, p), p)
            except SchemaError as e:
                if isinstance(e, Unsatisfiable) or e.keyword != "not":
                    raise
                kw = "if" if "if" in s else "dependentSchemas"
                raise SchemaError(f"its condition's negation cannot be expressed by the token mask ({e})",
                                  pointer=p, keyword=kw) from None
        for k in ("unevaluatedProperties", "unevaluatedItems", "$dynamicRef", "$recursiveRef"):
            if k in s:
                self.skip(p, k, "this keyword cannot be expressed by the token mask")
        if "const" in s:
            return self.literal([s["const"]], s, p, "const")
        if "enum" in s:
            if not isinstance(s["enum"], list) or not s["enum"]:
                raise SchemaError("enum must be a non-empty array", pointer=p, keyword="enum")
            if len(s["enum"]) > MAX_ENUM:
                raise SchemaError(f"{len(s['enum'])} values; at most {MAX_ENUM} are supported", pointer=p, keyword="enum")
            return self.literal(s["enum"], s, p, "enum")
        # keywords of one type leave values of the others free (an untyped {"minLength": 2} takes
        # 12 too); those are written shallow, as a subset, so untyped schemas stay small
        untyped = "type" not in s and any(kws & s.keys() for kws in TYPE_KEYWORDS.values())
        parts, unsatisfiable = [], None
        for t in self.types(s, p):
            try:
                parts.append(self.free_value(t, p) if untyped and not TYPE_KEYWORDS.get(t, set()) & s.keys()
                             else self.typed(t, s, p))
            except Unsatisfiable as e:  # no value of this type fits; the others still may
                unsatisfiable = unsatisfiable or e
        if not parts:
            raise unsatisfiable
        return alternation(parts)

    def types(self, s: dict, p: str) -> list[str]:
        t = s.get("type")
        if t is None:
            return ["object", "array", "string", "number", "boolean", "null"]
        ts = [t] if isinstance(t, str) else t
        if not isinstance(ts, list) or not ts or any(x not in ALL_TYPES for x in ts):
            raise SchemaError(f"unknown type {t!r}", pointer=p, keyword="type")
        if "integer" in ts and "number" in ts:
            ts = [x for x in ts if x != "integer"]
        return list(dict.fromkeys(ts))

    def typed(self, t: str, s: dict, p: str) -> str:
        if t == "string":
            return self.string(s, p)
        if t in ("number", "integer"):
            return self.number(s, p, t == "integer")
        if t == "boolean":
            return BOOLEAN
        if t == "null":
            return NULL
        if t == "array":
            return self.array(s, p)
        return self.object(s, p)

    # ---- combinators ----

    def ref(self, s: dict, p: str) -> str:
        ref = s["$ref"]
        target = self.value_target(ref, p)
        siblings = {k: v for k, v in s.items() if k != "$ref" and k not in ANNOTATIONS}
        if siblings:
            target = {"allOf": [target, siblings]}
        if self.o.link:
            return self.linked(json.dumps([ref, siblings, self.o.strict], sort_keys=True),
                               lambda: self.value(target, ref), p)
        # only recursion is cut: a chain of distinct $refs is finite and expands in full
        if self.expanding.count(ref) >= self.o.max_depth:
            self.cut += 1
            raise _TooDeep()
        budget = self.o.ref_budget
        if budget is not None and (self.expanded > budget or budget == 0):
            self.skip(p, "$ref", "the references expand past the regex size bound")
            return self.loose(target, p)
        self.expanding.append(ref)
        try:
            out = self.value(target, ref)
        finally:
            self.expanding.pop()
        # definitions that refer to each other many times over expand exponentially: stop early
        self.expanded += len(out)
        if self.expanded > self.o.max_expansion:
            raise SchemaError(f"expanding the references gives a regex over {self.o.max_expansion} characters",
                              pointer=p, keyword="$ref")
        return out

    def linked(self, key: str, write: Callable[[], str], p: str) -> str:
        """The marker of the definition ``key``, written by ``write`` on first use; a use while it
        is being written (recursion) is its marker too."""
        k = self.links.get(key)
        if k is None:
            k = len(self.definitions)
            if k >= LINK_SLOTS:
                raise SchemaError(f"more than {LINK_SLOTS} referenced definitions", pointer=p, keyword="$ref")
            self.links[key] = k
            self.definitions.append(None)
            try:
                self.definitions[k] = write()
            except BaseException:
                # what was written meanwhile may name this definition: drop it all
                self.links = {x: i for x, i in self.links.items() if i < k}
                del self.definitions[k:]
                raise
        return link_symbol(k)

    def definer(self, p: str) -> Callable[[str], str]:
        """Linking: a regex -> the marker of a definition holding it (one per distinct text)."""
        return lambda regex: self.linked(json.dumps(["regex", regex]), lambda: regex, p)

    def finite_values(self, s: dict, p: str) -> str | None:
        """When ``s`` or a branch of its allOf lists its values (const or enum), the listed values
        that the validator finds valid against all of ``s``, written as JSON: exact whatever the
        other branches say. None when no branch lists values or the validator cannot read ``s``."""
        listed = None
        for sub in [s, *(s["allOf"] if isinstance(s["allOf"], list) else [])]:
            sub = self.resolved(sub, p)  # a reference's siblings only narrow: the validator sees them
            if isinstance(sub, dict) and "const" in sub:
                listed = [sub["const"]]
            elif isinstance(sub, dict) and isinstance(sub.get("enum"), list) and 0 < len(sub["enum"]) <= MAX_ENUM:
                listed = sub["enum"]
            if listed is not None:
                break
        if listed is None:
            return None
        verdicts = _checks(listed, s, self.root)
        if None in verdicts:
            return None
        keep = [v for v, ok in zip(listed, verdicts) if ok]
        if not keep:
            raise Unsatisfiable("no listed value satisfies the rest of the schema", pointer=p, keyword="allOf")
        return alternation([_json_literal(v) for v in keep])

    def merge_all_of(self, s: dict, p: str) -> dict:
        subs = s["allOf"]
        if not isinstance(subs, list) or not subs:
            raise SchemaError("allOf must be a non-empty array", pointer=p, keyword="allOf")
        merged = {k: v for k, v in s.items() if k not in ("allOf", *_POSITIONAL, *_MEMBERS)}
        positional = [_positional(s)]  # each branch's (prefix item schemas, schema of the rest)
        members = [_members(s)]  # each branch's (properties, additionalProperties), patterns aside
        closed: list[set] = []  # property sets of branches that forbid other properties
        if s.get("additionalProperties", True) is not True:
            closed.append(set(s.get("properties", {})))
        for i, sub in enumerate(subs):
            while isinstance(sub, dict) and "$ref" in sub and len(sub) == 1:
                sub = self.value_target(sub["$ref"], _ptr(p, "allOf", i))
            if sub is True:
                continue
            if not isinstance(sub, dict):
                raise Unsatisfiable("the schema `false` accepts nothing", pointer=_ptr(p, "allOf", i), keyword="allOf")
            if "allOf" in sub:
                sub = self.merge_all_of(sub, _ptr(p, "allOf", i))
            if sub.get("additionalProperties", True) is not True:
                closed.append(set(sub.get("properties", {})))
            positional.append(_positional(sub))
            members.append(_members(sub))
            for k, v in sub.items():
                if k in ANNOTATIONS or k.startswith("x-") or k in _POSITIONAL or k in _MEMBERS:
                    continue
                if k not in merged:
                    merged[k] = v
                elif k == "properties":
                    props = dict(merged[k])
                    for name, ps in v.items():
                        props[name] = {"allOf": [props[name], ps]} if name in props else ps
                    merged[k] = props
                elif k == "required":
                    merged[k] = list(dict.fromkeys([*merged[k], *v]))
                elif k == "not":
                    merged[k] = {"anyOf": [merged[k], v]}
                elif k == "type":
                    a = {merged[k]} if isinstance(merged[k], str) else set(merged[k])
                    b = {v} if isinstance(v, str) else set(v)
                    both = (a & b) | ({"integer"} if "integer" in a | b and "number" in a | b else set())
                    if not both:
                        raise Unsatisfiable("allOf branches require different types", pointer=p, keyword="allOf")
                    merged[k] = sorted(both)
                elif k in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties"):
                    merged[k] = max(merged[k], v)
                elif k in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties"):
                    merged[k] = min(merged[k], v)
                elif k == "multipleOf" and all(isinstance(x, int) and not isinstance(x, bool) and x > 0
                                                for x in (merged[k], v)):
                    merged[k] = math.lcm(merged[k], v)  # integer steps divide exactly: both hold
                elif merged[k] != v:
                    self.skip(_ptr(p, "allOf", i), k, "allOf branches disagree on this keyword")
        if "patternProperties" in merged:
            # patterns apply beside the branches' members: merged as declared, their disagreement refused
            for props, extra in members:
                if props:
                    merged["properties"] = {n: {"allOf": [merged["properties"][n], v]} if n in merged.get("properties", {})
                                            else v for n, v in {**merged.get("properties", {}), **props}.items()}
                if extra is not True and merged.setdefault("additionalProperties", extra) != extra:
                    self.skip(p, "additionalProperties", "allOf branches disagree on this keyword")
            names = set(merged.get("properties", {}))
            if any(names - c for c in closed):
                self.skip(p, "additionalProperties", "a branch of allOf forbids properties another adds")
        else:
            # a key's schema is every branch's for it: its property there, else that branch's
            # additionalProperties; a key some branch closes out is never written
            names = list(dict.fromkeys(n for props, _ in members for n in props))
            props = {}
            for n in names:
                parts = [b[n] if n in b else extra for b, extra in members]
                if False in parts:
                    if n in merged.get("required", []):  # no object fits; values of other types may
                        types = merged.get("type", list(ALL_TYPES))
                        others = [t for t in ([types] if isinstance(types, str) else types) if t != "object"]
                        if not others:
                            raise Unsatisfiable(f"required {n!r} is closed out by a branch of allOf",
                                                pointer=p, keyword="allOf")
                        merged["type"] = others
                    continue
                props[n] = _conjunction(parts)
            if names:
                merged["properties"] = props
            extra = _conjunction([e for _, e in members])
            if extra is not True:
                merged["additionalProperties"] = False if False in [e for _, e in members] else extra
        # an item is bound by every branch's schema for its position: a branch's prefixItems does not
        # move another branch's items along (items of a schema without prefixItems covers every item)
        positional = [x for x in positional if x is not None]
        if len(positional) == 1:
            merged["prefixItems"], merged["items"] = positional[0]
        elif positional:
            width = max(len(prefix) for prefix, _ in positional)
            merged["prefixItems"] = [_conjunction([prefix[i] if i < len(prefix) else rest for prefix, rest in positional])
                                     for i in range(width)]
            merged["items"] = _conjunction([rest for _, rest in positional])
        return merged

    def fold_not(self, s: dict, p: str) -> dict:
        """``s`` with its ``not`` written as keywords the mask enforces, where that is exact: a
        schema that accepts everything (then nothing fits), excluded types, forbidden keys
        (``required`` of keys the object may leave out), a string length range, a double
        negation, and ``anyOf`` of these (each excluded in turn). Anything else is skipped."""
        rest = {k: v for k, v in s.items() if k != "not"}
        pn = _ptr(p, "not")
        negated, also = [s["not"]], []
        while negated:
            n = negated.pop()
            while isinstance(n, dict) and set(n) - ANNOTATIONS == {"$ref"}:
                n = self.value_target(n["$ref"], pn)
            if n is False:
                continue
            if n is True:
                n = {}
            if not isinstance(n, dict):
                raise SchemaError("not must be a schema", pointer=pn, keyword="not")
            n = {k: v for k, v in n.items() if k not in ANNOTATIONS}
            if _accepts_everything(n):
                raise Unsatisfiable("'not' of a schema that accepts everything accepts nothing", pointer=p, keyword="not")
            if set(n) == {"anyOf"} and isinstance(n["anyOf"], list):
                negated += n["anyOf"]  # not (A or B) = not A and not B
            elif set(n) == {"not"}:
                also.append(n["not"])  # not not A = A
            elif set(n) == {"type"}:
                rest = self.exclude_types(rest, n["type"], p)
            elif (names := _required_names(n)) is not None:
                rest = self.forbid_keys(rest, names, p)
            elif set(n) <= {"type", "minLength", "maxLength"} and n.get("type", "string") == "string":
                outside = self.outside_lengths(n, p)
                if outside is not None:
                    also.append(outside)
            elif set(n) - {"type"} and set(n) <= {"type", *COMPLEMENTS} and n.get("type", "number") == "number" \
                    and all(isinstance(n[k], (int, float)) and not isinstance(n[k], bool) for k in COMPLEMENTS if k in n):
                # not (a and b) = not a or not b; an untyped bound passes every non-number
                out = [{"type": [t for t in ALL_TYPES if t not in ("number", "integer")]}] if "type" in n else []
                also.append({"anyOf": out + [{"type": "number", COMPLEMENTS[k]: n[k]} for k in COMPLEMENTS if k in n]})
            else:
                self.skip(p, "not", "this 'not' cannot be expressed by the token mask")
        return {"allOf": [rest, *also]} if also else rest

    def fold_conditions(self, s: dict, p: str) -> dict:
        """if/then/else and dependentSchemas as choices: (if and then) or (not if and else), a
        dependent schema being 'then' to 'the key is present'; then or else without if, and if
        alone, ask nothing. Each condition doubles the schema, so a few at most."""
        rest = {k: v for k, v in s.items() if k not in CONDITIONS}
        conds = []
        if "if" in s and ("then" in s or "else" in s):
            conds.append((s["if"], s.get("then", True), s.get("else", True)))
        deps = s.get("dependentSchemas", {})
        if not isinstance(deps, dict):
            raise SchemaError("dependentSchemas must be an object", pointer=p, keyword="dependentSchemas")
        conds += [({"required": [name]}, dep, True) for name, dep in deps.items() if dep is not True]
        if len(conds) > MAX_CONDITIONS:
            self.skip(p, "if" if "if" in s else "dependentSchemas",
                      f"more than {MAX_CONDITIONS} conditions (if, dependentSchemas) in one schema")
            return rest
        # the schema's own keywords come first in every branch, so its properties keep their order
        prior: list = []
        for cond, then, other in conds:
            prior = [{"anyOf": [{"allOf": [rest, *prior, cond, then]}, {"allOf": [rest, *prior, {"not": cond}, other]}]}]
        return prior[0] if prior else rest

    def outside_lengths(self, n: dict, p: str) -> dict | None:
        """``not`` of a string length range: the strings outside it, and every other type when
        ``n`` is typed (an untyped length bound passes any non-string). None: ``n`` accepts nothing,
        so its ``not`` adds no constraint."""
        lo, hi = self.bound(n, p, "minLength") or 0, self.bound(n, p, "maxLength")
        if hi is not None and lo > hi:  # no string fits: n is nothing (typed) or every non-string
            return None if "type" in n else {"type": "string"}
        out = [{"type": [t for t in ALL_TYPES if t not in ("string", "integer")]}] if "type" in n else []
        if lo > 0:
            out.append({"type": "string", "maxLength": lo - 1})
        if hi is not None:
            out.append({"type": "string", "minLength": hi + 1})
        if not out:
            raise Unsatisfiable("'not' of a schema that accepts every string and every other value",
                                pointer=p, keyword="not")
        return {"anyOf": out}

    def exclude_types(self, s: dict, excluded: Any, p: str) -> dict:
        gone = {excluded} if isinstance(excluded, str) else set(excluded) if isinstance(excluded, list) else None
        if not gone or not gone <= set(ALL_TYPES):
            raise SchemaError(f"unknown type {excluded!r}", pointer=_ptr(p, "not"), keyword="type")
        types = self.types(s, p)
        allowed = set(types) | ({"integer"} if "number" in types else set())
        if "number" in gone:
            gone.add("integer")
        elif "integer" in gone and "number" in allowed:
            self.skip(p, "not", "numbers that are not integers cannot be expressed by the token mask")
            return s
        kept = sorted(allowed - gone)
        if "number" in kept:
            kept.remove("integer")
        if not kept:
            raise Unsatisfiable("'not' excludes every type the schema allows", pointer=p, keyword="not")
        return {**s, "type": kept}

    def forbid_keys(self, s: dict, names: list, p: str) -> dict:
        """``not: {required: names}``: an object (anything else satisfies ``required``) that lacks
        at least one of ``names``; exact when all but one are always present."""
        always = set(s.get("required") or [])
        missing = [n for n in dict.fromkeys(names) if n not in always]
        if len(missing) != 1:
            if not missing:
                raise Unsatisfiable("'not' forbids keys that are required", pointer=p, keyword="not")
            self.skip(p, "not", "'not' of several optional keys at once cannot be expressed by the token mask")
            return s
        s = self.exclude_types(s, [t for t in ALL_TYPES if t != "object"], p)
        rule = {"not": {"enum": [missing[0]]}}  # enum: draft 4 has no const
        names_rule = s.get("propertyNames")
        return {**s, "propertyNames": rule if names_rule in (None, True, {}) else {"allOf": [names_rule, rule]}}

    def value_target(self, ref: Any, p: str) -> Any:
        """The schema a local reference names: a JSON pointer (``#/...``) or an anchor (``#name``)."""
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise SchemaError(f"only local references are supported, not {ref!r}", pointer=p, keyword="$ref")
        if self.resources:  # a "#..." inside an embedded resource is relative to that resource
            raise SchemaError("references in a schema with embedded resources ($id below the root) are not "
                              "supported", pointer=p, keyword="$ref")
        fragment = unquote(ref[1:])
        if fragment and not fragment.startswith("/"):
            found = [x for x in _subschemas(self.root)
                     if fragment in (x.get("$anchor"), x.get("$dynamicAnchor")) or x.get("$id") == ref]
            if len(found) != 1:
                raise SchemaError(f"anchor {fragment!r} names {len(found)} schemas, not one", pointer=p, keyword="$ref")
            return found[0]
        target: Any = self.root
        for part in fragment.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                raise SchemaError(f"reference {ref!r} points to nothing", pointer=p, keyword="$ref")
        return target

    def choice(self, s: dict, p: str) -> str:
        kw = "anyOf" if "anyOf" in s else "oneOf"
        branches = s[kw]
        if not isinstance(branches, list) or not branches:
            raise SchemaError(f"{kw} must be a non-empty array", pointer=p, keyword=kw)
        base = {k: v for k, v in s.items() if k not in (kw, *ANNOTATIONS)}
        if "anyOf" in s and "oneOf" in s:
            self.skip(p, "oneOf", "oneOf beside anyOf is not enforced")
            base.pop("oneOf")
        parts = []
        for i, b in enumerate(branches):
            sub = {"allOf": [base, b]} if base else b
            try:
                parts.append(self.value(sub, _ptr(p, kw, i)))
            except (_TooDeep, Unsatisfiable):  # a branch nothing satisfies just drops out
                continue
            except SchemaError as e:
                if e.keyword in ("false", "allOf"):
                    continue
                raise
        if not parts:
            raise Unsatisfiable("no branch can be satisfied", pointer=p, keyword=kw)
        if kw == "oneOf" and len(parts) > 1 and not self.disjoint(branches, p, base):
            exclusive = self.exclusive(base, branches, p)
            if exclusive is None:
                exclusive = self.apart_by_keys(base, branches, p)
            if exclusive is not None:
                return exclusive
            self.skip(p, "oneOf", "branches overlap, so 'exactly one' cannot be enforced")
        return alternation(parts)

    def exclusive(self, base: dict, branches: list, p: str) -> str | None:
        """Overlapping oneOf as each branch without the others (``not`` of their anyOf), when
        every such ``not`` can be written exactly (branches told apart by required keys, say);
        None otherwise."""
        strict = self.o.strict
        self.o.strict = True  # a `not` that cannot be written exactly fails the rewrite, not the schema
        try:
            parts = []
            for i, b in enumerate(branches):
                others = [o for j, o in enumerate(branches) if j != i]
                sub = {"allOf": [x for x in (base, b, {"not": {"anyOf": others}}) if x != {}]}
                try:
                    parts.append(self.value(sub, _ptr(p, "oneOf", i)))
                except Unsatisfiable:
                    continue
            return alternation(parts) if parts else None
        except SchemaError:
            return None
        finally:
            self.o.strict = strict

    def apart_by_keys(self, base: dict, branches: list, p: str) -> str | None:
        """Overlapping object branches narrowed apart: each is written without one key of every
        other branch it is not proved apart from, a key that branch requires and it does not (so
        that branch fails); a branch that cannot leave another out so (it requires all the
        other's keys) is not written. A subset of the oneOf, every value in it matching exactly
        one branch; None when no branch is left."""
        facts = [self.branch_facts(b, p, base) for b in branches]
        if any(f is None or not f["objects"] for f in facts):
            return None
        parts = []
        for i, b in enumerate(branches):
            left_out = []
            for j, f in enumerate(facts):
                if j == i or _values_apart(facts[i], f) or _objects_apart(facts[i], f):
                    continue
                keys = sorted(f["required"] - facts[i]["required"])
                if not keys:
                    break
                left_out.append(keys[0])
            else:
                sub = {"allOf": [x for x in (base, b, *({"not": {"required": [k]}} for k in sorted(set(left_out))))
                                 if x != {}]}
                try:
                    parts.append(self.value(sub, _ptr(p, "oneOf", i)))
                except Unsatisfiable:
                    continue
        return alternation(parts) if parts else None

    def disjoint(self, branches: list, p: str, base: dict | None = None) -> bool:
        """True when no instance can match two of the branches (each taken with ``base``): they
        provably match different JSON types or constants, or they are objects told apart by a key
        one requires and the other forbids, or by a key both require whose constants differ."""
        facts = [self.branch_facts(b, p, base or {}) for b in branches]
        if any(f is None for f in facts):
            return False
        for i, a in enumerate(facts):
            for b in facts[:i]:
                if not (_values_apart(a, b) or _objects_apart(a, b)):
                    return False
        return True

    def resolved(self, b: Any, p: str) -> Any:
        """``b`` with references followed: a reference's siblings only narrow what it names (or
        are ignored, in drafts before 2019-09), so what it names is a sound stand-in for proofs
        that branches are apart."""
        for _ in range(16):
            if not (isinstance(b, dict) and "$ref" in b):
                break
            b = self.value_target(b["$ref"], p)
        return {k: v for k, v in b.items() if k not in ANNOTATIONS} if isinstance(b, dict) else b

    def branch_facts(self, b: Any, p: str, base: dict) -> dict | None:
        """What a proof of disjointness reads from a branch: its kinds (constants or types) and,
        for object-only branches, the keys it requires, its closed key sets, and constants of keys."""
        b = self.resolved(b, p)
        if isinstance(b, dict) and isinstance(b.get("allOf"), list):
            # the facts of all its branches at once; nothing is recorded (it is only read here)
            kept = len(self.unenforced)
            try:
                b = self.merge_all_of(b, p)
            except SchemaError:
                pass
            del self.unenforced[kept:]
        if not isinstance(b, dict):
            return None
        consts = None
        if "const" in b:
            consts = [b["const"]]
        elif isinstance(b.get("enum"), list):
            consts = b["enum"]
        types = None
        if isinstance(b.get("type"), (str, list)):
            ts = [b["type"]] if isinstance(b["type"], str) else b["type"]
            types = {"number" if t == "integer" else t for t in ts}
        if consts is not None:
            types = {_json_type(v) for v in consts} & (types if types is not None else set(ALL_TYPES))
            consts = {_const_key(v) for v in consts}
        parts = [x for x in (self.resolved(base, p), b) if isinstance(x, dict)]
        objects = any(x.get("type") == "object" for x in parts)
        required, allowed, values = set(), set(), {}
        for x in parts:
            if isinstance(x.get("required"), list):
                required |= set(x["required"])
            props = x.get("properties") if isinstance(x.get("properties"), dict) else {}
            if x.get("additionalProperties") is False and not x.get("patternProperties"):
                allowed.add(frozenset(props))  # a closed key set
            for k, v in props.items():
                v = self.resolved(v, p)
                if isinstance(v, dict) and "const" in v:
                    values.setdefault(k, []).append({_const_key(v["const"])})
                elif isinstance(v, dict) and isinstance(v.get("enum"), list):
                    values.setdefault(k, []).append({_const_key(e) for e in v["enum"]})
        if types is None and not objects:
            return None
        return {"types": types, "consts": consts, "objects": objects, "required": required, "allowed": allowed, "values": values}

    def literal(self, values: list, s: dict, p: str, kw: str) -> str:
        """The listed values that also satisfy the sibling keywords, written as JSON."""
        rest = {k: v for k, v in s.items() if k not in ("enum", "const")}
        keep = [v for v, ok in zip(values, _checks(values, rest, self.root)) if ok is not False] if rest else values
        if not keep:  # the schema accepts nothing: an optional property that has it is never written
            raise Unsatisfiable(f"no {kw} value satisfies the rest of the schema", pointer=p, keyword=kw)
        return alternation([_json_literal(v) for v in keep])

    def loose(self, s: Any, p: str) -> str:
        """A value of the JSON types ``s`` declares, its contents free (lenient mode: checked after
        generation)."""
        declared = s.get("type") if isinstance(s, dict) else None
        types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
        if not types or not set(types) <= set(ALL_TYPES):
            return self.any_value(1, p)
        return alternation([self.free_value(t, p) for t in dict.fromkeys(types)])

    def free_value(self, t: str, p: str) -> str:
        """Any value of type ``t``, an array's items and an object's values scalars (a subset)."""
        if t in ("array", "object"):
            return self.container(t, alternation(self.scalars(p)))
        return {"string": self.string({}, p), "number": NUMBER, "integer": INTEGER, "boolean": BOOLEAN,
                "null": NULL}[t]

    def any_value(self, depth: int, p: str) -> str:
        """Any JSON value, containers nesting ``depth`` deep; linked, one recursive definition."""
        if self.o.link:
            return self.linked('["any value"]', lambda: self.any_shape(self.any_value(depth, p), p), p)
        if depth <= 0:
            return alternation(self.scalars(p))
        self.free_values += 1
        return self.any_shape(self.any_value(depth - 1, p), p)

    def any_shape(self, inner: str, p: str) -> str:
        """A scalar, or an array or object whose items and values are ``inner``."""
        return alternation(self.scalars(p) + [self.container("array", inner), self.container("object", inner)])

    def scalars(self, p: str) -> list[str]:
        """Any string, any number, a boolean, null: the alternatives."""
        return [self.string({}, p), NUMBER, BOOLEAN, NULL]

    def container(self, t: str, inner: str) -> str:
        """An array (``t``) whose items, or an object whose values, are ``inner``; any keys."""
        ws = self.ws
        if t == "array":
            return rf"\[{ws}(?:{inner}(?:{ws},{ws}{inner})*)?{ws}\]"
        member = f'"{STRING_CHAR}*"{ws}:{ws}{inner}'
        return rf"\{{{ws}(?:{member}(?:{ws},{ws}{member})*)?{ws}\}}"

    # ---- scalars ----

    def bound(self, s: dict, p: str, kw: str) -> int | None:
        v = s.get(kw)
        if v is None:
            return None
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or v != int(v):
            raise SchemaError("must be a non-negative integer", pointer=p, keyword=kw)
        return int(v)

    def repeat(self, s: dict, p: str, lo_kw: str, hi_kw: str, limit: int) -> tuple[int, int | None]:
        lo, hi = self.bound(s, p, lo_kw) or 0, self.bound(s, p, hi_kw)
        if hi is not None and lo > hi:
            raise Unsatisfiable(f"{lo_kw} {lo} exceeds {hi_kw} {hi}", pointer=p, keyword=hi_kw)
        if lo > limit:
            raise SchemaError(f"{lo} is above the {limit} the mask can count to", pointer=p, keyword=lo_kw)
        if hi is not None and hi > limit:
            self.skip(p, hi_kw, f"{hi} is above the {limit} the mask can count to")
            hi = None
        return lo, hi

    def string(self, s: dict, p: str) -> str:
        counted = self.counted_string(s, p)
        if counted is not None:
            return counted
        # a pattern's length bounds go into one repeated class (a state or a few per character)
        limit = 4 * self.o.max_length if "pattern" in s else self.o.max_length
        lo, hi = self.repeat(s, p, "minLength", "maxLength", limit)
        if "pattern" in s:
            body = self.pattern(s["pattern"], _ptr(p, "pattern"), lo, hi)
            if body is None:
                body = self.pattern(s["pattern"], _ptr(p, "pattern"))
                self.skip(p, "minLength" if lo else "maxLength", "length bounds beside a pattern are not enforced")
            return f'"{body}"'
        fmt = s.get("format")
        if fmt is not None:
            if fmt in STRING_FORMATS:
                if lo or hi is not None:
                    self.skip(p, "maxLength", "length bounds beside a format are not enforced")
                return STRING_FORMATS[fmt]
            if fmt in ASSERTED_FORMATS:
                self.skip(p, "format", f"format {fmt!r} is not enforced")
        if hi is None:
            count = "*" if lo == 0 else f"{{{lo},}}"
        else:
            count = f"{{{lo},{hi}}}"
        return f'"{STRING_CHAR}{count}"'

    def counted_string(self, s: dict, p: str) -> str | None:
        """A plain string whose maxLength is above ``count_above``, written with a counter marker
        (automata.counters), or with ``link`` as a definition of its own; None when counters are
        off, used up, or do not apply."""
        hi = self.bound(s, p, "maxLength")
        if self.o.count_above is None or hi is None or hi <= self.o.count_above or "pattern" in s \
                or s.get("format") in ASSERTED_FORMATS:
            return None
        lo = self.bound(s, p, "minLength") or 0
        if lo > hi:
            raise Unsatisfiable(f"minLength {lo} exceeds maxLength {hi}", pointer=p, keyword="maxLength")
        if self.o.link:
            # one definition per bound however many values use it: counted when its bounds are
            # link_count_from apart or more (no token can then pass the limit from outside the
            # loop, see automata.linked), else spelled in its own DFA, past max_length in chunks
            span = self.o.link_count_from
            counted = self.counted(lo, hi) if span is not None and hi - lo >= span and lo <= self.o.max_length else None
            if counted is not None:
                return self.linked(json.dumps(["counted", lo, hi]), lambda: counted, p)
            if hi > LINK_CHUNK * MAX_CHUNKS:
                return None
            return self.linked(json.dumps(["string", lo, hi]), lambda: f'"{self.chunked(lo, hi, p)}"', p)
        if lo > 4 * self.o.max_length:  # the DFA still spells minLength: 16 states a character
            return None
        return self.counted(lo, hi)

    def counted(self, lo: int, hi: int) -> str | None:
        """A string of ``lo`` to ``hi`` characters whose loop is counted: ``lo`` spelled, then the
        loop marked by the marker of its limit (loops with one limit share a marker); None when
        the markers are used up."""
        limit = hi - lo
        if limit not in self.counters:
            if len(self.counters) >= COUNTER_SLOTS:
                return None
            self.counters.append(limit)
        return f'"{STRING_CHAR}{{{lo}}}(?:{STRING_CHAR}|{counter_symbol(self.counters.index(limit))})*"'

    def chunked(self, lo: int, hi: int, p: str) -> str:
        """From ``lo`` to ``hi`` string characters, linking: up to max_length spelled at once, more
        as whole chunks of LINK_CHUNK (one definition) and a last partial one. A length is q whole
        chunks and r < LINK_CHUNK characters more, one way only, so configurations stay few (a
        chunk's last characters are walked token by token: a token may run into the next one)."""
        if hi <= self.o.max_length:
            return f"{STRING_CHAR}{{{lo},{hi}}}"
        c = LINK_CHUNK

        def spelled(a: int, b: int) -> str:
            return self.linked(json.dumps(["chars", a, b]), lambda: f"{STRING_CHAR}{{{a},{b}}}", p)
        whole = spelled(c, c)
        q_lo, r_lo, q_hi, r_hi = lo // c, lo % c, hi // c, hi % c
        if q_lo == q_hi:
            return f"{whole}{{{q_lo}}}{spelled(r_lo, r_hi)}"
        last = spelled(0, r_hi)
        more = f"(?:{whole}{{0,{q_hi - q_lo - 2}}}{spelled(0, c - 1)}|{whole}{{{q_hi - q_lo - 1}}}{last})" \
            if q_hi - q_lo >= 2 else last
        return f"{whole}{{{q_lo}}}(?:{spelled(r_lo, c - 1)}|{whole}{more})"

    def pattern(self, pattern: Any, p: str, lo: int = 0, hi: int | None = None) -> str | None:
        """The pattern over JSON string characters; with length bounds, None unless they can be
        written into it (see _counted_items)."""
        if not isinstance(pattern, str):
            raise SchemaError("pattern must be a string", pointer=p, keyword="pattern")
        try:
            tree = sre_parse.parse(pattern)
        except re.error as e:
            raise SchemaError(f"invalid regex {pattern!r}: {e}", pointer=p, keyword="pattern") from None
        items = list(tree)
        anchored_start = bool(items) and items[0][0] == sre_constants.AT and items[0][1] == sre_constants.AT_BEGINNING
        anchored_end = bool(items) and items[-1][0] == sre_constants.AT and items[-1][1] in (sre_constants.AT_END, sre_constants.AT_END_STRING)
        if anchored_start:
            items = items[1:]
        if anchored_end:
            items = items[:-1]
        if lo or hi is not None:
            if not (anchored_start and anchored_end):
                return None
            items = _counted_items(items, lo, hi, p)
            if items is None:
                return None
        body = PatternRegex(pattern, p).seq(items)
        free = STRING_CHAR + "*"
        return (free if not anchored_start else "") + body + (free if not anchored_end else "")

    def number(self, s: dict, p: str, integer: bool) -> str:
        lo, hi, lo_incl, hi_incl = s.get("minimum"), s.get("maximum"), True, True
        for kw, strict_bound in (("exclusiveMinimum", "lo"), ("exclusiveMaximum", "hi")):
            v = s.get(kw)
            if isinstance(v, bool):  # draft 4: a flag on minimum/maximum
                if v and strict_bound == "lo":
                    lo_incl = False
                elif v:
                    hi_incl = False
            elif isinstance(v, (int, float)):
                if strict_bound == "lo" and (lo is None or v >= lo):
                    lo, lo_incl = v, False
                elif strict_bound == "hi" and (hi is None or v <= hi):
                    hi, hi_incl = v, False
        for kw, v in (("minimum", lo), ("maximum", hi)):
            if v is not None and (not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v)):
                raise SchemaError("must be a finite number", pointer=p, keyword=kw)
        step = s.get("multipleOf")
        decimals = None
        whole = integer  # the type asks for integers (else multipleOf 1 does, and 6000.0 is one)
        if step is not None:
            if not isinstance(step, (int, float)) or isinstance(step, bool) or step <= 0:
                raise SchemaError("must be a positive number", pointer=p, keyword="multipleOf")
            exp = Decimal(str(step)).normalize().as_tuple()
            if step == 1 or (integer and step == int(step) == 1):
                integer = True
            elif (out := _multiples_within(lo, lo_incl, hi, hi_incl, step, integer)) is not None:
                if not out:
                    raise Unsatisfiable(f"no number between {lo} and {hi} is a multiple of {step} as jsonschema "
                                        "divides", pointer=p, keyword="multipleOf")
                return out
            elif exp.digits == (1,) and exp.exponent < 0:
                decimals = -exp.exponent
            elif not integer or step != 1:
                self.skip(p, "multipleOf", f"multipleOf {step} is not enforced")
        if decimals is not None:
            # without both bounds: multiples a float holds exactly (12.25, not 0.07), which x / 0.01
            # leaves an integer while x * 100 stays under 2**53
            if decimals > MAX_DECIMALS:
                self.skip(p, "multipleOf", f"multipleOf {step} is not enforced")
                decimals = None
            else:
                near = None if integer else _multiples_near_zero(lo, lo_incl, hi, hi_incl, step, integer)
                cap = (2 ** 53 - 1) // 10 ** decimals
                if lo is None or lo < -cap:
                    lo, lo_incl = -cap, True
                if hi is None or hi > cap:
                    hi, hi_incl = cap, True
        if integer:
            ilo, ihi = _integer_bounds(lo, lo_incl, hi, hi_incl)
            if ilo is not None and ihi is not None and ilo > ihi:
                raise Unsatisfiable(f"no integer lies between {lo} and {hi}", pointer=p, keyword="maximum")
            out = INTEGER if ilo is None and ihi is None else int_range(ilo, ihi)
            return out if whole else rf"{out}(?:\.0+)?"
        if lo is None and hi is None:
            return INTEGER + FRACTION + EXPONENT
        # integer-valued bounds are exact; fractional ones round inward (a valid subset)
        rlo = None if lo is None else math.ceil(lo)
        rhi = None if hi is None else math.floor(hi)
        if lo is not None and rlo != lo:
            lo_incl = True
        if hi is not None and rhi != hi:
            hi_incl = True
        out = number_range(rlo, lo_incl, rhi, hi_incl)
        if out is None:
            if lo is not None and hi is not None and (lo > hi or (lo == hi and not (lo_incl and hi_incl))):
                raise Unsatisfiable(f"minimum {lo} above maximum {hi}", pointer=p, keyword="maximum")
            self.skip(p, "maximum", f"no number with integer bounds lies in [{lo}, {hi}]")
            return NUMBER
        if decimals is not None:
            nonzero = _exact_fractions(decimals)
            out = out.replace(r"(?:\.[0-9]+)?", rf"(?:\.(?:0{{1,{decimals}}}|{nonzero}))?")
            out = out.replace(r"\.0+", rf"\.0{{1,{decimals}}}").replace(r"\.[0-9]*[1-9][0-9]*", rf"\.{nonzero}")
            if near:
                out = alternation([near, out])
        return out

    # ---- containers ----

    def array(self, s: dict, p: str) -> str:
        ws = self.ws
        if "contains" in s:
            return self.array_containing(s, p)
        lo, hi = self.repeat(s, p, "minItems", "maxItems", self.o.max_repeat)
        if s.get("uniqueItems") is True and (hi is None or hi > 1):
            if lo > 1:
                self.skip(p, "uniqueItems", "distinct items cannot be enforced beyond one item")
            else:
                hi = 1  # zero or one item is always unique
        prefix = s.get("prefixItems")
        items = s.get("items", True)
        if isinstance(items, list):  # draft 4 tuple form
            prefix, items = items, s.get("additionalItems", True)
        head, tail = [], None
        for i, x in enumerate(prefix or []):
            try:
                head.append(self.value(x, _ptr(p, "prefixItems", i)))
            except Unsatisfiable:
                if i < lo:
                    raise
                break  # no value fits position i: arrays end before it
        else:
            try:
                tail = None if items is False else self.value(items, _ptr(p, "items"))
            except _TooDeep:  # recursion cut: no further items rather than unbounded nesting
                tail = None
            except Unsatisfiable:
                if len(head) < lo:
                    raise
                tail = None
        top = len(head) if tail is None else hi
        if hi is not None and top is not None:
            top = min(top, hi)
        if self.o.link and tail is not None and len(tail) > 1 and top is not None \
                and top - len(head) >= LINK_REPEATS_FROM:  # (a lone marker is a definition already)
            tail = self.definer(p)(tail)  # counted items: each count costs the root a few states, not an item's
        if top is not None and (lo > top or (hi is not None and lo > hi)):
            raise Unsatisfiable("no item count satisfies minItems/maxItems", pointer=p, keyword="minItems")
        if top == 0:
            return rf"\[{ws}\]"
        sep = f"{ws},{ws}"

        def rest(k: int) -> str:
            """Items after the first k: optional once k >= minItems, none once k == maxItems."""
            if k == top:
                return ""
            if k >= len(head):
                more_lo, more_hi = max(lo - k, 0), None if top is None else top - k
                return f"(?:{sep}{tail}){{{more_lo},{'' if more_hi is None else more_hi}}}"
            item = f"{sep}{head[k]}{rest(k + 1)}"
            return item if k < lo else f"(?:{item})?"

        first = (head[0] if head else tail) + rest(1)
        body = first if lo > 0 else f"(?:{first})?"
        return rf"\[{ws}{body}{ws}\]"

    def array_containing(self, s: dict, p: str) -> str:
        """Arrays with minContains (default 1) to maxContains items that match ``contains``, every
        item matching ``items``; under maxContains the other items are written as 'items and not
        contains'. Beside prefixItems, item counts or uniqueItems, contains is not enforced."""
        rest = {k: v for k, v in s.items() if k not in ("contains", "minContains", "maxContains")}
        lo, hi = self.bound(s, p, "minContains"), self.bound(s, p, "maxContains")
        lo = 1 if lo is None else lo
        if lo == 0 and hi is None:
            return self.array(rest, p)  # always satisfied
        beside = [k for k in ("prefixItems", "minItems", "maxItems", "additionalItems") if k in s]
        if beside or s.get("uniqueItems") is True or isinstance(s.get("items"), list):
            self.skip(p, "contains", f"contains beside {(beside or ['uniqueItems/items'])[0]} is not enforced")
            return self.array(rest, p)
        if hi is not None and lo > hi:
            raise Unsatisfiable(f"minContains {lo} exceeds maxContains {hi}", pointer=p, keyword="maxContains")
        if max(lo, hi or 0) > self.o.max_repeat:
            self.skip(p, "minContains", f"counts above {self.o.max_repeat} are not enforced")
            return self.array(rest, p)
        items, at = s.get("items", True), _ptr(p, "contains")
        try:
            match = self.value({"allOf": [items, s["contains"]]} if items is not True else s["contains"], at)
        except Unsatisfiable:
            if lo > 0:
                raise
            match = None  # no item can match: arrays of the other items only
        try:
            other = self.value(items if hi is None else {"allOf": [items, {"not": s["contains"]}]}, at)
        except Unsatisfiable:
            other = None
        except SchemaError as e:
            if e.keyword != "not":
                raise
            raise SchemaError(f"maxContains needs the items that do not match contains, and {e}", pointer=p,
                              keyword="maxContains") from None
        ws, sep = self.ws, f"{self.ws},{self.ws}"
        none = "" if other is None else f"(?:{other}(?:{sep}{other})*)?"  # no matching item
        if hi == 0 or match is None:
            return rf"\[{ws}{none}{ws}\]"
        before, between, after = ("", "", "") if other is None else \
            (f"(?:{other}{sep})*", f"(?:{other}{sep})*", f"(?:{sep}{other})*")
        count = f"{{{max(lo - 1, 0)},{'' if hi is None else hi - 1}}}"
        some = f"{before}{match}(?:{sep}{between}{match}){count}{after}"
        return rf"\[{ws}{some if lo > 0 else f'(?:{some}|{none})'}{ws}\]"

    def member(self, name: str, ps: Any, p: str) -> str:
        """One ``"name": value`` of the object at ``p``. Linking, a long value is a definition of
        its own: a big object is then many small DFAs rather than one large one."""
        at = _ptr(p, "properties", name)
        regex = self.value(ps, at)
        if self.o.link and len(regex) > LINK_MEMBERS_FROM:
            regex = self.linked(json.dumps(["member", at, self.o.strict]), lambda: regex, at)
        elif self.o.link and _long_repeat(regex):
            regex = self.definer(at)(regex)  # one DFA for every member spelled alike (URIs, e-mails)
        return f'"{escape(json.dumps(name, ensure_ascii=False)[1:-1])}"{self.ws}:{self.ws}{regex}'

    def object(self, s: dict, p: str) -> str:
        """Declared properties in schema order (then undeclared ones the schema allows, as
        ``extra_keys`` says). Where a keyword cannot be expressed exactly, the output is narrowed to a
        subset that always satisfies it."""
        ws = self.ws
        props = dict(s.get("properties", {}) or {})
        if not isinstance(s.get("properties", {}) or {}, dict):
            raise SchemaError("properties must be an object", pointer=p, keyword="properties")
        required = list(s.get("required", []) or [])
        if not isinstance(s.get("required", []) or [], list):
            raise SchemaError("required must be an array", pointer=p, keyword="required")
        extra = s.get("additionalProperties", True)
        for name in required:
            if name not in props:
                if extra is False:
                    raise Unsatisfiable(f"required {name!r} is not among the properties", pointer=p, keyword="required")
                props[name] = extra  # a required undeclared key takes the additionalProperties schema
        for pattern, ps in (s.get("patternProperties") or {}).items():
            try:
                rx = re.compile(pattern)
            except re.error:
                self.skip(p, "patternProperties", f"pattern {pattern!r} is not a Python regex")
                continue
            for name in props:
                if rx.search(name):
                    props[name] = {"allOf": [props[name], ps]}
            extra = False  # undeclared keys are never written, so none can break a pattern
        patterns = s.get("patternProperties") or {}
        if not props and len(patterns) == 1 and next(iter(patterns)) in MATCH_ANY_KEY:
            extra = next(iter(patterns.values()))  # every key matches: free keys take its schema
        if s.get("propertyNames") not in (None, True, {}):
            bad = [n for n, ok in zip(props, _checks(list(props), s["propertyNames"], self.root)) if ok is False]
            for name in bad:
                if name in required:
                    raise Unsatisfiable(f"required {name!r} breaks propertyNames", pointer=p, keyword="propertyNames")
                del props[name]
            extra = False
        dependents = set(s.get("dependentRequired") or {}) | set(s.get("dependencies") or {})
        deps = dict(s.get("dependentRequired") or {})
        for name, dep in (s.get("dependencies") or {}).items():
            if isinstance(dep, list):
                deps[name] = dep
            elif name in required:
                self.skip(p, "dependencies", f"schema dependency of required {name!r} is not enforced")
            else:
                props.pop(name, None)  # never written, so its dependency never applies
        changed = True
        while changed:  # a key that is always present brings its dependencies with it
            changed = False
            for name, dep in deps.items():
                if name in required and not set(dep) <= set(required):
                    required += [d for d in dep if d not in required]
                    changed = True
        min_p, max_p = self.bound(s, p, "minProperties") or 0, self.bound(s, p, "maxProperties")
        # an optional dependent key is written right after the one optional key it needs (the
        # others it needs are required), inside that key's group; any other is never written
        after: dict[str, list[str]] = {}
        for name, dep in deps.items():
            if name in required:
                continue
            missing = [d for d in dep if d not in required]
            if not missing:
                continue  # what it needs is always there
            if len(missing) == 1 and name in props and missing[0] in props and missing[0] not in deps \
                    and not min_p and max_p is None:
                after.setdefault(missing[0], []).append(name)
            else:
                props.pop(name, None)
        for name in required:
            if name not in props:
                props[name] = extra
        members, req = [], []
        declared = bool(props)  # declared keys only, even when none of them can be written
        followers = {n for names in after.values() for n in names}
        for name, ps in props.items():
            if name in followers:
                continue
            try:
                member = self.member(name, ps, p)
                for follower in after.get(name, []):
                    try:
                        member += f"(?:{ws},{ws}{self.member(follower, props[follower], p)})?"
                    except (_TooDeep, Unsatisfiable):
                        pass  # never written
            except _TooDeep:
                if name in required:
                    raise
                continue
            except Unsatisfiable:
                if name not in required:
                    continue  # no value fits: the key is never written
                raise
            members.append(member)
            req.append(name in required)
        if max_p is not None and max_p < sum(req):
            raise Unsatisfiable(f"maxProperties {max_p} is below the {sum(req)} required keys", pointer=p, keyword="maxProperties")
        if members and (min_p > sum(req) or (max_p is not None and max_p < len(members))):
            if min_p > len(members):
                self.skip(p, "minProperties", f"fewer than {min_p} properties can be written")
            # keep the required keys plus the first optional ones: at least min_p, at most max_p
            optional = [i for i, r in enumerate(req) if not r]
            need = max(0, min_p - sum(req))
            for i in optional[:need]:
                req[i] = True
            if max_p is not None:
                drop = set(optional[need:][max_p - sum(req):])
                members = [m for i, m in enumerate(members) if i not in drop]
                req = [r for i, r in enumerate(req) if i not in drop]
        if not members:
            # a free-form key may be a dependent one (under any spelling, escapes included), so an
            # object with dependencies writes no free-form key
            if extra is False or max_p == 0 or dependents or declared:
                if min_p and not dependents:
                    self.skip(p, "minProperties", f"minProperties {min_p} but no property can be written")
                elif min_p:
                    self.skip(p, "dependentRequired", "free-form keys are not written beside dependencies")
                return rf"\{{{ws}\}}"
            if min_p > MAX_FREE_MIN_PROPERTIES:
                self.skip(p, "minProperties", f"more than {MAX_FREE_MIN_PROPERTIES} free-form properties are not enforced")
                min_p = 0
            value = self.any_value(self.o.max_depth - 1, p) if extra is True else self.value(extra, _ptr(p, "additionalProperties"))
            member = f'"{STRING_CHAR}*"{ws}:{ws}{value}'
            if not min_p:
                count = "*" if max_p is None else f"{{0,{max_p - 1}}}"
                return rf"\{{{ws}(?:{member}(?:{ws},{ws}{member}){count})?{ws}\}}"
            # min_p distinct keys first (one key of any spelling when min_p is 1), then any more (a
            # repeated key cannot make fewer)
            firsts = [member] if min_p == 1 else [f'"{_distinct_key(i)}"{ws}:{ws}{value}' for i in range(1, min_p + 1)]
            more = "*" if max_p is None else f"{{0,{max_p - min_p}}}"
            return rf"\{{{ws}{f'{ws},{ws}'.join(firsts)}(?:{ws},{ws}{member}){more}{ws}\}}"
        sep = f"{ws},{ws}"
        define = self.definer(p) if self.o.link and len(members) > LINK_BLOCKS_FROM else None
        more = self.extra_member(s, extra, p, max_p, [*(s.get("properties") or {}), *props, *dependents])
        if more is not None and not self.o.link and len(members) > EXPANDED_EXTRA_AFTER:
            # written out, the undeclared key's DFA is copied after every declared key: linked
            # translations write them (as one definition), this one leaves them out
            self.narrowed += 1
            more = None
        if more is None:
            return rf"\{{{ws}{_member_list(members, req, sep, define=define)}{ws}\}}"
        tail = f"(?:{sep}{more})*"
        if self.o.link:  # one DFA for the undeclared keys rather than a copy after each declared one
            tail = self.definer(p)(tail)
        if True in req:
            return rf"\{{{ws}{_member_list(members, req, sep, define=define)}{tail}{ws}\}}"
        lists = _member_list(members, req, sep, at_least_one=True, define=define)
        return rf"\{{{ws}(?:(?:{lists}|{more}){tail})?{ws}\}}"

    def extra_member(self, s: dict, extra: Any, p: str, max_p: int | None, names: list[str]) -> str | None:
        """An undeclared ``"key": value`` written after the declared ones, its key none of ``names``;
        None where the object may have none, or counts or rules keys in ways this does not follow."""
        if extra is False or max_p is not None or "unevaluatedProperties" in s:
            return None
        if not (self.o.extra_keys or (self.o.extra_keys is None and "additionalProperties" in s)):
            return None
        key = key_except(sorted(set(names)))
        if key is None:
            return None
        try:
            value = self.any_value(self.o.max_depth - 1, p) if extra is True else \
                self.value(extra, _ptr(p, "additionalProperties"))
        except (_TooDeep, Unsatisfiable):
            return None
        return f"{key}{self.ws}:{self.ws}{value}"


def _multiples_within(lo, lo_incl: bool, hi, hi_incl: bool, step, integer: bool) -> str | None:
    """The multiples of ``step`` within the bounds, "" when none, None when not written this way:
    each one when both bounds hold few; else integers by their last digits (numbers.int_multiples)."""
    if lo is not None and hi is not None:
        out = multiples(lo, lo_incl, hi, hi_incl, step, integer)
        if out is not None:
            return out
    if isinstance(step, int):
        return int_multiples(*_integer_bounds(lo, lo_incl, hi, hi_incl), step)
    return None


def expansion_stopped(e: SchemaError, *, depth: bool = False) -> bool:
    """``e`` says the expansion of references stopped at its size bound (with ``depth``, also at
    a recursion past max_depth at the root): a linked translation has neither bound."""
    return e.keyword == "$ref" and ("expanding" in str(e) or (depth and "max_depth" in str(e)))


def _multiples_near_zero(lo, lo_incl: bool, hi, hi_incl: bool, step, integer: bool) -> str | None:
    """Every multiple jsonschema takes among the NEAR_MULTIPLES multiples of ``step`` nearest zero
    within the bounds (3.05 passes multipleOf 0.01, 0.07 does not), where the bounds hold too many
    to write each one; None when that window is empty or cannot be written."""
    width = step * NEAR_MULTIPLES / 2
    center = lo if lo is not None and lo > 0 else hi if hi is not None and hi < 0 else 0
    wlo, whi = center - width, center + width
    if lo is not None and lo >= wlo:
        wlo, wlo_incl = lo, lo_incl
    else:
        wlo_incl = True
    if hi is not None and hi <= whi:
        whi, whi_incl = hi, hi_incl
    else:
        whi_incl = True
    return multiples(wlo, wlo_incl, whi, whi_incl, step, integer) or None


def _integer_bounds(lo, lo_incl: bool, hi, hi_incl: bool) -> tuple[int | None, int | None]:
    """The least and greatest integers within the bounds (None: unbounded)."""
    ilo = None if lo is None else (math.ceil(lo) if lo_incl or lo != int(lo) else int(lo) + 1)
    ihi = None if hi is None else (math.floor(hi) if hi_incl or hi != int(hi) else int(hi) - 1)
    return ilo, ihi


def _exact_fractions(decimals: int) -> str:
    """The nonzero fractions of multiples of 10**-decimals that a float holds exactly: j / 2**decimals
    (25, 5, 75 for two decimals), trailing zeros at will, as an alternation."""
    out = []
    for j in range(1, 2 ** decimals):
        core = f"{j * 5 ** decimals:0{decimals}d}".rstrip("0")
        rest = decimals - len(core)
        out.append(core + (f"0{{0,{rest}}}" if rest else ""))
    return f"(?:{'|'.join(out)})"


def _long_repeat(regex: str) -> bool:
    """Whether ``regex`` repeats something up to LINK_REPEATS_FROM times or more ({a,b}, b that high)."""
    return any(b >= LINK_REPEATS_FROM for b in repeat_bounds(regex))


def _member_list(members: list[str], required: list[bool], sep: str, at_least_one: bool = False,
                 define: Callable[[str], str] | None = None) -> str:
    """Members in order, the optional ones left out at will, ``sep`` between those written; each
    member appears at most twice, so the regex grows linearly with the member count. With
    ``at_least_one`` (no member required) at least one is written. With ``define`` (linking: a
    regex -> the marker of a definition holding it), each block's two forms are definitions."""
    if True in required:
        first = required.index(True)
        head = "".join(f"(?:{m}{sep})?" for m in members[:first])  # optional ones before: comma after
        tail = "".join(f"{sep}{m}" if r else f"(?:{sep}{m})?" for m, r in zip(members[first + 1:], required[first + 1:]))
        return head + members[first] + tail
    # nonempty lists of the first k members: those of the first k-1 with M_k after, or M_k alone;
    # done within blocks and again over blocks, so groups nest only about 2 sqrt(n) deep (the
    # regex parser refuses deep nesting)
    def nonempty(items: list[str]) -> str:
        lists = items[0]
        for m in items[1:]:
            lists = f"(?:{lists}(?:{sep}{m})?|{m})"
        return lists

    def after(items: list[str]) -> str:
        return "".join(f"(?:{sep}{m})?" for m in items)

    size = max(1, math.isqrt(len(members)))
    blocks = [members[i:i + size] for i in range(0, len(members), size)]
    first, later = nonempty, after
    if define is not None:
        # a later block's definition is never empty, its use optional: a definition that may be
        # empty returns at once, so every match state after a member held each later block's
        # call and its return (o46322's 201 optional keys: 31 configurations, now 17)
        first, later = (lambda items: define(nonempty(items))), (lambda items: f"(?:{define(sep + nonempty(items))})?")
    lists = first(blocks[0])
    for block in blocks[1:]:
        lists = f"(?:{lists}{later(block)}|{first(block)})"
    return lists if at_least_one else f"(?:{lists})?"


def _const_key(v: Any) -> str:
    """A JSON value's text with numbers of equal value spelled alike (1 and 1.0 are one value)."""
    def norm(x):
        if isinstance(x, float) and x.is_integer():
            return int(x)
        if isinstance(x, dict):
            return {k: norm(y) for k, y in x.items()}
        if isinstance(x, list):
            return [norm(y) for y in x]
        return x
    return json.dumps(norm(v), sort_keys=True)


def _json_type(v: Any) -> str:
    """A JSON value's type, integers counted as numbers."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]


def _values_apart(a: dict, b: dict) -> bool:
    """Branches whose types, or whose constants, do not meet."""
    if a["types"] is not None and b["types"] is not None and not (a["types"] & b["types"]):
        return True
    return a["consts"] is not None and b["consts"] is not None and not (a["consts"] & b["consts"])


def _objects_apart(a: dict, b: dict) -> bool:
    """Two object-only branches no object matches both of: one requires a key the other's closed
    key set leaves out, or both require a key whose allowed constants do not meet."""
    if not (a["objects"] and b["objects"]):
        return False
    for x, y in ((a, b), (b, a)):
        if any(k not in keys for k in x["required"] for keys in y["allowed"]):
            return True
    for k in a["required"] & b["required"]:
        for va in a["values"].get(k, []):
            if any(not (va & vb) for vb in b["values"].get(k, [])):
                return True
    return False


_ONE_CHAR = {sre_constants.LITERAL, sre_constants.NOT_LITERAL, sre_constants.ANY, sre_constants.IN}
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)}


def _counted_items(items: list, lo: int, hi: int | None, p: str) -> list | None:
    """An anchored pattern of one-character items and repeats of one character (like
    ``^[a-z0-9_]+$`` or ``^\\d+\\.\\d+.*$``) with minLength/maxLength folded into the repeats'
    counts; None for other shapes, whose lengths the regex cannot count. With one repeat this is
    exact; with more, the length left is shared among them, a narrowing whose every match fits."""
    flat = _spliced(items)
    repeats = [i for i, (op, _) in enumerate(flat) if op in _REPEATS]
    fixed = len(flat) - len(repeats)
    if any(op not in _ONE_CHAR for i, (op, _) in enumerate(flat) if i not in repeats):
        return None
    counts = []
    for i in repeats:
        rlo, rhi, inner = flat[i][1]
        inner = _spliced(inner)
        if len(inner) != 1 or inner[0][0] not in _ONE_CHAR:
            return None
        counts.append([rlo, rhi])
    least = fixed + sum(c[0] for c in counts)
    most = fixed + sum(c[1] for c in counts) if counts else fixed
    if least > (hi if hi is not None else least) or most < lo:
        raise Unsatisfiable("the pattern's length lies outside minLength/maxLength", pointer=p, keyword="maxLength")
    need = lo - least  # characters the repeats must add at least: from the first ones on
    for c in counts:
        add = max(0, min(need, c[1] - c[0]))
        c[0] += add
        need -= add
    if hi is not None:  # the room over the least length, shared out, the first ones taking the rest
        room = hi - fixed - sum(c[0] for c in counts)
        for k, c in enumerate(counts):
            share = room // len(counts) + (k < room % len(counts))
            c[1] = min(c[1], c[0] + share)
    for i, (clo, chi) in zip(repeats, counts):
        flat[i] = (flat[i][0], (clo, chi, flat[i][1][2]))
    return flat


def _spliced(items) -> list:
    """Items with plain groups spliced in (a group holds a sequence, so its items follow on)."""
    out = []
    for op, av in items:
        if op == sre_constants.SUBPATTERN:
            out += _spliced(av[-1])
        else:
            out.append((op, av))
    return out


class Unsatisfiable(SchemaError):
    """No JSON value satisfies the schema at this place (a parent may drop the place instead)."""


# keywords through which other schemas evaluate an instance's properties or items in place
IN_PLACE = {"allOf", "anyOf", "oneOf", "not", "if", "then", "else", "$ref", "$dynamicRef", "$recursiveRef",
            "dependentSchemas", "dependencies"}
# where a schema document holds data, not schemas
DATA_KEYWORDS = {"const", "enum", "default", "examples", "example"}
# keywords whose value maps names to schemas (the map itself is not a schema)
SCHEMA_MAPS = {"properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies"}


def _local_unevaluated(node: Any) -> Any:
    """The document with each unevaluatedProperties/unevaluatedItems that no in-place applicator
    sits beside written as additionalProperties/items (what it means there: the properties or
    items the schema's own keywords leave); the others stay (and are refused)."""
    if isinstance(node, list):
        return [_local_unevaluated(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in DATA_KEYWORDS:
            out[k] = v
        elif k in SCHEMA_MAPS and isinstance(v, dict):
            out[k] = {name: _local_unevaluated(x) for name, x in v.items()}
        else:
            out[k] = _local_unevaluated(v)
    if IN_PLACE & out.keys():
        return out
    if "unevaluatedProperties" in out:
        value = out.pop("unevaluatedProperties")
        out.setdefault("additionalProperties", value)
    if "unevaluatedItems" in out and "contains" not in out:
        value = out.pop("unevaluatedItems")
        out.setdefault("additionalItems" if isinstance(out.get("items"), list) else "items", value)
    return out


def _subschemas(node: Any):
    """Every object in a schema document (schemas and the maps holding them alike)."""
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            yield x
            stack += [v for k, v in x.items() if k not in ("enum", "const", "default", "examples")]
        elif isinstance(x, list):
            stack += x


_POSITIONAL = ("prefixItems", "items", "additionalItems")


def _positional(s: dict) -> tuple[list, Any] | None:
    """An array schema's (prefix item schemas, schema of the items after them), or None if it has neither."""
    prefix, items = s.get("prefixItems"), s.get("items")
    if isinstance(items, list):  # draft 4 tuple form
        prefix, items = items, s.get("additionalItems")
    if prefix is None and items is None:
        return None
    return list(prefix or []), True if items is None else items


_MEMBERS = ("properties", "additionalProperties")


def _members(s: dict) -> tuple[dict, Any]:
    """An object schema's (properties, additionalProperties)."""
    props = s.get("properties", {}) or {}
    if not isinstance(props, dict):
        raise SchemaError("properties must be an object", keyword="properties")
    return props, s.get("additionalProperties", True)


def _conjunction(schemas: list) -> Any:
    """One schema for all of ``schemas`` (``true`` ones dropped, a single one as it is)."""
    schemas = [x for x in schemas if x is not True and x != {}]
    if not schemas:
        return True
    return schemas[0] if all(x == schemas[0] for x in schemas) else {"allOf": schemas}


class _TooDeep(Exception):
    """A recursive $ref went past max_depth: the branch is dropped (a valid subset remains)."""


def _accepts_everything(s: dict) -> bool:
    """True for schemas that accept every JSON value: only vacuous keywords (an ``items`` that
    accepts anything makes ``additionalItems`` vacuous in every draft)."""
    vacuous = {"items": ({}, True), "properties": ({},), "required": ([],), "additionalProperties": ({}, True),
               "additionalItems": None if s.get("items") in ({}, True) else ()}
    return all(k in vacuous and (vacuous[k] is None or v in vacuous[k]) for k, v in s.items())


def _required_names(s: dict) -> list | None:
    """The keys a schema made only of ``required`` (possibly under allOf) asks for, or None."""
    if set(s) == {"required"} and isinstance(s["required"], list):
        return s["required"]
    if set(s) == {"allOf"} and isinstance(s["allOf"], list):
        parts = [_required_names(b) if isinstance(b, dict) else None for b in s["allOf"]]
        if all(x is not None for x in parts):
            return [n for x in parts for n in x]
    return None


def _checks(values: list, schema: dict, root: Any) -> list[bool | None]:
    """Whether each of ``values`` is valid against ``schema`` (a part of ``root``, whose definitions
    and draft it reads), by one validator (making one costs more than a check); None where the
    validator cannot read the schema (a sibling it cannot read is checked after generation)."""
    if isinstance(schema, bool):
        return [schema] * len(values)
    try:
        if isinstance(root, dict):
            schema = {**{k: root[k] for k in ("definitions", "$defs", "$schema") if k in root}, **schema}
        validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)(schema)
    except Exception:
        return [None] * len(values)
    return [_is_valid(validator, v) for v in values]


def _is_valid(validator: Any, value: Any) -> bool | None:
    try:
        return validator.is_valid(value)
    except Exception:
        return None


def schema_to_regex(schema: Any, *, whitespace: str = WHITESPACE, strict: bool = True,
                    max_depth: int = 3, max_repeat: int = 256, max_length: int = 256,
                    max_chars: int | None = None, count_above: int | None = None, link: bool = False,
                    extra_keys: bool | None = False, link_count_from: int | None = None,
                    max_expansion: int = MAX_EXPANSION) -> Translation:
    """Translate a JSON schema (dict, bool or JSON text) to a regex over JSON text.

    ``max_repeat`` and ``max_length`` are the largest item count and string length written into
    the regex; a larger bound is refused in strict mode and checked after generation otherwise.
    With ``strict=False`` and ``max_chars``, references whose expansion would make the regex
    longer are written as free values of their declared types (listed as unenforced ``$ref``).
    With ``count_above``, plain strings whose maxLength is above it are written as marked loops
    whose limits are in ``Translation.counters`` (enforced by the grammar, see automata.counters);
    with ``link``, as one definition per bound, counted (its loop marked likewise) when the bounds
    are ``link_count_from`` or more apart, spelled otherwise.
    ``max_length`` still bounds what the DFA spells: patterns' and formats' bounds, minLength.
    ``max_expansion`` bounds the characters all $ref expansions produce (past it: a SchemaError on
    ``$ref`` saying "expanding"). With ``link``, each referenced definition is written once, in
    ``Translation.definitions``, and each use as its marker (see automata.linked); recursion then
    nests without a depth bound.
    An object may write undeclared keys after its declared ones where the schema allows any (no
    patternProperties, propertyNames, maxProperties or unevaluatedProperties on that object;
    without ``link``, only in objects of at most EXPANDED_EXTRA_AFTER declared keys, counted in
    ``Translation.narrowed``): with ``extra_keys=True`` wherever the schema allows them, with
    ``None`` only where its ``additionalProperties`` is given (true or a schema), with ``False``
    (default) never. Elsewhere it writes its declared keys only, a narrowing where the schema
    allows more: models are not invited to invent keys, and first masks stay cheap.
    """
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from None
    schema = _local_unevaluated(schema)
    # lenient mode writes references loosely once their expansion passes a budget, smaller on
    # each try until the regex fits ``max_chars`` (the last also nests free values one level only)
    if link:
        t = _Translator(schema, Options(whitespace, strict, max_depth, max_repeat, max_length, None, count_above, True,
                                           extra_keys, link_count_from))
        try:
            regex = t.value(schema, "#")
        except RecursionError:
            raise SchemaError("schema nests too deeply to translate") from None
        return Translation(regex, t.unenforced, t.counters, list(t.definitions))
    budgets = [None] if strict else [MAX_EXPANSION // 4, MAX_EXPANSION // 64, MAX_EXPANSION // 1024, 0]
    for budget in budgets:
        depth = 1 if budget == 0 else max_depth
        t = _Translator(schema, Options(whitespace, strict, depth, max_repeat, max_length, budget, count_above, False,
                                           extra_keys, None, max_expansion))
        try:
            regex = t.value(schema, "#")
        except _TooDeep:
            raise SchemaError("recursive $ref nests deeper than max_depth at the root", keyword="$ref") from None
        except RecursionError:
            raise SchemaError("schema nests too deeply to translate") from None
        except SchemaError as e:
            if not expansion_stopped(e) or budget == budgets[-1]:
                raise
            continue
        if max_chars is None or len(regex) <= max_chars:
            break
    return Translation(regex, t.unenforced, t.counters, free_values=t.free_values, narrowed=t.narrowed, cut=t.cut)

