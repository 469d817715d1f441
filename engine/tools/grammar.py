"""A compiled tool-call grammar, and matching over it (the protocol the Matcher drives).

A match state is a small sorted tuple of configurations: ``Outer`` (a state of the turn's outer
automaton) or ``InCall`` (a position inside one tool's call, with the outer state the call
returns to). Every configuration carries its fewest tokens to the end of the turn, which is what
keeps a call from opening without room to close and forces it closed before ``max_tokens``.
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import mlx.core as mx
import numpy as np

from ..automata import UNREACHABLE, allowed_mask, eos_mask, match_state, new_owner, state_mask
from ..constraint import walk
from ..errors import BudgetError
from ..matcher import Matcher
from ..vocabulary import Vocab
from .calls import CallSpec, Tool, call_spec, symbol_filler
from .parser import ParsedOutput, Parser
from .stream import StreamParser
from .pieces import PieceStore
from .tree import Format
from .turn import MACRO_ID, Turn, turn_tree


class Outer(NamedTuple):
    state: int  # in the outer automaton
    calls: int  # calls made so far in the turn


class InCall(NamedTuple):
    ret: int  # the outer state the call returns to
    calls: int
    tool: int
    piece: int
    state: Any  # in that piece's automaton (a linked piece's: a tuple of its configurations)


def _merged(configurations) -> tuple:
    """A match state: the configurations sorted, those in one linked piece (same return, call,
    tool and piece; their states are tuples of the piece's configurations) joined in one match
    state of its automaton (so two such states are never compared)."""
    plain, linked = set(), {}
    for c in configurations:
        if type(c) is InCall and type(c.state) is tuple:
            linked.setdefault(c[:4], set()).update(c.state)
        else:
            plain.add(c)
    plain.update(InCall(*k, match_state(s)) for k, s in linked.items())
    return tuple(sorted(plain, key=_order))


def _order(c) -> tuple:
    """A configuration's sort key: a linked piece holds one (its state is left out)."""
    return (c[:4] + (-1,)) if type(c) is InCall and type(c.state) is tuple else tuple(c)


class ToolGrammar:
    """Tools in a family's format, compiled for one request shape: cached and shared.
    ``matcher(max_tokens)`` per request; ``parse`` and ``stream_parser`` read what was generated."""

    def __init__(self, vocab: Vocab, fmt: Format, tools: list[Tool], *, tool_choice: Any, parallel: bool,
                 thinking: Any, reserve: int, strict: bool, whitespace: str, lazy: bool, workers: int,
                 timeout: float | None) -> None:
        self.vocab = vocab
        self.format = fmt
        self.offered = tools
        self.tool_choice = tool_choice
        self.reserve = reserve
        self.lazy = lazy
        named = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
        self.tools = [t for t in tools if t.name == named] if named else list(tools)
        self.start = turn_tree(fmt, tool_choice, parallel, thinking)
        self.symbols = {name: vocab.symbol(text) for name, text in fmt.specials.items()}
        self.calls: list[CallSpec] = [call_spec(fmt, t, self.symbols, strict=strict, whitespace=whitespace)
                                      for t in self.tools]
        self.unenforced = [u for c in self.calls for u in c.unenforced]
        self.pieces = PieceStore(vocab, self.calls, lazy=lazy, timeout=timeout)
        if not lazy:
            self.pieces.compile_all(workers)
        weight = min((self.pieces.call_min(ti) for ti in range(len(self.tools))), default=UNREACHABLE)
        self.turn = Turn(fmt, self.start, symbol_filler(self.symbols), vocab, call_weight=weight, timeout=timeout)
        self.outer = self.turn.automaton
        self.min_tokens = self.turn.min_tokens
        self._owner = new_owner()  # this grammar in STATE_MASKS
        self._parser: Parser | None = None
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return self.outer.nbytes + self.pieces.nbytes

    # --- matching -------------------------------------------------------------------------

    @property
    def initial_state(self) -> tuple:
        return (Outer(0, 0),)

    def _dist(self, c) -> int:
        if type(c) is Outer:
            return int(self.turn.tail[c.state])
        return self.pieces.piece(c.tool, c.piece, c.calls).bound_of(c.state) \
            + self.pieces.rest(c.tool, c.piece, c.calls) + int(self.turn.tail[c.ret])

    def _entry(self, ret: int, calls: int, ti: int, p: int) -> InCall:
        """The start of tool ``ti``'s piece ``p``."""
        return InCall(ret, calls, ti, p, self.pieces.piece(ti, p, calls).initial_state)

    def _settle(self, c: InCall) -> list:
        """``c``, and where it leads without a token when its piece is complete."""
        a = self.pieces.piece(c.tool, c.piece, c.calls)
        out = [c] if a.has_tokens(c.state) else []
        if a.is_final(c.state):
            out.append(self._entry(c.ret, c.calls, c.tool, c.piece + 1) if not self.pieces.last(c.tool, c.piece)
                       else Outer(c.ret, c.calls + 1))
        return out

    def step(self, state: tuple, token: int, left: int) -> tuple | None:
        """The state after ``token`` with ``left`` tokens still to come, or None if it is not allowed."""
        out = []
        for c in state:
            if type(c) is Outer:
                t = self.outer.next_state(c.state, token)
                if t >= 0:
                    out.append(Outer(t, c.calls))
                r = int(self.turn.macro_ret[c.state])
                if r >= 0:
                    for ti in range(len(self.tools)):
                        out += self.step((self._entry(r, c.calls, ti, 0),), token, UNREACHABLE) or ()
            else:
                nxt = self.pieces.piece(c.tool, c.piece, c.calls).next_state(c.state, token)
                if nxt != -1:
                    out += self._settle(InCall(c.ret, c.calls, c.tool, c.piece, nxt))
                if self.pieces.joins(c.tool, c.piece):
                    toks, tgts, _ = self.pieces.straddle(c.tool, c.piece, c.calls, c.state)
                    i = int(toks.searchsorted(np.int32(token)))
                    if i < len(toks) and toks[i] == token:
                        out += self._settle(InCall(c.ret, c.calls, c.tool, c.piece + 1, tgts[i]))
        out = _merged(c for c in out if self._dist(c) <= max(left, 0))
        return out or None

    def is_final(self, state: tuple) -> bool:
        return any(type(c) is Outer and self.outer.final[c.state] for c in state)

    def is_complete(self, state: tuple) -> bool:
        o = self.outer
        return self.is_final(state) and all(
            type(c) is Outer and o.offsets[c.state + 1] == o.offsets[c.state] for c in state)

    def _allowed(self, c, budget: int) -> list[np.ndarray]:
        if type(c) is Outer:
            o = self.outer
            toks = o.tokens[o.offsets[c.state]:o.offsets[c.state + 1]]
            ok = (self.turn.need(c.state, self.reserve) <= budget) & (toks != MACRO_ID)
            parts = [toks[ok]]
            r = int(self.turn.macro_ret[c.state])
            if r >= 0:
                for ti in range(len(self.tools)):
                    parts += self._piece_allowed(self._entry(r, c.calls, ti, 0), budget)
            return parts
        return self._piece_allowed(c, budget)

    def _piece_allowed(self, c: InCall, budget: int) -> list[np.ndarray]:
        ps = self.pieces
        a = ps.piece(c.tool, c.piece, c.calls)
        offset = ps.rest(c.tool, c.piece, c.calls) + int(self.turn.tail[c.ret])
        out = [a.successors_within(c.state, budget - offset)]
        if ps.joins(c.tool, c.piece):
            toks, _, bounds = ps.straddle(c.tool, c.piece, c.calls, c.state)
            if len(toks):
                out.append(toks[bounds + ps.rest(c.tool, c.piece + 1, c.calls) + int(self.turn.tail[c.ret])
                                <= budget])
        return out

    def _cap(self, c) -> int:
        """The largest budget that can still change this configuration's mask."""
        if type(c) is Outer:
            d = self.turn.need(c.state, self.reserve)
            cap = int(d[d < UNREACHABLE].max(initial=0))
            r = int(self.turn.macro_ret[c.state])
            if r >= 0:
                cap = max([cap] + [self._piece_cap(self._entry(r, c.calls, ti, 0)) for ti in range(len(self.tools))])
            return cap
        return self._piece_cap(c)

    def _piece_cap(self, c: InCall) -> int:
        ps = self.pieces
        a = ps.piece(c.tool, c.piece, c.calls)
        cap = max(a.target_cap(c.state), 0) + ps.rest(c.tool, c.piece, c.calls)
        if ps.joins(c.tool, c.piece):
            toks, _, d = ps.straddle(c.tool, c.piece, c.calls, c.state)
            if len(toks):
                d = d[d < UNREACHABLE]
                cap = max(cap, int(d.max(initial=0)) + ps.rest(c.tool, c.piece + 1, c.calls))
        return cap + int(self.turn.tail[c.ret])

    def mask(self, state: tuple, left: int, width: int) -> mx.array:
        def build(budget: int) -> tuple[bytes, mx.array]:
            parts = [np.zeros(0, np.int32)]
            if budget >= 0:
                for c in state:
                    parts += self._allowed(c, budget)
            return allowed_mask(np.concatenate(parts), self.is_final(state), self.vocab, width)

        return state_mask(self._owner, state, left - 1, width, lambda: max(self._cap(c) for c in state), build)

    def eos_mask(self, width: int) -> mx.array:
        return eos_mask(self.vocab, width)

    def fits(self, max_tokens: int) -> bool:
        """The shortest valid turn fits in ``max_tokens``."""
        return self.min_tokens <= max_tokens

    def matcher(self, max_tokens: int) -> Matcher:
        """A fresh per-request matcher; raises BudgetError when ``max_tokens`` cannot hold a turn."""
        if not self.fits(max_tokens):
            raise BudgetError(f"max_tokens={max_tokens} cannot hold the shortest valid turn, which needs "
                              f"{self.min_tokens} tokens (tool_choice={self.tool_choice!r})")
        return Matcher(self, max_tokens)

    def walk(self, token_ids: list[int], max_tokens: int | None = None) -> tuple | None:
        """The state after ``token_ids`` (end-of-sequence ids stop the walk), or None."""
        return walk(self, token_ids, max_tokens)

    # --- reading what was generated --------------------------------------------------------

    def parser(self) -> Parser:
        """The parser for this grammar's outputs (built on first use, then shared)."""
        with self._lock:
            if self._parser is None:
                self._parser = Parser(self.format, self.start, self.calls, self.symbols, self.vocab)
            return self._parser

    def parse(self, output: Any) -> ParsedOutput:
        """Content, reasoning and OpenAI-shaped tool calls from generated text or token ids."""
        return self.parser().parse(output)

    def stream_parser(self) -> StreamParser:
        """An incremental parser: feed token ids, get OpenAI-style deltas."""
        return StreamParser(self.parser())
