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

QUOTE, BACKSLASH = 0x22, 0x5C
SYMBOL_LEAD = 0xEE  # the lead byte of U+E000-U+EFFF, where the engine's symbols live
PLAIN = frozenset(range(0x20, 0x100)) - {QUOTE, BACKSLASH, SYMBOL_LEAD}
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
                loops[s] = loop(trans, s, limit)
    return loops


def loop(trans: np.ndarray, s: int, limit: int) -> Loop:
    """The counted loop at state ``s`` taking up to ``limit`` characters."""
    return Loop(s, limit, _inside(trans, s))


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


def token_matrix(vocab: Vocab) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every id's first WALK_BYTES bytes as a (size, WALK_BYTES) matrix, each id's length, and
    the characters each id begins when all its bytes are plain string content (no quote,
    backslash, control byte or symbol's lead byte), -1 for the others."""
    def build():
        texts = [t or b"" for t in vocab.texts]
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        # every text's bytes in one buffer, gathered by offset (a first request waits for this)
        flat = np.frombuffer(b"".join(texts) + bytes(WALK_BYTES), dtype=np.uint8)
        windows = np.lib.stride_tricks.sliding_window_view(flat, WALK_BYTES)
        present = np.arange(WALK_BYTES) < lengths[:, None]
        m = windows[np.concatenate([[0], np.cumsum(lengths)[:-1]])] * present
        plain = ~((m < 0x20) | (m == QUOTE) | (m == BACKSLASH) | (m == SYMBOL_LEAD)).any(axis=1, where=present)
        chars = np.where(plain & (lengths > 0), (((m & 0xC0) != 0x80) & present).sum(axis=1), -1)
        for r in np.flatnonzero(lengths > WALK_BYTES).tolist():
            chars[r] = sum((b & 0xC0) != 0x80 for b in texts[r]) if PLAIN.issuperset(texts[r]) else -1
        return m, lengths, chars
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


def misfits(trans: np.ndarray, loops: dict[int, Loop], t: Tables, state: int, count: int, vocab: Vocab,
            allowed: np.ndarray) -> np.ndarray:
    """The ids ``allowed`` (bools by id: the DFA's tokens from ``state``) that ``step`` refuses from
    (``state``, ``count``). Only ids with more bytes than the room are looked at (see ``fits``):
    near a loop's end most of a wide row, but a handful where the loop is still far."""
    _, lengths, _ = token_matrix(vocab)
    long = np.flatnonzero(lengths[:len(allowed)] > _room(t, state, count))
    long = long[allowed[long]]
    return long[~fits(trans, loops, t, state, count, vocab, long)]


def _room(t: Tables, state: int, count: int) -> int:
    """Characters a token may still begin from (``state``, ``count``) before a loop's limit binds:
    the loop's room inside one, the bytes to the nearest loop plus the smallest limit outside."""
    k = t.inside[state]
    return int(t.limits[k] - count if k >= 0 else t.reach[state] + t.limits[:-1].min())


def fits(trans: np.ndarray, loops: dict[int, Loop], t: Tables, state: int, count: int, vocab: Vocab,
         ids: np.ndarray) -> np.ndarray:
    """Which tokens of ``ids`` (allowed from ``state`` by the DFA) ``step`` takes from (``state``,
    ``count``): their first WALK_BYTES bytes walked side by side, longer tokens one by one. Only
    tokens with more bytes than the room left (plus the bytes to a loop, from outside one) are
    walked: a character is at least a byte."""
    _, all_lengths, chars = token_matrix(vocab)
    room = _room(t, state, count)
    ok = all_lengths[ids] <= room
    if t.loop_at[state] >= 0:
        # at a character's start in the loop, a plain token the DFA allows stays in the string,
        # each character it begins counted (a begun one must fit too): no walk needed
        c = chars[ids]
        plain = c >= 0
        ok = np.where(plain, c <= room, ok)
        walk = np.flatnonzero(~ok & ~plain)
    else:
        walk = np.flatnonzero(~ok)
    ok[walk] = _fits(trans, loops, t, state, count, vocab, ids[walk])
    return ok


def _fits(trans: np.ndarray, loops: dict[int, Loop], t: Tables, state: int, count: int, vocab: Vocab,
          ids: np.ndarray) -> np.ndarray:
    matrix, all_lengths, _ = token_matrix(vocab)
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
