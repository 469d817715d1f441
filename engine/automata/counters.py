"""Long strings counted beside the DFA state instead of one DFA state per character.

A string whose maxLength is above what the DFA counts is written ``"C{lo}(?:C|M)*"``: the loop
state takes any number of characters, and M, a marker no token spells, marks the loop so it can be
found in the DFA (M leads from the loop state back to itself). The matcher's state in such a loop
is (DFA state, characters so far); a token is allowed while the count stays within the limit.
The bound to acceptance is the DFA's (closing the string takes no character), so budgets hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..caches import Cache
from .automaton import bfs
from ..symbols import counter_symbol
from ..vocabulary import Vocab

QUOTE = 0x22
WALK_BYTES = 64  # token bytes walked when counting; a longer token counts its byte length
MATRICES = Cache("token byte matrices", 4, per_vocabulary=True)  # by vocabulary fingerprint


@dataclass(frozen=True)
class Loop:
    """A counted loop: its state, the most characters it may take, and the states inside one
    character (the loop state included), from which arriving at the loop state completes a character."""

    state: int
    limit: int
    inside: frozenset


def find_loops(trans: np.ndarray, limits: list[int]) -> dict[int, Loop]:
    """The counted loops of a DFA whose regex used markers 0..len(limits)-1: {loop state: Loop}."""
    n = trans.shape[0] - 1
    loops: dict[int, Loop] = {}
    for k, limit in enumerate(limits):
        cur = np.arange(n)
        for b in counter_symbol(k).encode():
            cur = trans[cur, b]
        for s in np.flatnonzero(cur == np.arange(n)).tolist():
            old = loops.get(s)
            if old is None or old.limit > limit:
                loops[s] = Loop(s, limit, _inside(trans, s))
    return loops


def _inside(trans: np.ndarray, s: int) -> frozenset:
    """States reached from ``s`` by bytes without closing the string or coming back to ``s``."""
    n = trans.shape[0] - 1
    seen, todo = {s}, [s]
    while todo:
        u = todo.pop()
        row = trans[u].copy()
        if u == s:
            row[QUOTE] = n
        for v in np.unique(row).tolist():
            if v != n and v not in seen:
                seen.add(v)
                todo.append(v)
    return frozenset(seen)


def step(trans: np.ndarray, loops: dict[int, Loop], state: int, count: int, text: bytes) -> tuple[int, int]:
    """Walk ``text`` from (``state``, ``count``): the DFA state and the count after it, (-1, 0) when
    a byte is not allowed or a loop would take more characters than its limit (a character begun
    counts)."""
    dead = trans.shape[0] - 1
    for b in text:
        nxt = int(trans[state, b])
        if nxt == dead:
            return -1, 0
        loop = loops.get(nxt)
        if loop is not None:
            if state in loop.inside:
                count += 1
                if count > loop.limit:
                    return -1, 0
            else:
                count = 0
        state = nxt
    loop = current_loop(loops, state)
    if loop is not None and state != loop.state and count >= loop.limit:
        return -1, 0  # a character begun that the loop has no room to finish
    return state, count


def current_loop(loops: dict[int, Loop], state: int) -> Loop | None:
    """The loop whose character ``state`` is in (its loop state or partway through a character)."""
    loop = loops.get(state)
    if loop is not None:
        return loop
    return next((x for x in loops.values() if state in x.inside), None)


def token_matrix(vocab: Vocab) -> tuple[np.ndarray, np.ndarray]:
    """Every id's first WALK_BYTES bytes as a (size, WALK_BYTES) matrix, and each id's length."""
    def build():
        texts = list(vocab.texts)
        lengths = np.fromiter((len(t or b"") for t in texts), dtype=np.int64, count=len(texts))
        m = np.zeros((len(texts), WALK_BYTES), dtype=np.uint8)
        for r, t in enumerate(texts):
            if t:
                m[r, :min(len(t), WALK_BYTES)] = np.frombuffer(t[:WALK_BYTES], dtype=np.uint8)
        return m, lengths
    return MATRICES.get_or_build(vocab.fingerprint, build)


@dataclass(frozen=True)
class Tables:
    """Per DFA state: the loop it is the loop state of, the loop whose character it is inside
    (-1 for none; ``limits[-1]`` is past any count), and the fewest bytes to a loop state."""

    loop_at: np.ndarray
    inside: np.ndarray
    limits: np.ndarray
    reach: np.ndarray


def tables(trans: np.ndarray, loops: dict[int, Loop]) -> Tables:
    n = trans.shape[0] - 1
    loop_at = np.full(n + 1, -1, dtype=np.int64)
    inside = np.full(n + 1, -1, dtype=np.int64)
    order = list(loops.values())
    for k, loop in enumerate(order):
        inside[list(loop.inside)] = k
    for k, loop in enumerate(order):
        loop_at[loop.state] = k
    limits = np.array([x.limit for x in order] + [np.iinfo(np.int64).max // 2], dtype=np.int64)
    rows = trans[:n]
    keep = rows != n
    keep[:, 1:] &= rows[:, 1:] != rows[:, :-1]  # one edge per run of bytes going alike
    src = np.repeat(np.arange(n), keep.sum(axis=1))
    reach = bfs(rows[keep], src, np.array(list(loops), dtype=np.int64), n + 1)[:n]
    return Tables(loop_at, inside, limits, reach)


def fits(trans: np.ndarray, loops: dict[int, Loop], t: Tables, state: int, count: int, vocab: Vocab,
         ids: np.ndarray) -> np.ndarray:
    """Which tokens of ``ids`` (allowed from ``state`` by the DFA) ``step`` takes from (``state``,
    ``count``): their first WALK_BYTES bytes walked side by side, longer tokens one by one. Only
    tokens with more bytes than the room left (plus the bytes to a loop, from outside one) are
    walked: a character is at least a byte."""
    matrix, all_lengths = token_matrix(vocab)
    k = t.inside[state]
    room = t.limits[k] - count if k >= 0 else t.reach[state] + t.limits[:-1].min()
    ok = all_lengths[ids] <= room
    walk = np.flatnonzero(~ok)
    ok[walk] = _fits(trans, loops, t, state, count, vocab, ids[walk])
    return ok


def _fits(trans: np.ndarray, loops: dict[int, Loop], t: Tables, state: int, count: int, vocab: Vocab,
          ids: np.ndarray) -> np.ndarray:
    matrix, all_lengths = token_matrix(vocab)
    m, lengths = matrix[ids], all_lengths[ids]
    cur = np.full(len(ids), state, dtype=np.int64)
    cnt = np.full(len(ids), count, dtype=np.int64)
    ok = np.ones(len(ids), dtype=bool)
    for col in range(WALK_BYTES):
        valid = (col < lengths) & ok
        if not valid.any():
            break
        nxt = trans[cur, m[:, col]]
        k = t.loop_at[nxt]
        into = valid & (k >= 0)
        cnt = np.where(into, np.where(t.inside[cur] == k, cnt + 1, 0), cnt)
        ok &= ~(into & (cnt > t.limits[k]))
        cur = np.where(valid, nxt, cur)
    k = t.inside[cur]
    ok &= ~((k >= 0) & (t.loop_at[cur] < 0) & (cnt >= t.limits[k]))  # a character begun without room
    for i in np.flatnonzero(ok & (lengths > WALK_BYTES)).tolist():
        ok[i] = step(trans, loops, state, count, vocab.texts[ids[i]])[0] >= 0
    return ok
