"""Regex -> DFA over bytes, by outlines-core (the one regex compiler the engine uses)."""

from __future__ import annotations

from itertools import chain

import numpy as np
from outlines_core import Index, Vocabulary

from ..errors import CompileError
from ..symbols import END, START

_BYTES = Vocabulary(256, {bytes([b]): [b] for b in range(256)})  # each byte a token of its own


def byte_dfa(regex: str) -> tuple[np.ndarray, np.ndarray]:
    """The regex's DFA over bytes: (transitions (n+1, 256) with n as the dead state, final (n,)).

    outlines-core compiles the regex; its index over the 256 one-byte tokens is the DFA, except
    that it leaves out a step from a matching position into a non-matching one (a multi-byte
    character after a complete match, say). Compiling ``(?:regex)`` followed by END, a symbol no
    token can spell, means no position before END matches, so no step is left out; a state is
    final when END leads from it to acceptance. START, another symbol no token spells, goes in
    front: outlines-core also builds the unanchored DFA, where any byte may begin a match, and for
    a regex whose first character recurs inside it (a JSON string's quote, escaped within) that
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
