"""Tool calls: compile a family's format plus the request's tools into a budget-aware matcher.

Compiling everything into one automaton would cost seconds per tool list and recompile the whole
list when one tool changes. Instead the turn is split where the text is always cut between
tokens (at special tokens, and where a call starts):

- the *outer* automaton is the turn with each call replaced by one macro symbol; it depends on
  the format and the modes only, never on the tools;
- each call is a chain of *pieces* per tool, cut after every special token at its top level;
  a piece with no schema in it (``<|tool_call_begin|>functions.NAME:3<|tool_call_argument_begin|>``)
  is a literal built directly, the others are regexes compiled (and cached) per tool.

A match state is a small set of configurations (an outer state, or a position inside one tool's
call). Every configuration carries its fewest tokens to the end of the turn, which is what keeps
a call from opening without room to close and forces it closed before ``max_tokens``.
"""

from __future__ import annotations

import bisect
import heapq
import json
import re
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import mlx.core as mx
import numpy as np

from .automaton import (
    DEFAULT_MEMORY_BYTES,
    DEFAULT_TIMEOUT,
    MASKS,
    UNREACHABLE,
    Automaton,
    _distances,
    _LRU,
    additive_mask,
    check_regex_size,
    compile_regex,
    shared_mask,
)
from .errors import BudgetError, CompileError, RequestError, SchemaError, TokenizerError
from .formats import (
    FLOAT_VALUES,
    FORMATS,
    TEXT_REGEX,
    Format,
    contains,
    detect_format,
    drop,
    exclude_specials,
    load_format,
    min_units,
    must,
    render,
    single,
    strip_open,
    without,
)
from .schema import WHITESPACE, _escape, schema_key, schema_to_regex
from .vocabulary import Vocab, build_vocab

MACRO = "\uefff"  # stands for "one call" in the outer automaton
MACRO_ID = 1 << 30
INDEX_MARK = "\x00"  # where CALL_INDEX goes in a literal piece (tool names cannot hold it)
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")
DEFAULT_RESERVE = 32
FLOAT_EXACT = 10**15 - 1  # below 2**53, where a float holds every integer; a round bound keeps the regex small
_STRING_KEYWORDS = ("minLength", "maxLength", "pattern", "format", "contentEncoding", "contentMediaType")


@dataclass(frozen=True)
class Tool:
    name: str
    parameters: dict
    description: str = ""

    @property
    def key(self) -> str:
        return json.dumps([self.name, schema_key(self.parameters)])


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
        try:
            jsonschema.validators.validator_for(params, default=jsonschema.Draft202012Validator).check_schema(params)
        except jsonschema.SchemaError as e:
            raise SchemaError(f"parameters are not a valid JSON schema: {e.message}", tool=name,
                              pointer="#/" + "/".join(map(str, e.absolute_path)), keyword=str(e.validator)) from None
        out.append(Tool(name, params, str(f.get("description", ""))))
    return out


def literal_automaton(text: str, vocab: Vocab) -> Automaton:
    """The automaton of one fixed string (special tokens as their symbols), built directly."""
    key = ("literal", vocab.fingerprint, text)
    found = _LITERALS.get(key)
    if found is not None:
        return found
    data = text.encode()
    table = vocab.outlines_map
    longest = _longest(vocab)
    n = len(data)
    edges: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    for i in range(n):
        for j in range(i + 1, min(n, i + longest) + 1):
            for t in table.get(data[i:j], ()):
                edges[i].append((t, j))
    reach, stack = {0}, [0]
    while stack:
        for _, j in edges[stack.pop()]:
            if j not in reach:
                reach.add(j)
                stack.append(j)
    order = sorted(reach)
    dense = {s: k for k, s in enumerate(order)}
    counts = np.zeros(len(order) + 1, dtype=np.int64)
    toks, tgts = [], []
    for k, s in enumerate(order):
        row = sorted(edges[s])
        toks += [t for t, _ in row]
        tgts += [dense[j] for _, j in row]
        counts[k + 1] = len(row)
    offsets = np.cumsum(counts)
    tokens = np.asarray(toks, dtype=np.int32)
    targets = np.asarray(tgts, dtype=np.int32)
    final = np.array([s == n for s in order], dtype=bool)
    dist = _distances(offsets, targets, final)
    if dist[0] >= UNREACHABLE:
        raise CompileError(f"the vocabulary cannot spell {text!r}")
    a = Automaton(offsets, tokens, targets, final, dist, "literal", positions=np.asarray(order, dtype=np.int64))
    _LITERALS.put(key, a, a.nbytes)
    return a


def _literal_item(it) -> bool:
    return it[0] in ("lit", "sym") or (it[0] == "hole" and it[1] in ("TOOL_NAME", "CALL_INDEX"))


_SORTED: dict[str, tuple[list[bytes], list[int]]] = {}
_BYTES: dict[str, list[int]] = {}
_FIRST: dict[str, set[int]] = {}


def _prefixed(vocab: Vocab, prefix: bytes) -> list[tuple[bytes, int]]:
    """Ordinary tokens longer than ``prefix`` that start with it."""
    table = _SORTED.get(vocab.fingerprint)
    if table is None:
        pairs = sorted((b, i) for i, b in enumerate(vocab.token_bytes) if b)
        table = _SORTED[vocab.fingerprint] = ([b for b, _ in pairs], [i for _, i in pairs])
    keys, ids = table
    out = []
    for j in range(bisect.bisect_left(keys, prefix), len(keys)):
        if not keys[j].startswith(prefix):
            break
        if len(keys[j]) > len(prefix):
            out.append((keys[j], ids[j]))
    return out


def _byte_tokens(vocab: Vocab) -> list[int]:
    """The single-byte token of each byte value (-1 where the vocabulary has none)."""
    got = _BYTES.get(vocab.fingerprint)
    if got is None:
        got = _BYTES[vocab.fingerprint] = [vocab.outlines_map.get(bytes([b]), [-1])[0] for b in range(256)]
    return got


def _first_bytes(a: Automaton, vocab: Vocab) -> set[int]:
    """The first bytes of the tokens allowed in ``a``'s initial state."""
    got = _FIRST.get(a.key)
    if got is None:
        toks = a.tokens[a.offsets[0]:a.offsets[1]].tolist()
        got = _FIRST[a.key] = {vocab.token_bytes[t][0] for t in toks
                               if t < len(vocab.token_bytes) and vocab.token_bytes[t]}
    return got


_LITERALS = _LRU(64 << 20)
_LONGEST: dict[str, int] = {}


def _longest(vocab: Vocab) -> int:
    n = _LONGEST.get(vocab.fingerprint)
    if n is None:
        n = _LONGEST[vocab.fingerprint] = max(len(b) for b in vocab.outlines_map)
    return n


def _tool_vocab(vocab: Vocab, fmt: Format) -> Vocab:
    """The vocabulary with the format's own special tokens removed from the end-of-sequence ids."""
    named = {vocab.special.get(t) for t in fmt.special_texts()}
    eos = tuple(i for i in vocab.eos_ids if i not in named)
    if eos == vocab.eos_ids:
        return vocab
    if not eos:
        raise CompileError(f"format {fmt.name}: every end-of-sequence token of the tokenizer is also a format token")
    key = (vocab.fingerprint, eos)
    with _VOCAB_LOCK:
        v = _DERIVED.get(key)
        if v is None:
            v = _DERIVED[key] = Vocab(vocab.token_bytes, vocab.special, eos, vocab.size, vocab.name, vocab.dropped)
        return v


_DERIVED: dict = {}
_VOCAB_LOCK = threading.Lock()


@dataclass
class _Piece:
    literal: bool
    text: str  # the literal (CALL_INDEX as INDEX_MARK) or the regex
    items: list  # the call rule's items it was made from (the parser renders them again)
    indexed: bool = False
    joins: bool = False  # a literal whose last tokens may run on into the next (regex) piece
    bound: int = 0  # a regex piece's fewest tokens, bounded from above until it is compiled


class ToolGrammar:
    """A compiled tool-call grammar: cached and shared; ``processor(max_tokens)`` per request."""

    def __init__(self, vocab: Vocab, fmt: Format, tools: list[Tool], *, tool_choice: Any, parallel: bool,
                 thinking: Any, reserve: int, strict: bool, whitespace: str, lazy: bool, workers: int,
                 timeout: float | None = DEFAULT_TIMEOUT) -> None:
        self.vocab = vocab
        self.timeout = timeout
        self.format = fmt
        self.offered = tools
        self.tool_choice = tool_choice
        self.parallel = parallel
        self.thinking = thinking
        self.reserve = reserve
        self.unenforced: list[tuple[str, str]] = []
        named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
        self.tools = [t for t in tools if t.name == named] if named else list(tools)
        self.start = self._turn(fmt, tool_choice, parallel, thinking)
        self._symbols = {name: vocab.symbol(text) for name, text in fmt.specials.items()}
        self._holes: list[dict[str, str]] = []  # per tool: ARGUMENTS / PARAMETERS regex
        self._values: list[dict[str, tuple[str, bool]]] = []  # per tool: parameter -> (regex, raw string)
        self.whitespace = whitespace
        self._specs = [self._call_pieces(t, strict, whitespace) for t in self.tools]
        self._pieces: dict[tuple[int, int, int], Automaton] = {}
        self._rest: dict[tuple[int, int, int], int] = {}
        self._straddles: dict = {}
        self._masks: dict = {}
        self._preds = None
        self._lock = threading.RLock()
        self.lazy = lazy
        if not lazy:
            self._compile_pieces(workers)
        self._build_outer()
        self._by_content = MASKS
        self._eos: dict[int, mx.array] = {}
        self.parser = None

    # --- the turn, per mode ------------------------------------------------------------------

    @staticmethod
    def _turn(fmt: Format, tool_choice: Any, parallel: bool, thinking: Any):
        start = ("ref", "start", fmt.rules["start"])
        has_reasoning = "reasoning" in fmt.rules and contains(fmt, start, "reasoning")
        if thinking is False and has_reasoning:
            start = without(fmt, start, "reasoning")
        elif thinking in (True, "open"):
            if not has_reasoning:
                raise CompileError(f"format {fmt.name} has no thinking section")
            start = must(fmt, start, "reasoning")
            if thinking == "open":
                start = strip_open(fmt, start, "reasoning")
        if tool_choice == "none":
            start = without(fmt, start, "call")
        elif tool_choice == "required" or isinstance(tool_choice, dict):
            start = must(fmt, drop(fmt, start, "content"), "call")
            if start is None:
                raise CompileError(f"format {fmt.name}: the start rule cannot hold a call")
        if not parallel:
            start = single(fmt, start, "call")
        return start

    # --- per-tool pieces -----------------------------------------------------------------------

    def _fill_symbols(self, node):
        if node[0] == "sym":
            return self._symbols[node[1]]
        if node[0] == "hole" and node[1] == "TEXT":
            return TEXT_REGEX
        return None

    def _call_pieces(self, tool: Tool, strict: bool, whitespace: str) -> list[_Piece]:
        fmt = self.format
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
        self._holes.append({})
        self._values.append({})
        pieces = []
        for g in groups:
            if all(_literal_item(it) for it in g):
                text = "".join(it[1] if it[0] == "lit" else self._symbols[it[1]] if it[0] == "sym"
                               else tool.name if it[1] == "TOOL_NAME" else INDEX_MARK for it in g)
                pieces.append(_Piece(True, text, g, INDEX_MARK in text, joins=g[-1][0] != "sym"))
            else:
                if any(it == ("hole", "CALL_INDEX") for it in g):
                    raise CompileError(f"format {fmt.name}: CALL_INDEX must sit in a piece without arguments")
                regex = render(fmt, ("seq", g), lambda n: self._fill_call(n, tool, strict, whitespace))
                try:
                    check_regex_size(regex)  # now, before generation: lazy pieces compile at their first call
                except CompileError as e:
                    raise CompileError(f"tool {tool.name!r}: its arguments: {e}") from None
                pieces.append(_Piece(False, regex, g, bound=min_units(regex)))
        for a, b in zip(pieces, pieces[1:]):
            a.joins = a.joins and a.literal and not b.literal
        pieces[-1].joins = False
        return pieces

    def _fill_call(self, node, tool: Tool, strict: bool, whitespace: str):
        got = self._fill_symbols(node)
        if got is not None or node[0] != "hole":
            return got
        if node[1] == "TOOL_NAME":
            return _escape(tool.name)
        if node[1] == "ARGUMENTS":
            got = self._json_regex(tool.parameters, tool.name, strict, whitespace)
        elif node[1] == "PARAMETERS":
            got = self._parameters_regex(tool, strict, whitespace)
        else:
            raise CompileError(f"format {self.format.name}: hole {node[1]} cannot appear in a call")
        self._holes[-1][node[1]] = got
        return got

    def _json_regex(self, schema: Any, tool: str, strict: bool, whitespace: str, pointer: str = "#") -> str:
        try:
            t = _translate(schema_key(schema), whitespace, strict)
        except SchemaError as e:
            raise SchemaError(e.message, pointer=pointer + e.pointer[1:], keyword=e.keyword, tool=tool) from None
        self.unenforced += [(f"tool {tool!r} {pointer}{p[1:]}", k) for p, k in t.unenforced]
        return t.regex

    def _parameters_regex(self, tool: Tool, strict: bool, whitespace: str) -> str:
        fmt = self.format
        if "parameter" not in fmt.rules:
            raise CompileError(f"format {fmt.name} uses PARAMETERS but defines no 'parameter' rule")
        props = dict(tool.parameters.get("properties") or {})
        required = list(tool.parameters.get("required") or [])
        extra = tool.parameters.get("additionalProperties", True)
        for k in required:
            if k not in props:
                props[k] = extra if isinstance(extra, dict) else {}
        out = []
        for key, sub in props.items():
            value = self._value_regex(tool, key, sub, strict, whitespace)
            raw = isinstance(sub, dict) and sub.get("type") == "string" and "RAW_STRING" in fmt.patterns
            self._values[-1][key] = (value, raw)

            def fill(n, key=key, value=value):
                got = self._fill_symbols(n)
                if got is not None or n[0] != "hole":
                    return got
                if n[1] == "PARAM_KEY":
                    return _escape(key)
                if n[1] == "PARAM_VALUE":
                    return value
                raise CompileError(f"format {fmt.name}: hole {n[1]} cannot appear in a parameter")

            one = render(fmt, fmt.rules["parameter"], fill)
            out.append(one if key in required else f"(?:{one})?")
        return "".join(out)

    def _value_regex(self, tool: Tool, key: str, sub: Any, strict: bool, whitespace: str) -> str:
        pointer = f"#/properties/{key}"
        if isinstance(sub, dict) and sub.get("type") == "string" and "RAW_STRING" in self.format.patterns:
            choices = sub.get("enum", [sub["const"]] if "const" in sub else None)
            if choices is not None:
                return "(?:" + "|".join(_escape(c) for c in choices if isinstance(c, str)) + ")"
            for kw in _STRING_KEYWORDS:
                if kw in sub:
                    if strict:
                        raise SchemaError("not supported on a raw string parameter", pointer=pointer, keyword=kw,
                                          tool=tool.name)
                    self.unenforced.append((f"tool {tool.name!r} {pointer}", kw))
            return "(?:" + exclude_specials(self.format.patterns["RAW_STRING"]) + ")"
        if self.format.name in FLOAT_VALUES and isinstance(sub, dict) and sub.get("type") in ("integer", "number"):
            sub = {"allOf": [sub, {"minimum": -FLOAT_EXACT, "maximum": FLOAT_EXACT}]}
        return self._json_regex(sub, tool.name, strict, whitespace, pointer)

    def _compile_pieces(self, workers: int) -> None:
        """Compile every argument piece now (``lazy=False``), two at a time."""
        jobs = [(ti, p) for ti, spec in enumerate(self._specs) for p, pc in enumerate(spec) if not pc.literal]
        if workers > 1 and len(jobs) > 1:
            with ThreadPoolExecutor(workers) as ex:
                list(ex.map(lambda job: self.piece(job[0], job[1], 0), jobs))
        else:
            for ti, p in jobs:
                self.piece(ti, p, 0)

    def piece(self, ti: int, p: int, k: int) -> Automaton:
        """Tool ``ti``'s piece ``p`` in call number ``k``; argument pieces compile on first use."""
        spec = self._specs[ti][p]
        key = (ti, p, k if spec.indexed else 0)
        a = self._pieces.get(key)
        if a is None:
            if spec.literal:
                a = literal_automaton(spec.text.replace(INDEX_MARK, str(k)), self.vocab)
                self._pieces[key] = a
            else:
                try:
                    a = compile_regex(spec.text, self.vocab, timeout=self.timeout)
                except CompileError as e:
                    raise CompileError(f"tool {self.tools[ti].name!r}: its arguments: {e}") from None
                with self._lock:
                    self._pieces[key] = a
        return a

    def _min(self, ti: int, q: int, k: int) -> int:
        """Piece ``q``'s fewest tokens as counted from outside it. Lazily compiled grammars always
        count an argument piece by its bound, compiled or not, so what a request may do never
        depends on which tools earlier requests happened to call."""
        spec = self._specs[ti][q]
        if spec.literal:
            return self.piece(ti, q, k).min_tokens
        return spec.bound if self.lazy else self.piece(ti, q, 0).min_tokens

    def rest(self, ti: int, p: int, k: int) -> int:
        """Fewest tokens of the pieces after ``p`` of tool ``ti``'s call number ``k``."""
        key = (ti, p, k)
        r = self._rest.get(key)
        if r is None:
            r = sum(self._min(ti, q, k) for q in range(p + 1, len(self._specs[ti])))
            self._rest[key] = r
        return r

    def call_min(self, ti: int, k: int = 0) -> int:
        return self.rest(ti, -1, k)

    def _straddle(self, ti: int, p: int, k: int, st: int) -> tuple[np.ndarray, np.ndarray]:
        """Tokens that finish literal piece ``p`` from state ``st`` and run on into piece p+1, with
        the state each reaches there (so the model can write e.g. ``": {"`` as one token)."""
        spec = self._specs[ti][p]
        key = (ti, p, k if spec.indexed else 0, st)
        got = self._straddles.get(key)
        if got is not None:
            return got
        data = spec.text.replace(INDEX_MARK, str(k)).encode()
        suffix = data[int(self.piece(ti, p, k).positions[st]):]
        toks, tgts = [], []
        candidates = _prefixed(self.vocab, suffix) if suffix else []
        if candidates:
            nxt = self.piece(ti, p + 1, k)
            first = _first_bytes(nxt, self.vocab)
            single = _byte_tokens(self.vocab)
            for b, t in candidates:
                if b[len(suffix)] not in first:
                    continue
                s = 0
                for byte in b[len(suffix):]:
                    s = nxt.next_state(s, single[byte]) if single[byte] >= 0 else -1
                    if s < 0:
                        break
                if s >= 0:
                    toks.append(t)
                    tgts.append(s)
        toks_a, tgts_a = np.asarray(toks, dtype=np.int32), np.asarray(tgts, dtype=np.int32)
        order = np.argsort(toks_a, kind="stable")
        got = self._straddles[key] = (toks_a[order], tgts_a[order])
        return got

    # --- the outer automaton -----------------------------------------------------------------

    def _build_outer(self) -> None:
        fmt = self.format

        def fill(n):
            got = self._fill_symbols(n)
            if got is not None:
                return got
            if n[0] == "ref" and n[1] == "call":
                return MACRO
            if n[0] == "hole":
                raise CompileError(f"format {fmt.name}: hole {n[1]} outside the call rule")
            return None

        self.outer_regex = render(fmt, self.start, fill)
        a = compile_regex(self.outer_regex, self.vocab, macro=(MACRO, MACRO_ID), timeout=self.timeout)
        ends = a.offsets[1:]
        has = (ends > a.offsets[:-1]) & (a.tokens[np.maximum(ends - 1, 0)] == MACRO_ID)
        self.macro_ret = np.where(has, a.targets[np.maximum(ends - 1, 0)], -1)
        self.outer = a
        self._refresh()

    def _refresh(self) -> None:
        """Compute the outer distances (a call counts its tools' fewest tokens)."""
        a, n = self.outer, self.outer.num_states
        self.macro_weight = min((self.call_min(ti) for ti in range(len(self.tools))), default=UNREACHABLE)
        plain = self._weighted(a, self.macro_weight)
        no_call = self._weighted(a, UNREACHABLE)
        src = np.repeat(np.arange(n), np.diff(a.offsets))
        loops = np.zeros(n, dtype=bool)
        loops[src[a.targets == src]] = True
        self.tail = plain  # fewest tokens to finish the turn from each outer state
        # Free text (thinking) before a call that must come: there, tokens that make no progress
        # towards the end need `reserve` tokens spare, so the call gets room for real arguments.
        self.zone = loops & (no_call >= UNREACHABLE) & (plain < UNREACHABLE)
        self.min_tokens = int(plain[0])
        if self.min_tokens >= UNREACHABLE:
            raise CompileError("no complete turn is possible with these tools and modes")

    def _weighted(self, a: Automaton, w: int) -> np.ndarray:
        """Fewest tokens to acceptance when a call (macro edge) counts ``w`` (reverse Dijkstra)."""
        n = a.num_states
        if self._preds is None:  # the outer graph's distinct edges, once: free text has 150k of them
            src = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.offsets))
            macro = a.tokens == MACRO_ID
            edges = np.unique(src[~macro] * n + a.targets[~macro])
            plain: list[list[int]] = [[] for _ in range(n)]
            for s, t in zip((edges // n).tolist(), (edges % n).tolist()):
                plain[t].append(s)
            self._preds = (plain, list(zip(src[macro].tolist(), a.targets[macro].tolist())))
        plain, macros = self._preds
        preds: list[list[tuple[int, int]]] = [[(s, 1) for s in ps] for ps in plain]
        if w < UNREACHABLE:
            for s, t in macros:
                preds[t].append((s, w))
        dist = np.full(n, UNREACHABLE, dtype=np.int64)
        heap = [(0, s) for s in np.flatnonzero(a.final).tolist()]
        for _, s in heap:
            dist[s] = 0
        heapq.heapify(heap)
        while heap:
            d, t = heapq.heappop(heap)
            if d > dist[t]:
                continue
            for s, wt in preds[t]:
                cand = d + wt
                if cand < dist[s]:
                    dist[s] = cand
                    heapq.heappush(heap, (cand, s))
        return dist

    # --- matching (the protocol LogitsProcessor drives) -------------------------------------

    @property
    def initial_state(self) -> tuple:
        return (("o", 0, 0),)

    def _dist(self, c: tuple) -> int:
        if c[0] == "o":
            return int(self.tail[c[1]])
        _, r, k, ti, p, st = c
        return int(self.piece(ti, p, k).dist[st]) + self.rest(ti, p, k) + int(self.tail[r])

    def _settle(self, c: tuple) -> list[tuple]:
        _, r, k, ti, p, st = c
        a = self.piece(ti, p, k)
        out = [c] if a.offsets[st + 1] > a.offsets[st] else []
        if a.final[st]:
            out.append(("c", r, k, ti, p + 1, 0) if p + 1 < len(self._specs[ti]) else ("o", r, k + 1))
        return out

    def step(self, state: tuple, token: int, left: int) -> tuple | None:
        """The state after ``token`` with ``left`` tokens still to come, or None if it is not allowed."""
        out = []
        for c in state:
            if c[0] == "o":
                _, s, k = c
                t = self.outer.next_state(s, token)
                if t >= 0:
                    out.append(("o", t, k))
                r = int(self.macro_ret[s])
                if r >= 0:
                    for ti in range(len(self.tools)):
                        out += self.step((("c", r, k, ti, 0, 0),), token, UNREACHABLE) or ()
            else:
                _, r, k, ti, p, st = c
                nxt = self.piece(ti, p, k).next_state(st, token)
                if nxt >= 0:
                    out += self._settle(("c", r, k, ti, p, nxt))
                if self._specs[ti][p].joins:
                    toks, tgts = self._straddle(ti, p, k, st)
                    i = int(toks.searchsorted(np.int32(token)))
                    if i < len(toks) and toks[i] == token:
                        out += self._settle(("c", r, k, ti, p + 1, int(tgts[i])))
        out = tuple(sorted(set(c for c in out if self._dist(c) <= max(left, 0))))
        return out or None

    def is_final(self, state: tuple) -> bool:
        return any(c[0] == "o" and self.outer.final[c[1]] for c in state)

    def is_complete(self, state: tuple) -> bool:
        o = self.outer
        return self.is_final(state) and all(
            c[0] == "o" and o.offsets[c[1] + 1] == o.offsets[c[1]] for c in state)

    def _allowed(self, c: tuple, budget: int) -> list[np.ndarray]:
        if c[0] == "o":
            _, s, k = c
            o = self.outer
            lo, hi = o.offsets[s], o.offsets[s + 1]
            toks = o.tokens[lo:hi]
            ok = (self._outer_need(s, lo, hi) <= budget) & (toks != MACRO_ID)
            parts = [toks[ok]]
            r = int(self.macro_ret[s])
            if r >= 0:
                for ti in range(len(self.tools)):
                    parts += self._piece_allowed(ti, 0, k, 0, r, budget)
            return parts
        _, r, k, ti, p, st = c
        return self._piece_allowed(ti, p, k, st, r, budget)

    def _outer_need(self, s: int, lo: int, hi: int) -> np.ndarray:
        """Tokens needed after each outer transition of state ``s`` (with the thinking reserve)."""
        d = self.tail[self.outer.targets[lo:hi]]
        if self.zone[s]:
            d = np.where(d >= self.tail[s], d + self.reserve, d)
        return d

    def _piece_allowed(self, ti, p, k, st, r, budget) -> list[np.ndarray]:
        a = self.piece(ti, p, k)
        offset = self.rest(ti, p, k) + int(self.tail[r])
        lo, hi = a.offsets[st], a.offsets[st + 1]
        out = [a.tokens[lo:hi][a.dist[a.targets[lo:hi]] + offset <= budget]]
        if self._specs[ti][p].joins:
            toks, tgts = self._straddle(ti, p, k, st)
            if len(toks):
                nxt = self.piece(ti, p + 1, k)
                out.append(toks[nxt.dist[tgts] + self.rest(ti, p + 1, k) + int(self.tail[r]) <= budget])
        return out

    def _cap(self, c: tuple) -> int:
        """The largest budget that can still change this configuration's mask."""
        if c[0] == "o":
            _, s, k = c
            o = self.outer
            lo, hi = o.offsets[s], o.offsets[s + 1]
            d = self._outer_need(s, lo, hi)
            cap = int(d[d < UNREACHABLE].max(initial=0))
            r = int(self.macro_ret[s])
            if r >= 0:
                cap = max([cap] + [self._piece_cap(ti, 0, k, 0, r) for ti in range(len(self.tools))])
            return cap
        _, r, k, ti, p, st = c
        return self._piece_cap(ti, p, k, st, r)

    def _piece_cap(self, ti, p, k, st, r) -> int:
        a = self.piece(ti, p, k)
        lo, hi = a.offsets[st], a.offsets[st + 1]
        d = a.dist[a.targets[lo:hi]]
        d = d[d < UNREACHABLE]
        cap = int(d.max(initial=0)) + self.rest(ti, p, k)
        if self._specs[ti][p].joins:
            toks, tgts = self._straddle(ti, p, k, st)
            if len(toks):
                d = self.piece(ti, p + 1, k).dist[tgts]
                d = d[d < UNREACHABLE]
                cap = max(cap, int(d.max(initial=0)) + self.rest(ti, p + 1, k))
        return cap + int(self.tail[r])

    def mask(self, state: tuple, left: int, width: int) -> mx.array:
        budget = left - 1
        caps = self._masks.get(("cap", state))
        if caps is None:
            caps = self._masks[("cap", state)] = max(self._cap(c) for c in state)
        key = (state, min(budget, caps), width)
        digest = self._masks.get(key)
        m = self._by_content.get(digest) if digest is not None else None
        if m is not None:
            return m
        parts = [np.zeros(0, np.int32)]
        if budget >= 0:
            for c in state:
                parts += self._allowed(c, budget)
        ids = np.unique(np.concatenate(parts))
        ids = ids[ids < width]
        if self.is_final(state):
            ids = np.concatenate([ids, np.asarray([i for i in self.vocab.eos_ids if i < width], np.int32)])
        if len(ids) == 0:
            return self.eos_mask(width)
        digest, m = shared_mask(ids, width, self._by_content)
        self._masks[key] = digest
        return m

    def eos_mask(self, width: int) -> mx.array:
        m = self._eos.get(width)
        if m is None:
            m = self._eos[width] = additive_mask(np.asarray(self.vocab.eos_ids[:1]), width)
        return m

    def processor(self, max_tokens: int):
        """A fresh per-request processor; raises BudgetError when ``max_tokens`` cannot hold a turn."""
        from .processor import LogitsProcessor

        if max_tokens < self.min_tokens:
            raise BudgetError(f"max_tokens={max_tokens} cannot hold the shortest valid turn, which needs "
                              f"{self.min_tokens} tokens (tool_choice={self.tool_choice!r})")
        return LogitsProcessor(self, max_tokens)

    def walk(self, token_ids: list[int], max_tokens: int | None = None) -> tuple | None:
        """The state after ``token_ids`` (end-of-sequence ids stop the walk), or None."""
        left = max_tokens if max_tokens is not None else UNREACHABLE
        state = self.initial_state
        for i, t in enumerate(token_ids):
            if t in self.vocab.eos_ids:
                break
            state = self.step(state, t, left - i - 1)
            if state is None:
                return None
        return state

    def parse(self, output: Any):
        """Content, reasoning and OpenAI-shaped tool calls from generated text or token ids."""
        return self._parser().parse(output)

    def stream_parser(self):
        """An incremental parser: feed token ids, get OpenAI-style deltas."""
        from .parser import StreamParser

        return StreamParser(self._parser())

    def _parser(self):
        from .parser import Parser

        with self._lock:
            if self.parser is None:
                self.parser = Parser(self)
            return self.parser


@dataclass(frozen=True)
class _Translation:
    regex: str
    unenforced: list = field(default_factory=list)


_TRANSLATIONS: OrderedDict = OrderedDict()


def _translate(schema_json: str, whitespace: str, strict: bool) -> _Translation:
    key = (schema_json, whitespace, strict)
    t = _TRANSLATIONS.get(key)
    if t is None:
        r = schema_to_regex(json.loads(schema_json), whitespace=whitespace, strict=strict)
        t = _TRANSLATIONS[key] = _Translation(r.regex, list(r.unenforced))
        while len(_TRANSLATIONS) > 4096:
            _TRANSLATIONS.popitem(last=False)
    return t


# compiled tool grammars, bounded by the bytes of their automata when they were cached (argument
# automata compiled later, in lazy mode, live in the AUTOMATA cache, which is bounded by bytes too)
_GRAMMARS = _LRU(DEFAULT_MEMORY_BYTES)


def compile_tools(
    tokenizer: Any,
    tools: Any,
    *,
    tool_choice: Any = "auto",
    parallel_tool_calls: bool = True,
    format: str | None = None,
    thinking: Any = None,
    reserve: int = DEFAULT_RESERVE,
    strict: bool = True,
    whitespace: str = WHITESPACE,
    lazy: bool = True,
    workers: int = 2,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> ToolGrammar:
    """Compile ``tools`` in the model family's tool-call format; cached by tokenizer and request.

    ``tool_choice``: "auto", "required", "none" or ``{"type": "function", "function": {"name": ...}}``.
    ``thinking``: None (as the model likes), True (think first), False (no thinking) or "open"
    (the prompt already opened the thinking section). ``reserve``: tokens kept for the call's
    arguments when a required call has to cut thinking short. Per-tool pieces are cached apart,
    so a changed tool list compiles only the tools that changed. With ``lazy`` (the default) a
    tool's argument automaton is compiled when the model first calls that tool (a disk-cache hit
    after the first time), and until a call is inside its arguments they are counted by a bound
    (their shortest text in bytes), so budgets are a little conservative; ``lazy=False``
    compiles every tool now and counts exact token distances. ``timeout`` (seconds) bounds each
    automaton build; with ``lazy`` a tool whose arguments overrun it fails at its first call.
    """
    base = build_vocab(tokenizer)
    try:
        request = json.dumps([tools, tool_choice])
    except (TypeError, ValueError) as e:
        raise SchemaError(f"tools must be JSON data: {e}") from None
    fast_key = (base.fingerprint, format, request, bool(parallel_tool_calls), thinking, reserve, strict, whitespace, lazy)
    g = _GRAMMARS.get(fast_key)
    if g is not None:  # an agent loop sending the same tools again: no checks, no hashing
        return g
    name = format or detect_format(tokenizer)
    if name not in FORMATS:
        raise RequestError(f"unknown tool-call format {name!r}; known: {', '.join(FORMATS)}")
    fmt = load_format(name)
    missing = [t for t in fmt.special_texts() if not base.has_token(t)]
    if missing:
        raise TokenizerError(f"format {name!r} needs the special tokens {missing}, which tokenizer "
                             f"{base.name!r} does not have")
    tools = normalize_tools(tools)
    name_rule = fmt.patterns.get("TOOL_NAME_PATTERN")
    for t in tools:
        if name_rule is not None and not re.fullmatch(name_rule, t.name):
            raise SchemaError(f"tool name {t.name!r} cannot be written in the {name} format "
                              f"(names must match {name_rule})", tool=t.name)
    if tool_choice not in ("auto", "required", "none"):
        wanted = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
        if not isinstance(wanted, str):
            raise RequestError(f"tool_choice must be 'auto', 'required', 'none' or "
                              f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")
        if wanted not in {t.name for t in tools}:
            raise RequestError(f"tool_choice names {wanted!r}, which is not among the offered tools")
    if thinking not in (None, True, False, "open"):
        raise RequestError(f"thinking must be None, True, False or 'open', got {thinking!r}")
    vocab = _tool_vocab(base, fmt)
    key = (vocab.fingerprint, name, json.dumps([t.key for t in tools]), json.dumps(tool_choice, sort_keys=True),
           bool(parallel_tool_calls), thinking, reserve, strict, whitespace, lazy)
    g = _GRAMMARS.get(key)
    if g is not None:
        _GRAMMARS.put(fast_key, g, _size(g))
        return g
    g = ToolGrammar(vocab, fmt, tools, tool_choice=tool_choice, parallel=bool(parallel_tool_calls),
                    thinking=thinking, reserve=reserve, strict=strict, whitespace=whitespace, lazy=lazy,
                    workers=workers, timeout=timeout)
    _GRAMMARS.put(key, g, _size(g))
    g = _GRAMMARS.get(key) or g  # another thread may have put its copy first
    _GRAMMARS.put(fast_key, g, _size(g))  # counted under both keys, so neither outlives the bound
    return g


def _size(g: ToolGrammar) -> int:
    return g.outer.nbytes + sum(a.nbytes for a in list(g._pieces.values()))
