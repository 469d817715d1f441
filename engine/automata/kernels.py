"""The loops numpy cannot vectorise without a call per step, compiled by numba.

A trie walk from one state is tens of levels of a handful of nodes each; as numpy calls, each
level costs its calls' fixed overhead (a few us each), which was most of a first mask's time.
Signatures are explicit so each kernel compiles once, when this module is imported (from numba's
on-disk cache after the first time), never at a first call inside a request or a forked child.
Kernels take C-contiguous arrays only, write into arrays their caller made and return a count:
a kernel's first call in a new (forked) process then costs ~20 us, against ~100-200 us for one
that returns an array or is passed a strided view (numba's slow path for either).
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def _levels(trans, coff, byte, eoff, m, total, max_tokens, out_src, out_node, out_cur):
    """walk_levels' walk on from the first ``m`` entries of the ``out_`` arrays (``total`` tokens
    ending on their nodes): the same count or -1 or -2."""
    dead = trans.shape[0] - 1
    size = len(out_src)
    lo = 0
    while lo < m:
        if total > max_tokens:
            return -2
        hi = m
        for i in range(lo, hi):
            parent, state, s = out_node[i], out_cur[i], out_src[i]
            for child in range(coff[parent], coff[parent + 1]):
                nxt = trans[state, byte[child]]
                if nxt == dead:
                    continue
                if m == size:
                    return -1
                out_src[m], out_node[m], out_cur[m] = s, child, nxt
                total += eoff[child + 1] - eoff[child]
                m += 1
        lo = hi
    return -2 if total > max_tokens else m


@njit("i8(i4[:, ::1], i8[::1], u1[::1], i8[::1], i4[::1], i8[::1], i4[::1], i8, i4[::1], i8[::1], i4[::1])", cache=True, nogil=True)
def walk_levels(trans, coff, byte, eoff, src, node, cur, max_tokens, out_src, out_node, out_cur):
    """Every (src, trie node, DFA state) the walk down the trie reaches from the given ones, level
    by level (each level in its parents' order), written to the ``out_`` arrays: how many, or
    -1 when they are too short, or -2 once the tokens ending on the nodes reached pass
    ``max_tokens`` (the walk then stops)."""
    m = len(src)
    if m > len(out_src):
        return -1
    total = 0
    for i in range(m):
        out_src[i], out_node[i], out_cur[i] = src[i], node[i], cur[i]
        total += eoff[node[i] + 1] - eoff[node[i]]
    return _levels(trans, coff, byte, eoff, m, total, max_tokens, out_src, out_node, out_cur)


@njit("i8(u8[:, ::1], b1[::1], i2[::1], u8, u8, i4[::1], i4[::1])", cache=True, nogil=True)
def ascii_tokens(spelled, wide, length, outside_low, outside_high, ids, j):
    """The tokens whose bytes (as 128 bits, two words per row of ``spelled``; ``wide`` when a
    non-ASCII byte is among them) are all in an ASCII class, given the bits outside it: their ids
    and ``length``s written to ``ids`` and ``j`` (as long as the vocabulary: only the pages
    written are ever touched); how many."""
    m = 0
    for i in range(len(wide)):
        if not wide[i] and (spelled[i, 0] & outside_low) == 0 and (spelled[i, 1] & outside_high) == 0:
            ids[m] = i
            j[m] = length[i]
            m += 1
    return m


@njit("i8(u8[:, ::1], b1[::1], u1[::1], b1[::1], i8[::1], u8, u8, i4[::1], i4[::1])", cache=True, nogil=True)
def ascii_exits(above, wide, byte, banned, doff, outside_low, outside_high, exits, j):
    """The trie nodes where a token first leaves an ASCII class: the path to the parent (bits in
    ``above``, as ascii_tokens reads them) is inside and the node's own byte is ``banned``.
    Written to ``exits`` with the characters before the node in ``j``; how many."""
    m, depth = 0, 1
    for i in range(1, len(wide)):
        while i >= doff[depth + 1]:
            depth += 1
        if banned[byte[i]] and not wide[i] and (above[i, 0] & outside_low) == 0 and (above[i, 1] & outside_high) == 0:
            exits[m] = i
            j[m] = depth - 1
            m += 1
    return m


@njit("i8(i8[::1], u1[::1], i8[::1], i4[::1], b1[::1], i2[::1], i4[::1], i4[::1], i4[::1], i2[::1])", cache=True, nogil=True)
def ascii_walk(coff, byte, eoff, ids, allowed, cell, exits, exit_j, queue, depth):
    """The trie walked from the root through the nodes whose bytes are all ``allowed`` (an ASCII
    class): each token ending on such a node gets its length as its ``cell``; each child of one
    on a byte outside the class is an exit, written to ``exits`` (in node order) with the
    characters before it in ``exit_j``; how many exits. ``queue`` and ``depth`` are scratch as
    long as the trie (only the pages the walk writes are touched)."""
    queue[0], depth[0] = 0, 0
    head, tail, m = 0, 1, 0
    while head < tail:
        node, d = queue[head], depth[head]
        head += 1
        for pos in range(eoff[node], eoff[node + 1]):
            cell[ids[pos]] = d
        for child in range(coff[node], coff[node + 1]):
            if allowed[byte[child]]:
                queue[tail], depth[tail] = child, d + 1
                tail += 1
            else:
                exits[m], exit_j[m] = child, d
                m += 1
    return m


@njit("i8(i4[:, ::1], i8[:, ::1], i4[::1], i4[:, ::1])", cache=True, nogil=True)
def class_maps(trans, tree, starts, m):
    """Fill ``m``: per start state, the DFA state each class automaton state maps to, row i
    following the class's spanning ``tree`` (from, byte, to) from ``starts[i]`` (class state 0)."""
    dead = trans.shape[0] - 1
    for i in range(len(starts)):
        m[i, :] = dead
        m[i, 0] = starts[i]
        for t in range(tree.shape[0]):
            m[i, tree[t, 2]] = trans[m[i, tree[t, 0]], tree[t, 1]]
    return len(starts)


@njit("i8(i4[:, ::1], i4[:, ::1], i8[:, ::1], i4[::1], b1, b1[:, ::1])", cache=True, nogil=True)
def steps_alike(trans, m, edges, zero_to, twins, ok):
    """Fill ``ok``: per row of ``m`` (class_maps) and class edge (from, byte, to), whether the DFA
    steps from the row's ``from`` state on the byte to its live ``to`` state (``zero_to[i]`` for
    class state 0), or with ``twins`` to a state with the same row. outlines-core's DFA is not
    minimal: two paths through one character may end in twin states, which accept the same
    strings from there (finality is a row's END step), so for masks and bounds either stands for
    the other; a materialised automaton keeps the exact states."""
    dead = trans.shape[0] - 1
    last_got, last_want, last_same = -1, -1, False  # a run of edges (one byte range) asks one pair
    for i in range(m.shape[0]):
        for e in range(edges.shape[0]):
            ok[i, e] = False
            want = zero_to[i] if edges[e, 2] == 0 else m[i, edges[e, 2]]
            if want == dead:
                continue
            got = trans[m[i, edges[e, 0]], edges[e, 1]]
            if got == want:
                ok[i, e] = True
            elif twins and got != dead:
                if got != last_got or want != last_want:
                    last_got, last_want, last_same = got, want, True
                    for b in range(trans.shape[1]):
                        if trans[got, b] != trans[want, b]:
                            last_same = False
                            break
                ok[i, e] = last_same
    return m.shape[0]


@njit("i8(i4[:, ::1], i8[::1], u1[::1], i8[::1], i4[::1], i8, i8[::1], b1[::1], i4[::1], i8[::1], i4[::1], i4[::1],"
      " i4[::1], i4[::1], i4[::1], i8[::1])", cache=True, nogil=True)
def walk_row(trans, coff, byte, eoff, ids, state, nodes, boundary, src_buf, node_buf, cur_buf, tok, dst, hit_node,
             hit_state, counts):
    """One state's walk down the trie below ``nodes`` (their bytes read; the root for a whole row),
    walked as walk_levels walks, with the tokens ending on the way and, where ``boundary`` is not
    empty, the (node, state) pairs standing on a boundary state: tokens and their next states to
    ``tok``/``dst``, pairs to ``hit_node``/``hit_state``, their counts to ``counts``. Returns how
    many nodes were reached, -1 when the ``_buf`` arrays are too short, -3 when ``tok`` is (the
    count it needs is in ``counts[0]``)."""
    dead = trans.shape[0] - 1
    m = 0
    for j in range(len(nodes)):
        for child in range(coff[nodes[j]], coff[nodes[j] + 1]):
            nxt = trans[state, byte[child]]
            if nxt == dead:
                continue
            if m == len(node_buf):
                return -1
            src_buf[m], node_buf[m], cur_buf[m] = 0, child, nxt
            m += 1
    m = _levels(trans, coff, byte, eoff, m, 0, 1 << 62, src_buf, node_buf, cur_buf)
    if m < 0:
        return m
    k, h, room = 0, 0, len(tok)
    marks = len(boundary) > 0
    for i in range(m):
        node, at = node_buf[i], cur_buf[i]
        if marks and boundary[at]:
            hit_node[h], hit_state[h] = node, at
            h += 1
        for pos in range(eoff[node], eoff[node + 1]):
            if k < room:
                tok[k], dst[k] = ids[pos], at
            k += 1
    counts[0], counts[1] = k, h
    return -3 if k > room else m


@njit(cache=True, nogil=True)
def _on_table(trans, table, state, j, k, twins):
    """Whether the DFA's ``state`` is the table's cell (j, k), or with ``twins`` a state with its row."""
    want = table[j, k]
    if state == want:
        return True
    dead = trans.shape[0] - 1
    if not twins or state == dead or want == dead:
        return False
    for x in range(trans.shape[1]):
        if trans[state, x] != trans[want, x]:
            return False
    return True


@njit("i8(i4[:, ::1], i4[:, ::1], i4[:, ::1], i8[::1], u1[::1], i8[::1], i4[::1], i4[::1], i8, i4[::1], b1, b1[::1],"
      " u1[::1], i4[:, ::1], i4[::1], i4[::1], i4[::1], i4[::1], b1[::1], i8[::1])", cache=True, nogil=True)
def steer_walk(trans, ctrans, table, coff, byte, eoff, ids, parent, state, candidates, twins, boundary, path, queue,
               tok, dst, exit_node, exit_state, dead_first, counts):
    """Where the DFA from ``state`` leaves a chain block's ``table`` (``table[j, k]``: the state
    after j whole characters in class state k of ``ctrans``) and the trie nodes it stays off on:
    a ``candidates`` node whose parent is inside the class and on the table (its path read from
    the root, ``path`` is scratch as long as the trie is deep) but which is off it is walked
    down until the DFA is back on the table, below which the block is exact. The tokens ending
    on the nodes walked go to ``tok``/``dst`` with their states, every child outside the class
    to ``exit_node``/``exit_state`` with the state its byte leads to (dead included), the counts
    to ``counts``. Where the DFA dies, every token below is dead: a first byte it dies on is
    marked in ``dead_first`` (and not walked), deeper ones are walked on dead. Returns how many nodes were walked; -1 when ``queue`` (rows of node, state,
    k, j) or an output is too short, -3 when the DFA stands on a ``boundary`` state off the
    table (the block cannot stand for it there)."""
    dead = trans.shape[0] - 1
    c = ctrans.shape[0] - 1
    marks = len(boundary) > 0
    tail = 0
    for n in candidates:
        depth, up = 0, parent[n]
        while up != 0:
            path[depth] = byte[up]
            depth += 1
            up = parent[up]
        cur, k, j, inside = state, 0, 0, True
        for d in range(depth - 1, -1, -1):
            nk = ctrans[k, path[d]]
            if nk == c:
                inside = False
                break
            cur = trans[cur, path[d]]
            if nk == 0:
                j += 1
            k = nk
        if not inside or not _on_table(trans, table, cur, j, k, twins):
            continue  # below an exit, or walked from where its path left the table
        nk = ctrans[k, byte[n]]
        if nk == c:
            continue  # an exit from the table: the block's own
        nj = j + 1 if nk == 0 else j
        if nj >= table.shape[0]:
            return -3
        nxt = trans[cur, byte[n]]
        if _on_table(trans, table, nxt, nj, nk, twins):
            continue
        if tail == queue.shape[0]:
            return -1
        queue[tail, 0], queue[tail, 1], queue[tail, 2], queue[tail, 3] = n, nxt, nk, nj
        tail += 1
    head, k_out, h = 0, 0, 0
    while head < tail:
        node, cur, k, j = queue[head, 0], queue[head, 1], queue[head, 2], queue[head, 3]
        head += 1
        if cur == dead and parent[node] == 0:
            dead_first[byte[node]] = True
            continue
        if marks and cur != dead and boundary[cur]:
            return -3
        for pos in range(eoff[node], eoff[node + 1]):
            if k_out == len(tok):
                return -1
            tok[k_out], dst[k_out] = ids[pos], cur
            k_out += 1
        for child in range(coff[node], coff[node + 1]):
            b = byte[child]
            nxt, nk = trans[cur, b], ctrans[k, b]
            if nk == c:
                if h == len(exit_node):
                    return -1
                exit_node[h], exit_state[h] = child, nxt
                h += 1
                continue
            nj = j + 1 if nk == 0 else j
            if nj >= table.shape[0]:
                return -3
            if cur != dead and _on_table(trans, table, nxt, nj, nk, twins):
                continue
            if tail == queue.shape[0]:
                return -1
            queue[tail, 0], queue[tail, 1], queue[tail, 2], queue[tail, 3] = child, nxt, nk, nj
            tail += 1
    counts[0], counts[1] = k_out, h
    return tail


def _first_calls() -> None:
    """Call each kernel once on a one-state DFA: a kernel's first call in a process finishes
    loading it (~0.2-0.6 ms), which a process forked after this import then never pays."""
    trans = np.full((2, 256), 1, dtype=np.int32)
    one32, one64 = np.zeros(1, dtype=np.int32), np.zeros(1, dtype=np.int64)
    walk_levels(trans, np.array([1, 1], dtype=np.int64), np.zeros(1, dtype=np.uint8), np.zeros(2, dtype=np.int64),
                one32, one64, one32, 0, np.empty(1, dtype=np.int32), np.empty(1, dtype=np.int64),
                np.empty(1, dtype=np.int32))
    words, wide, doff = np.zeros((2, 2), dtype=np.uint64), np.ones(2, dtype=bool), np.array([0, 1, 2], dtype=np.int64)
    ascii_tokens(words, wide, np.zeros(2, dtype=np.int16), np.uint64(1), np.uint64(1), np.empty(2, dtype=np.int32), np.empty(2, dtype=np.int32))
    ascii_exits(words, wide, np.zeros(2, dtype=np.uint8), np.zeros(256, dtype=bool), doff, np.uint64(1), np.uint64(1),
                np.empty(2, dtype=np.int32), np.empty(2, dtype=np.int32))
    ascii_walk(np.array([1, 1], dtype=np.int64), np.zeros(1, dtype=np.uint8), np.zeros(2, dtype=np.int64), one32,
               np.zeros(256, dtype=bool), np.zeros(1, dtype=np.int16), np.empty(1, dtype=np.int32), np.empty(1, dtype=np.int32),
               np.empty(1, dtype=np.int32), np.empty(1, dtype=np.int16))
    m = np.empty((1, 1), dtype=np.int32)
    class_maps(trans, np.zeros((0, 3), dtype=np.int64), one32, m)
    steps_alike(trans, m, np.zeros((1, 3), dtype=np.int64), one32, True, np.empty((1, 1), dtype=bool))
    walk_row(trans, np.array([1, 1], dtype=np.int64), np.zeros(1, dtype=np.uint8), np.zeros(2, dtype=np.int64), one32, 0,
             one64, np.zeros(0, dtype=bool), np.empty(1, dtype=np.int32), np.empty(1, dtype=np.int64), np.empty(1, dtype=np.int32),
             np.empty(1, dtype=np.int32), np.empty(1, dtype=np.int32), np.empty(1, dtype=np.int32),
             np.empty(1, dtype=np.int32), np.empty(2, dtype=np.int64))
    steer_walk(trans, trans, m, np.array([1, 1], dtype=np.int64), np.zeros(1, dtype=np.uint8), np.zeros(2, dtype=np.int64),
               one32, one32, 0, one32, True, np.zeros(0, dtype=bool), np.empty(1, dtype=np.uint8),
               np.empty((1, 4), dtype=np.int32), one32.copy(), one32.copy(), one32.copy(), one32.copy(),
               np.zeros(256, dtype=bool), np.empty(2, dtype=np.int64))


_first_calls()
