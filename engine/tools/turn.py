"""The turn with each call as one symbol: the outer automaton, per mode, and its distances.

The outer automaton depends on the format and the modes only, never on the tools, so it is
compiled once per family and mode. A call is one macro edge; its weight (the fewest tokens of
any offered tool's call) turns the outer graph's distances into the fewest tokens to finish
the turn from each state.
"""

from __future__ import annotations

import heapq
from typing import Any, Callable

import numpy as np

from ..automata import UNREACHABLE, compile_regex, sorted_unique
from ..errors import CompileError
from ..symbols import MACRO
from .tree import Format, contains, drop, must, render, single, strip_open, without

MACRO_ID = 1 << 30  # the macro's pseudo-token id in the outer automaton


def turn_tree(fmt: Format, tool_choice: Any, parallel: bool, thinking: Any):
    """``start`` rewritten for the request's modes."""
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


class Turn:
    """The outer automaton and, per state, the fewest tokens to finish the turn."""

    def __init__(self, fmt: Format, start: Any, fill_symbols: Callable, vocab: Any, *,
                 call_weight: int, timeout: float | None) -> None:
        def fill(n):
            got = fill_symbols(n)
            if got is not None:
                return got
            if n[0] == "ref" and n[1] == "call":
                return MACRO
            if n[0] == "hole":
                raise CompileError(f"format {fmt.name}: hole {n[1]} outside the call rule")
            return None

        self.regex = render(fmt, start, fill)
        a = self.automaton = compile_regex(self.regex, vocab, macro=(MACRO, MACRO_ID), timeout=timeout)
        ends = a.offsets[1:]
        has = (ends > a.offsets[:-1]) & (a.tokens[np.maximum(ends - 1, 0)] == MACRO_ID)
        self.macro_ret = np.where(has, a.targets[np.maximum(ends - 1, 0)], -1)  # where a call returns to
        self._preds = None
        n = a.num_states
        plain = self._weighted(call_weight)
        no_call = self._weighted(UNREACHABLE)
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

    def _weighted(self, w: int) -> np.ndarray:
        """Fewest tokens to acceptance when a call (macro edge) counts ``w`` (reverse Dijkstra)."""
        a = self.automaton
        n = a.num_states
        if self._preds is None:  # the outer graph's distinct edges, once: free text has 150k of them
            src = np.repeat(np.arange(n, dtype=np.int64), np.diff(a.offsets))
            macro = a.tokens == MACRO_ID
            edges = sorted_unique(src[~macro] * n + a.targets[~macro])
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

    def need(self, s: int, reserve: int) -> np.ndarray:
        """Tokens needed after each outer transition of state ``s`` (with the thinking reserve)."""
        a = self.automaton
        d = self.tail[a.targets[a.offsets[s]:a.offsets[s + 1]]]
        if self.zone[s]:
            d = np.where(d >= self.tail[s], d + reserve, d)
        return d
