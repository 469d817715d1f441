"""Regex -> DFA over bytes, by outlines-core (the one regex compiler the engine uses).

outlines-core spends 5-9 µs per DFA state it builds (on this machine), and a JSON string's rest
(its characters, escapes and closing quote) is ~20 states, written again for every string a
schema holds. Those are built once: a regex is compiled with SPLICE standing for each string's
rest (NONEMPTY_SPLICE for a non-empty string's), and a copy of the rest's own DFA is spliced in
where the symbol is read. Quoted literals (object keys, enum strings: a third of the states) are
compiled as one symbol each (literal_symbol), and the literals read from a state are spliced in
as a trie of their bytes.
"""

from __future__ import annotations

import re
from itertools import chain

import numpy as np
from outlines_core import Index, Vocabulary

from ..errors import CompileError
from ..regexes import NONEMPTY_REST, STRING_REST
from ..symbols import END, FORGE_BYTE, LITERAL_SLOTS, NONEMPTY_SPLICE, SPLICE, START, literal_symbol

_BYTES = Vocabulary(256, {bytes([b]): [b] for b in range(256)})  # each byte a token of its own


def byte_dfa(regex: str) -> tuple[np.ndarray, np.ndarray]:
    """The regex's DFA over bytes: (transitions (n+1, 256) with n as the dead state, final (n,))."""
    used = [symbol for symbol, rest in _RESTS.items() if '"' + rest in regex and symbol not in regex]
    written = regex
    for symbol in used:
        written = written.replace('"' + _RESTS[symbol], '"' + symbol)
    keyed, literals = quoted_literals(written)
    if literals:
        dfa = _spliced(keyed, used, literals)
        if dfa is not None:
            return dfa
    if not used:
        return outlines_dfa(regex)
    return _spliced(written, used, {}) or outlines_dfa(regex)


def _spliced(written: str, used: list[str], literals: dict[bytes, bytes]) -> tuple | None:
    """``written``'s DFA with the string rests of ``used`` and the ``literals`` spliced in; None
    where a splice declines."""
    dfa = outlines_dfa(written)
    for symbol in used:
        dfa = splice(*dfa, symbol)
        if dfa is None:
            return None
    return splice_literals(*dfa, literals) if literals else dfa


# outside a class: an escape, a class, a quoted run of plain characters and escaped punctuation
# (a literal concatenation), or a run of anything else; a quantifier after a literal's closing
# quote would bind to that quote alone, so such a literal stays written
_LEXEME = re.compile(r"""(\\(?:[xup]\{[^}]*\}|x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|[pP].|.))"""
                     r"""|(\[\^?\]?(?:\\.|[^\]\\])*\])"""
                     r"""|("(?:[^"\\\[\](){}.*+?|^$\x00-\x1f\ue000-\uefff]|\\[-\\.+*?()|\[\]{}^$#&~/])*"(?![?*+{]))"""
                     r"""|([^\\\[]+?(?="|\\|\[|$)|")""", re.S)
_UNESCAPE = re.compile(r"\\(.)", re.S)
MAX_LITERAL = 256  # bytes: the trie of literals sharing a prefix recurses once per shared byte


def quoted_literals(regex: str) -> tuple[str, dict[bytes, bytes]]:
    """``regex`` with each quoted literal up to MAX_LITERAL bytes written as one symbol (one per
    distinct text, up to LITERAL_SLOTS), and each symbol's bytes -> the literal's bytes. A
    regex with a nested class or inline flags (``(?i)``) is left as it is."""
    if "(?" in regex.replace("(?:", "") or "[[" in regex:
        return regex, {}
    out, symbols = [], {}
    for m in _LEXEME.finditer(regex):
        text = m.group(3)
        if text is None:
            if m.group(2) is not None and "[" in m.group(2)[1:].replace("\\[", ""):
                return regex, {}
            out.append(m.group(0))
            continue
        data = _UNESCAPE.sub(r"\1", text).encode()
        symbol = symbols.get(data)
        if symbol is None and len(data) <= MAX_LITERAL and len(symbols) < LITERAL_SLOTS:
            symbol = symbols[data] = literal_symbol(len(symbols))
        out.append(symbol or text)
    return "".join(out), {s.encode(): data for data, s in symbols.items()}


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


def splice_literals(trans: np.ndarray, final: np.ndarray, literals: dict[bytes, bytes]) -> tuple | None:
    """``trans`` with each step on a literal's symbol (its bytes -> the literal's, in ``literals``)
    replaced by the literal's bytes: from a state ``q``, the literals its symbols lead on to are a
    trie of new states whose leaves are the symbols' targets. None where that would not be exact:
    ``q`` has a step of its own on a literal's first byte, or one literal leads on where another
    ends (the subset construction would be needed; the caller builds the literals as written)."""
    n = len(final)
    lead = trans[:n, FORGE_BYTE]
    tries: list[tuple[int, list[tuple[bytes, int]]]] = []
    cut: list[tuple[int, int]] = []
    for q in np.flatnonzero(lead != n).tolist():
        a = int(lead[q])
        found = []
        for b1 in np.flatnonzero(trans[a] != n).tolist():
            b = int(trans[a, b1])
            for b2 in np.flatnonzero(trans[b] != n).tolist():
                data = literals.get(bytes((FORGE_BYTE, b1, b2)))
                if data is not None:
                    found.append((data, int(trans[b, b2])))
                    cut.append((b, b2))
        if found:
            tries.append((q, found))
    if not tries:  # the literals stand where no string reaches
        return trans, final
    memo: dict = {}  # a node's steps ((byte, next state), ...), or a literal's rest (data, i, r) -> its state
    rows: list[tuple[int, int, int]] = []  # (state, byte, next state)

    def tail(data: bytes, i: int, r: int) -> int:
        """The state after ``data[:i]`` from which only ``data[i:]`` leads on, to ``r``."""
        at = r
        for j in range(len(data) - 1, i - 1, -1):
            got = memo.get((data, j, r))
            if got is None:
                got = memo[(data, j, r)] = n + len(memo)
                rows.append((got, data[j], at))
            at = got
        return at

    def node(group: list[tuple[bytes, int]], i: int) -> list[tuple[int, int]] | None:
        """The steps after the common ``i`` bytes of the literals in ``group`` (sorted); None
        where one ends where another leads on."""
        steps = []
        j = 0
        while j < len(group):
            byte = group[j][0][i]
            k = j + 1
            while k < len(group) and group[k][0][i] == byte:
                k += 1
            if k == j + 1:
                steps.append((byte, tail(group[j][0], i + 1, group[j][1])))
            elif any(len(d) == i + 1 for d, _ in group[j:k]):
                return None
            else:
                below = node(group[j:k], i + 1)
                if below is None:
                    return None
                got = memo.get(tuple(below))
                if got is None:
                    got = memo[tuple(below)] = n + len(memo)
                    rows.extend((got, b, v) for b, v in below)
                steps.append((byte, got))
            j = k
        return steps

    for q, found in tries:
        found.sort()
        if any(trans[q, data[0]] != n for data, _ in found):
            return None
        steps = node(found, 0)
        if steps is None:
            return None
        rows.extend((q, b, v) for b, v in steps)
    extra = len(memo)
    total = n + extra
    out = np.full((total + 1, 256), total, dtype=np.int32)
    out[:n] = np.where(trans[:n] == n, total, trans[:n])
    if cut:
        b, byte = np.array(cut).T
        out[b, byte] = total
    u, byte, v = np.array(rows).T
    out[u, byte] = v
    return out, np.concatenate([final, np.zeros(extra, dtype=bool)])


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
