"""The loops numpy cannot vectorise without a call per step, compiled by numba.

A trie walk from one state is tens of levels of a handful of nodes each; as numpy calls, each
level costs its calls' fixed overhead (a few us each), which was most of a first mask's time.
Signatures are explicit so each kernel compiles once, when this module is imported (from numba's
on-disk cache after the first time), never at a first call inside a request or a forked child.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit("Tuple((i4[:], i8[:], i4[:], i8))(i4[:, :], i8[:], u1[:], i8[:], i4[:], i8[:], i4[:], i8)",
      cache=True, nogil=True)
def walk_levels(trans, coff, byte, eoff, src, node, cur, max_tokens):
    """Every (src, trie node, DFA state) the walk down the trie reaches from the given ones, level
    by level in the order numpy's walk visited them, and how many tokens end on those nodes; the
    count stops the walk once it passes ``max_tokens`` (the arrays are then incomplete)."""
    dead = trans.shape[0] - 1
    size = max(64, 4 * len(src))
    out_src = np.empty(size, np.int32)
    out_node = np.empty(size, np.int64)
    out_cur = np.empty(size, np.int32)
    m = len(src)
    out_src[:m] = src
    out_node[:m] = node
    out_cur[:m] = cur
    total = 0
    for i in range(m):
        total += eoff[node[i] + 1] - eoff[node[i]]
    lo = 0
    while lo < m and total <= max_tokens:
        hi = m
        for i in range(lo, hi):
            parent, state, s = out_node[i], out_cur[i], out_src[i]
            for child in range(coff[parent], coff[parent + 1]):
                nxt = trans[state, byte[child]]
                if nxt == dead:
                    continue
                if m == size:
                    size *= 2
                    grown_src = np.empty(size, np.int32)
                    grown_src[:m] = out_src[:m]
                    out_src = grown_src
                    grown_node = np.empty(size, np.int64)
                    grown_node[:m] = out_node[:m]
                    out_node = grown_node
                    grown_cur = np.empty(size, np.int32)
                    grown_cur[:m] = out_cur[:m]
                    out_cur = grown_cur
                out_src[m] = s
                out_node[m] = child
                out_cur[m] = nxt
                total += eoff[child + 1] - eoff[child]
                m += 1
        lo = hi
    return out_src[:m], out_node[:m], out_cur[:m], total


@njit("i8[:](u8[:, :], b1[:], u8, u8)", cache=True, nogil=True)
def ascii_inside(words, wide, outside_low, outside_high):
    """The positions whose bytes (as 128 bits in ``words``' two rows, ``wide`` when a non-ASCII
    byte is among them) are all in an ASCII class, given the bits outside it. Counted first, so
    the one array written is the answer (a vocabulary-wide scratch array would be fresh pages,
    each a page fault, in a forked child)."""
    m = 0
    for i in range(len(wide)):
        if not wide[i] and (words[0, i] & outside_low) == 0 and (words[1, i] & outside_high) == 0:
            m += 1
    out = np.empty(m, np.int64)
    m = 0
    for i in range(len(wide)):
        if not wide[i] and (words[0, i] & outside_low) == 0 and (words[1, i] & outside_high) == 0:
            out[m] = i
            m += 1
    return out
