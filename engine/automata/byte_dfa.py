"""Regex -> DFA over bytes, by outlines-core (the one regex compiler the engine uses).

outlines-core spends 5-9 µs per DFA state it builds (on this machine), and a JSON string's rest
(its characters, escapes and closing quote) is ~20 states, written again for every string a
schema holds. Those are built once: a regex is compiled with SPLICE standing for each string's
rest (NONEMPTY_SPLICE for a non-empty string's), and a copy of the rest's own DFA is spliced in
where the symbol is read.
"""

from __future__ import annotations

from itertools import chain

import numpy as np
from outlines_core import Index, Vocabulary

from ..errors import CompileError
from ..regexes import NONEMPTY_REST, STRING_REST
from ..symbols import END, NONEMPTY_SPLICE, SPLICE, START

_BYTES = Vocabulary(256, {bytes([b]): [b] for b in range(256)})  # each byte a token of its own


def byte_dfa(regex: str) -> tuple[np.ndarray, np.ndarray]:
    """The regex's DFA over bytes: (transitions (n+1, 256) with n as the dead state, final (n,))."""
    used = [symbol for symbol, rest in _RESTS.items() if '"' + rest in regex and symbol not in regex]
    if not used:
        return outlines_dfa(regex)
    written = regex
    for symbol in used:
        written = written.replace('"' + _RESTS[symbol], '"' + symbol)
    trans, final = outlines_dfa(written)
    for symbol in used:
        spliced = splice(trans, final, symbol)
        if spliced is None:
            return outlines_dfa(regex)
        trans, final = spliced
    return trans, final


def outlines_dfa(regex: str) -> tuple[np.ndarray, np.ndarray]:
    """byte_dfa as outlines-core builds it, nothing spliced.

    outlines-core's index over the 256 one-byte tokens is the DFA, except that it leaves out a
    step from a matching position into a non-matching one (a multi-byte character after a
    complete match, say). Compiling ``(?:regex)`` followed by END, a symbol no token can spell,
    means no position before END matches, so no step is left out; a state is final when END
    leads from it to acceptance. START, another symbol no token spells, goes in front:
    outlines-core also builds the unanchored DFA, where any byte may begin a match, and for a
    regex whose first character recurs inside it (a JSON string's quote, escaped within) that
    DFA grows exponentially with repetition counts (``{0,20}`` took minutes). A match can only
    begin at START, so the unanchored part stays as small as the anchored one.
    """
    try:
        index = Index(f"{START}(?:{regex}){END}", _BYTES)
    except Exception as e:  # outlines-core raises plain ValueError/RuntimeError on regex trouble
        raise CompileError(f"cannot build an automaton for this regex: {e}") from None
    table = index.get_transitions()
    init = index.get_initial_state()
    for b in START.encode():
        init = table[init][b]
    ids = np.fromiter(table.keys(), dtype=np.int64, count=len(table))
    order = np.concatenate([[init], np.sort(ids[ids != init])])  # the initial state is 0
    dense = np.zeros(int(order.max()) + 1, dtype=np.int32)
    dense[order] = np.arange(len(order), dtype=np.int32)
    n = len(order)
    counts = np.fromiter(map(len, table.values()), dtype=np.int64, count=len(table))
    src = np.repeat(dense[ids], counts)
    byte = np.fromiter(chain.from_iterable(table.values()), dtype=np.int64, count=int(counts.sum()))
    nxt = np.fromiter(chain.from_iterable(row.values() for row in table.values()), dtype=np.int64,
                      count=int(counts.sum()))
    trans = np.full((n + 1, 256), n, dtype=np.int32)
    keep = byte < 256
    trans[src[keep], byte[keep]] = dense[nxt[keep]]
    accepting = np.zeros(n + 1, dtype=bool)
    accepting[dense[list(index.get_final_states())]] = True
    cur = np.arange(n)
    for b in END.encode():
        cur = trans[cur, b]
    return trans, accepting[cur]


def _piece(regex: str) -> tuple[np.ndarray, int, np.ndarray]:
    """A piece to splice: its DFA, its one final state (left only by END's bytes) and its states
    other than the initial and final ones (the states on END's bytes left out)."""
    trans, final = outlines_dfa(regex)
    n = len(final)
    (last,) = np.flatnonzero(final)
    seen, todo = {0}, [0]
    while todo:
        u = todo.pop()
        for v in set(trans[u].tolist()) - {n, last} - seen:
            seen.add(v)
            todo.append(v)
    return trans, int(last), np.array(sorted(seen - {0}), dtype=np.int64)


_RESTS = {SPLICE: STRING_REST, NONEMPTY_SPLICE: NONEMPTY_REST}  # each symbol, the rest it stands for
_PIECES = {symbol: _piece(rest) for symbol, rest in _RESTS.items()}


def splice(trans: np.ndarray, final: np.ndarray, symbol: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``trans`` with each step on ``symbol`` replaced by a copy of the string's rest it stands
    for, or None where that would not be exact. A state ``q`` whose one step is the symbol's
    bytes, to ``r`` through states nothing else enters, means the piece then ``r``: ``q``
    becomes the piece's initial state (with its loops), ``r`` its final one, and its other
    states are added per ``q``. A state with another step (the symbol beside a character the
    piece may begin with) needs the subset construction, and the caller builds the regex as
    written instead."""
    piece, last, inner = _PIECES[symbol]
    n = len(final)
    code = symbol.encode()
    path = [np.arange(n)]
    for b in code:
        path.append(trans[path[-1], b])
    qs = np.flatnonzero(path[-1] != n)
    if not len(qs):
        return None
    read = [qs] + [np.unique(s[qs]) for s in path[1:-1]]  # the states each of the symbol's bytes is read from
    if ((trans[np.concatenate(read)] != n).sum(axis=1) != 1).any():
        return None  # q, or a state inside the symbol's bytes, has another step
    inside = np.concatenate(read[1:])
    into = np.zeros(n + 1, dtype=bool)
    into[inside] = True
    if into[trans[:n]].sum() != sum(map(len, read[:-1])):  # each read from one state, into one
        return None  # something else enters a state inside the symbol's bytes
    k = len(inner)
    total = n + k * len(qs)
    out = np.full((total + 1, 256), total, dtype=np.int32)
    out[:n] = np.where(trans[:n] == n, total, trans[:n])
    out[inside] = total
    to = np.full(len(piece), total, dtype=np.int64)
    for j, (q, r) in enumerate(zip(qs.tolist(), path[-1][qs].tolist())):
        to[0], to[last] = q, r
        to[inner] = n + j * k + np.arange(k)
        out[q] = to[piece[0]]
        out[n + j * k: n + (j + 1) * k] = to[piece[inner]]
    return out, np.concatenate([final, np.zeros(total - n, dtype=bool)])
