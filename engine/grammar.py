"""A JSON schema or a regex compiled into a Grammar: the cached, shareable half of compile/match."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import mlx.core as mx
import numpy as np

from .automata import (LazyAutomaton, MaskTable, allowed_bools, allowed_mask, bits_mask, block_mask, compile_linked,
                       compile_regex, counters, eos_mask, new_owner, state_mask, warm_runs)
from .automata.builders import DEFAULT_TIMEOUT
from .automata.compile import MAX_REGEX_CHARS
from .caches import Cache
from .constraint import walk
from .errors import CompileError, SchemaError
from .json_schema import WHITESPACE, check_schema, schema_key, schema_to_regex
from .json_schema.translate import FORMAT_CLASSES, MAX_EXPANSION, expansion_stopped
from .matcher import Matcher
from .regexes import repeat_bounds
from .vocabulary import Vocab, build_vocab


@dataclass(eq=False)
class Grammar:
    """A compiled constraint: the token automaton plus what to check after generation."""

    vocab: Vocab
    automaton: LazyAutomaton
    regex: str
    schema: Any = None
    unenforced: list[tuple[str, str]] = field(default_factory=list)  # (JSON pointer, keyword)
    counters: list[int] = field(default_factory=list)  # limits of counted long strings, by marker
    _tables: dict[int, MaskTable] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _loops: dict[int, counters.Loop] = field(default_factory=dict, repr=False)
    _owner: int = field(default_factory=new_owner, repr=False)  # this grammar in STATE_MASKS
    _longest: int = field(default=0, repr=False)  # the most bytes (so characters) one token holds
    _counted: counters.Tables | None = field(default=None, repr=False)
    _may_count: np.ndarray | None = field(default=None, repr=False)  # by state: a token may meet a limit

    def __post_init__(self) -> None:
        if self.counters:
            self._loops = counters.find_loops(self.automaton.trans, self.counters)
            self._counted = counters.tables(self.automaton.trans, self._loops)
            self._longest = self.vocab.longest
            t, n = self._counted, len(self.automaton.final)
            # inside a loop, or close enough that a token could enter one and pass its limit (see
            # counters.fits: a token no longer than the room is never walked)
            self._may_count = (t.inside[:n] >= 0) | (t.reach + t.limits[:-1].min() < self._longest)

    @property
    def min_tokens(self) -> int:
        """The fewest tokens of any valid output (EOS not counted); found by a search on first use."""
        return self.automaton.min_tokens

    def fits(self, max_tokens: int) -> bool:
        """Some valid output has at most ``max_tokens`` tokens."""
        return self.automaton.fits(max_tokens)

    # The Constraint protocol the Matcher drives (a ToolGrammar implements it too).
    initial_state = 0

    # A state is the DFA state, or (DFA state, characters so far) inside a counted long string.

    def step(self, state: Any, token: int, left: int) -> Any:
        if not self._loops:
            nxt = self.automaton.next_state(state, token)
            return None if nxt < 0 else nxt
        s, count = state if isinstance(state, tuple) else (state, 0)
        text = self.vocab.token_text(token)
        if not text:
            return None
        nxt, count = counters.step(self.automaton.trans, self._loops, s, count, text)
        if nxt < 0:
            return None
        return (nxt, count) if count and counters.current_loop(self._loops, nxt) else nxt

    def walk(self, token_ids: list[int]) -> Any:
        """The state after ``token_ids`` (end-of-sequence ids stop the walk), or None."""
        return walk(self, token_ids)

    def is_final(self, state: Any) -> bool:
        return bool(self.automaton.final[state[0] if isinstance(state, tuple) else state])

    def is_complete(self, state: Any) -> bool:
        return self.automaton.is_complete(state[0] if isinstance(state, tuple) else state)

    def mask(self, state: Any, left: int, width: int) -> mx.array:
        s, count = state if isinstance(state, tuple) else (state, 0)
        table = self.mask_table(width)
        if not self._near(s, count):
            return table.mask(s, left)

        def build(budget: int) -> tuple[bytes, mx.array]:
            # the state's own mask, less the tokens that would overrun the count: no row listed
            allowed = allowed_bools(table.mask(s, budget + 1), width)
            allowed[counters.misfits(self.automaton.trans, self._loops, self._counted, s, count, self.vocab,
                                     allowed)] = False
            if not allowed.any():
                return b"", table.eos_only  # nothing left: a generation past its end can only stop
            return bits_mask(allowed)

        return state_mask(self._owner, (s, count), left - 1, width, lambda: self.automaton.target_cap(s), build)

    def _near(self, s: int, count: int) -> bool:
        """A token from here may take a counted loop past its limit: the loop has fewer characters
        left than the longest token holds, or is near enough to enter with fewer than that."""
        if not self._loops or not self._may_count[s]:
            return False
        k = self._counted.inside[s]
        return k < 0 or self._counted.limits[k] - count < self._longest

    def eos_mask(self, width: int) -> mx.array:
        return self.mask_table(width).eos_only

    def matcher(self, max_tokens: int) -> Matcher:
        """A fresh per-request matcher (an mlx-lm logits processor); raises BudgetError when no
        valid output fits in ``max_tokens``."""
        return Matcher(self, max_tokens)

    def mask_table(self, width: int) -> MaskTable:
        with self._lock:
            table = self._tables.get(width)
            if table is None:
                table = self._tables[width] = MaskTable(self.automaton, self.vocab, width)
            return table

    def validate(self, text: str) -> tuple[Any, list[str]]:
        """Parse ``text`` as JSON and check it against the schema: (value, error messages)."""
        try:
            value = json.loads(text)
        except ValueError as e:
            return None, [f"not JSON: {e}"]
        if self.schema is None:
            return value, []
        validator = jsonschema.validators.validator_for(self.schema, default=jsonschema.Draft202012Validator)
        errors = [f"{'/'.join(map(str, e.absolute_path)) or '#'}: {e.message}" for e in validator(self.schema).iter_errors(value)]
        return value, errors


@dataclass(eq=False)
class LinkedGrammar(Grammar):
    """A schema whose references are linked rather than expanded (automata.linked): the regex is
    the root's, ``definitions`` the referenced ones'; ``automaton`` is a LinkedAutomaton and a
    state a tuple of its configurations."""

    definitions: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        pass  # the linked automaton counts its strings itself (counters are per part)

    @property
    def initial_state(self) -> tuple:
        return self.automaton.initial_state

    def step(self, state: Any, token: int, left: int) -> Any:
        text = self.vocab.token_text(token)
        return self.automaton.step(state, text, left) if text else None

    def is_final(self, state: Any) -> bool:
        return self.automaton.is_final(state)

    def is_complete(self, state: Any) -> bool:
        return self.automaton.is_complete(state)

    def mask(self, state: Any, left: int, width: int) -> mx.array:
        def build(budget: int) -> tuple[bytes, mx.array]:
            got = block_mask(self.automaton, state, budget, self.is_final(state), self.vocab, width)
            if got is not None:
                return got
            ids = self.automaton.allowed(state, budget) if budget >= 0 else np.zeros(0, dtype=np.int32)
            return allowed_mask(ids, self.is_final(state), self.vocab, width)

        return state_mask(self._owner, state, left - 1, width, lambda: self.automaton.cap(state), build)

    def eos_mask(self, width: int) -> mx.array:
        return eos_mask(self.vocab, width)


# The longest string bound a JSON grammar spells in its DFA (16 states a character: a pattern's
# or a format's bounds, a minLength). A plain string whose maxLength is above COUNT_ABOVE is
# counted beside the DFA state (automata.counters): a {0,100} string spelled out is 1,600 states
# of outlines-core's regex compile, about 30 ms. Tool arguments, whose automata are materialised,
# count up to the translator's 256 and refuse above.
MAX_LENGTH = 256
COUNT_ABOVE = 32
# A linked grammar counts a string whose bounds are LINK_COUNT_FROM characters apart or more (and at
# least as many as the longest token holds: automata.linked); it spells narrower bounds in a
# definition's own DFA (16 states a character), past LINKED_MAX_LENGTH in chunks
# (json_schema.translate.LINK_CHUNK).
LINK_COUNT_FROM = 256
LINKED_MAX_LENGTH = 1024
GRAMMARS = Cache("grammars", 1 << 30, lambda g: g.automaton.nbytes + len(g.regex))
# An expanded regex longer than SHRINK_FROM is compiled with its references linked instead when
# linking shrinks the regexes SHRINK times (linking compiles each definition once, the
# expansion's DFA copies it per use, and outlines-core's compile time goes by DFA states: on
# JSONSchemaBench's o46322, 0.5.2, o10293, kb_591 and wp_74, shrunk 1.7-7.2x, linked compiles
# took 0.2-0.6 of the expanded ones), and any when linking enforces more (lenient mode loosens
# references past a budget; linking need not).
SHRINK_FROM, SHRINK = 20_000, 1.5
# A strict expansion is stopped once its references have produced LINK_PROBE characters, and the
# schema linked when its linked regexes cost a SHRINK-th of that or less (linked schemas' expansions
# run to millions of characters: 30-70 ms of translation the decision then does without); else the
# expansion runs on to MAX_EXPANSION and the sizes are compared as above.
LINK_PROBE = 400_000
# A character spelled under a repetition bound is about 16 DFA states, some 32 regex characters'
# worth: the expansion counts plain strings bounded past COUNT_ABOVE beside the DFA, a linked
# grammar spells those whose bounds are less than LINK_COUNT_FROM apart (in chunks past
# LINKED_MAX_LENGTH), so sizes compare with that added.
SPELLED_COST = 32


def _cost(regexes: list[str]) -> int:
    """The regexes' length plus SPELLED_COST a character for repetitions bounded past COUNT_ABOVE."""
    spelled = sum(b for r in regexes for b in repeat_bounds(r) if b > COUNT_ABOVE)
    return sum(map(len, regexes)) + SPELLED_COST * spelled


def compile_regex_grammar(tokenizer: Any, regex: str, *, timeout: float | None = DEFAULT_TIMEOUT) -> Grammar:
    """A Grammar for a raw regex over the output text (special tokens via ``vocab.symbol``)."""
    vocab = build_vocab(tokenizer)
    return GRAMMARS.get_or_build(("regex", vocab.fingerprint, regex),
                                 lambda: Grammar(vocab, compile_regex(regex, vocab, timeout=timeout, lazy=True), regex))


def compile_json_schema(
    tokenizer: Any,
    schema: Any,
    *,
    whitespace: str = WHITESPACE,
    strict: bool = True,
    max_depth: int = 3,
    timeout: float | None = DEFAULT_TIMEOUT,
    link: bool | None = None,
    extra_keys: bool | None = False,
) -> Grammar:
    """Compile a JSON schema (dict, bool or JSON text) for ``tokenizer``; cached.

    ``strict`` (default) raises SchemaError for any keyword the mask cannot enforce; with
    ``strict=False`` such keywords are listed in ``grammar.unenforced`` and checked after
    generation. ``timeout`` (seconds) bounds the automaton build, which runs in a builder
    process (``None``: in this process, unbounded in time). ``link=True`` compiles each
    referenced definition once and links them (recursion then nests as deep as the budget allows,
    not ``max_depth``); ``None`` (default) links when the expanded regex is too large, would
    leave references unenforced, cut a recursion at ``max_depth`` (always: linked, it nests as
    deep as the budget allows) or write free values (any JSON value: one small definition
    linked, a thousand DFA states written out); ``False`` never links. By default objects write
    their declared keys only (every output is still valid, and models are not invited to invent
    keys); ``extra_keys=True`` lets them write undeclared keys after those where the schema allows
    any, ``extra_keys=None`` only where their ``additionalProperties`` is given (true or a schema);
    an object of more than ``json_schema.translate.EXPANDED_EXTRA_AFTER`` (8) declared
    keys writes them only linked, so with ``link=None`` such a schema is linked.
    """
    if isinstance(schema, (str, bytes)):
        try:
            schema = json.loads(schema)
        except ValueError as e:
            raise SchemaError(f"schema is not valid JSON: {e}") from None
    vocab = build_vocab(tokenizer)
    try:
        text = schema_key(schema)
    except (TypeError, ValueError) as e:
        raise SchemaError(f"schema is not JSON data: {e}") from None
    key = ("schema", vocab.fingerprint, text, whitespace, strict, max_depth, link, extra_keys)
    found = GRAMMARS.get(key)
    if found is not None:  # checked when it was compiled
        return found
    check_schema(schema)
    count_from = max(LINK_COUNT_FROM, vocab.longest)

    def build() -> Grammar:
        # per vocabulary, once (0.2 s for Qwen3), as the byte trie is: counted strings' masks read it
        counters.token_matrix(vocab)
        warm_runs(vocab, FORMAT_CLASSES)  # once too (~40 ms for Qwen3): the formats' masks read them
        if link:
            return _linked(None)
        linked = None
        try:
            try:
                # a strict expansion past LINK_PROBE characters stops there when links cost far less
                t = expand(LINK_PROBE if strict and link is None else MAX_EXPANSION)
            except SchemaError as e:
                if not (strict and link is None and expansion_stopped(e)):
                    raise
                linked = try_linked()
                if linked is not None and _cost([linked.regex, *linked.definitions]) * SHRINK < LINK_PROBE:
                    try:
                        return _linked(None, linked)
                    except (SchemaError, CompileError):
                        pass  # the expansion may still compile
                t = expand(MAX_EXPANSION)
        except SchemaError as e:
            if not expansion_stopped(e, depth=True) or link is False:
                raise
            return _linked(e, linked)
        if link is None and (len(t.regex) > SHRINK_FROM or t.free_values or t.narrowed or t.cut
                             or any(kw == "$ref" for _, kw in t.unenforced)):
            linked = linked or try_linked()
            if linked is not None and (_cost([linked.regex, *linked.definitions]) * SHRINK < _cost([t.regex])
                                       or len(linked.unenforced) < len(t.unenforced) or t.narrowed or t.cut):
                try:
                    return _linked(None, linked)
                except (SchemaError, CompileError):
                    pass  # the expansion compiles, or fails with its own error
        return Grammar(vocab, compile_regex(t.regex, vocab, timeout=timeout, lazy=True), t.regex, schema, t.unenforced,
                       t.counters)

    def expand(max_expansion: int) -> Any:
        return schema_to_regex(schema, whitespace=whitespace, strict=strict, max_depth=max_depth,
                               max_length=MAX_LENGTH, max_chars=MAX_REGEX_CHARS, count_above=COUNT_ABOVE,
                               extra_keys=extra_keys, max_expansion=max_expansion)

    def translate_linked() -> Any:
        return schema_to_regex(schema, whitespace=whitespace, strict=strict, max_depth=max_depth,
                               max_length=LINKED_MAX_LENGTH, count_above=COUNT_ABOVE, link=True,
                               extra_keys=extra_keys, link_count_from=count_from)

    def try_linked() -> Any:
        """The linked translation, or None when the schema has none (its error is the expansion's to give)."""
        try:
            return translate_linked()
        except SchemaError:
            return None

    def _linked(failed: SchemaError | None, t: Any = None) -> Grammar:
        try:
            if t is None:
                t = translate_linked()
            automaton = compile_linked([t.regex, *t.definitions], vocab, timeout=timeout, limits=t.counters)
        except (SchemaError, CompileError):
            if failed is not None:
                raise failed from None
            raise
        return LinkedGrammar(vocab, automaton, t.regex, schema, t.unenforced, definitions=t.definitions)

    return GRAMMARS.get_or_build(key, build)
