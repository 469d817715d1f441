"""The index builder: a byte DFA and a vocabulary -> the token automaton.

We walk the vocabulary's byte trie through the DFA from every state at once, level by level,
dropping dead branches early, which gives every (state, token, next state) without visiting the
whole vocabulary per state. States that loop on a wide character class (free text, JSON string
characters, raw strings, patterns like ``[a-z0-9_]*``) take all tokens made of such characters
in one precomputed block (see _Run). The result is the same automaton as outlines-core's own
``Index`` over the full vocabulary, many times faster.
"""

from __future__ import annotations

import hashlib
import re
import threading
import weakref
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from ..caches import Cache
from ..errors import CompileError
from ..symbols import FORGE_BYTE, SPECIAL_CLASS
from ..vocabulary import Vocab
from .automaton import FEW_BANNED, UNREACHABLE, Automaton, bfs, ranges, sorted_unique, state_graph
from .byte_dfa import byte_dfa
from .kernels import ascii_exits, ascii_tokens, ascii_walk, class_maps, steer_walk, steps_alike, walk_levels, walk_row

DEFAULT_MAX_EDGES = 64_000_000  # token transitions per automaton (about 12 bytes each while building)
NO_EDGE_LIMIT = 1 << 62  # max_edges of a walk that is never bounded (one state's row, a bound's table)
MIN_RUN_BYTES = 16  # a state looping on fewer ASCII bytes is walked token by token
# by vocabulary fingerprint; a family's tool vocabularies (other end tokens) have tries of their own
TRIES = Cache("vocabulary tries", 512 << 20, lambda t: t.nbytes, per_vocabulary=True)
RUNS = Cache("character-class runs", 256, per_vocabulary=True)  # by (vocabulary fingerprint, character class)
# by the shape of one state's row: the classes to try (kept with the vocabulary's tables: a shape's
# classes hold for every request, and the vocabulary's trie classifies the commonest one)
ROW_CLASSES = Cache("row classes", 1 << 14, per_vocabulary=True)
# by (id(trans), id(run), state, twins): a chain's maps as its previous state left them (_chain_maps)
CHAINS = Cache("chain maps", 1 << 12)
# a state whose class is a JSON string's but for up to this many more ASCII bytes (a key steering
# around declared names: its trie's letters; a key that must end in a digit) takes the string's
# run, steered around those bytes (_steer), rather than a run of its own class (20 ms over the
# whole trie)
MAX_SKIPPED_FIRST = 24
# an ASCII class of at most this many bytes has its run walked in the trie (see _ascii_run)
WALKED_CLASS_BYTES = 24
# a run of fewer than a 4th of the row's tokens sets its allowed ones (Block.bits) rather than
# looking every token id up in its cells
SPARSE_RUN = 4
# by (id(run), width, the cells allowed): a class's allowed tokens as bools (Block.bits), with the run
CLASS_BITS = Cache("class token bits", 64 << 20, lambda v: v[1].nbytes)
TRIE_LOCK = threading.Lock()  # one trie build at a time (it takes seconds and much memory)


@dataclass(frozen=True)
class _Trie:
    """The vocabulary's token strings as a byte trie (node 0 is the root).

    Nodes ``coff[n]`` to ``coff[n+1]-1`` are node n's children (breadth-first numbering by parent
    puts them together), ``byte[c]`` the byte leading to child c,
    ``ids[eoff[n]:eoff[n+1]]`` the token ids whose bytes end exactly at node n.
    Nodes are numbered breadth first: ``doff[d]:doff[d+1]`` are the nodes d bytes deep.
    ``node_of_id[i]`` is the node token i ends at (the node count when i has no text).
    ``first[n]`` is the first byte on the path to node n (256 for the root and for "no node").
    ``above[n]`` holds the ASCII bytes on the path to node n's parent as 128 bits (two words),
    ``above_wide[n]`` whether a non-ASCII byte is among them; ``spelled[i]`` and
    ``spelled_wide[i]`` the same of token i's bytes (wide when it has none): a wide ASCII class's
    tokens and exits are read from them (``_read_run``) without walking the trie.
    ``length[i]`` is token i's length in bytes. ``by_byte[at[b]:at[b+1]]`` are the nodes whose own
    byte is b (where a steered chain may leave its table, see _steer).
    """

    coff: np.ndarray
    byte: np.ndarray
    ids: np.ndarray
    eoff: np.ndarray
    parent: np.ndarray
    doff: np.ndarray
    node_of_id: np.ndarray
    first: np.ndarray
    above: np.ndarray
    above_wide: np.ndarray
    spelled: np.ndarray
    spelled_wide: np.ndarray
    length: np.ndarray
    by_byte: np.ndarray
    at: np.ndarray
    key: str  # the vocabulary's fingerprint

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.coff, self.byte, self.ids, self.eoff, self.parent, self.doff, self.node_of_id,
                                      self.first, self.above, self.above_wide, self.spelled, self.spelled_wide,
                                      self.length, self.by_byte, self.at))


def vocabulary_trie(vocab: Vocab) -> _Trie:
    """The vocabulary's byte trie, built once per vocabulary."""
    with TRIE_LOCK:
        got = TRIES.get(vocab.fingerprint)
        if got is not None:
            return got
        node_of = {b"": 0}
        parent, byte, depth, ends = [0], [0], [0], []
        for text, ids in vocab.outlines_map.items():
            for d in range(1, len(text) + 1):
                prefix = text[:d]
                if prefix not in node_of:
                    node_of[prefix] = len(parent)
                    parent.append(node_of[text[:d - 1]])
                    byte.append(text[d - 1])
                    depth.append(d)
            node = node_of[text]
            ends += [(node, i) for i in ids]
        # number the nodes breadth first (by depth, then parent, then byte): a depth is one range
        parent, byte, depth = np.asarray(parent), np.asarray(byte, dtype=np.uint8), np.asarray(depth)
        n = len(parent)
        by_depth = np.argsort(depth, kind="stable")
        doff = np.concatenate([[0], np.cumsum(np.bincount(depth))])
        new = np.zeros(n, dtype=np.int64)
        for d in range(1, len(doff) - 1):
            level = by_depth[doff[d]:doff[d + 1]]
            level = level[np.argsort(new[parent[level]] * 256 + byte[level], kind="stable")]
            new[level] = np.arange(doff[d], doff[d + 1])
        old = np.argsort(new)
        parent = new[parent[old]].astype(np.int32)
        end = np.asarray(ends, dtype=np.int64).reshape(-1, 2)
        end[:, 0] = new[end[:, 0]]
        order = np.argsort(end[:, 0], kind="stable")
        node_of_id = np.full(int(end[:, 1].max(initial=-1)) + 1, n, dtype=np.int32)  # n: no node
        node_of_id[end[:, 1]] = end[:, 0]
        byte = byte[old]
        first = np.full(n + 1, 256, dtype=np.int16)  # and one for "no node"
        for d in range(1, len(doff) - 1):  # a level's first bytes from the level above
            lo, hi = doff[d], doff[d + 1]
            first[lo:hi] = byte[lo:hi] if d == 1 else first[parent[lo:hi]]
        path, wide = _path_bytes(parent, byte, doff)
        got = _Trie(coff=np.concatenate([[1], 1 + np.cumsum(np.bincount(parent[1:], minlength=n))]),
                    byte=byte, ids=end[order, 1].astype(np.int32),
                    eoff=np.concatenate([[0], np.cumsum(np.bincount(end[:, 0], minlength=n))]),
                    parent=parent, doff=doff, node_of_id=node_of_id, first=first,
                    above=np.ascontiguousarray(path[:, parent].T), above_wide=wide[parent],
                    spelled=np.ascontiguousarray(path[:, node_of_id].T), spelled_wide=wide[node_of_id],
                    length=np.append(np.searchsorted(doff, np.arange(n), side="right") - 1, 0)[node_of_id].astype(np.int16),
                    by_byte=np.argsort(byte[1:], kind="stable").astype(np.int32) + 1,
                    at=np.concatenate([[0], np.cumsum(np.bincount(byte[1:], minlength=256))]).astype(np.int64),
                    key=vocab.fingerprint)
        for char_class in COMMON_CLASSES:
            run = _run_for(got, char_class)
            # built now: a string state's mask is these less a few
            _ = run.outside, run.by_first, run.cell_counts, run.by_cell, run.in_class
        _classify_common_rows()
        return TRIES.put(vocab.fingerprint, got)


def warm_runs(vocab: Vocab, classes: tuple[bytes, ...]) -> None:
    """Build the runs of these ASCII classes (each given as its bytes) for ``vocab`` now, once:
    classes that many grammars' states take (the built-in string formats'), whose first mask
    would otherwise build them."""
    trie = vocabulary_trie(vocab)
    RUNS.get_or_build((trie.key, classes), lambda: [
        _run_for(trie, f"[{_hex(np.unique(np.frombuffer(b, dtype=np.uint8)))}]") for b in classes])


def _classify_common_rows() -> None:
    """Classify the row of a JSON string's characters (loop on them, a quote and a backslash each
    leading on) once, with the vocabulary: a row's classes follow from its shape alone, and a
    string's state is in nearly every grammar, so its first mask need not classify it again."""
    trans, _ = byte_dfa(f'"(?:{COMMON_CLASSES[0]}|\\\\.)*"')
    inside = int(trans[0, 0x22])
    _classes_of(_run_classes, trans, np.array([inside], dtype=np.int32))


def _path_bytes(parent: np.ndarray, byte: np.ndarray, doff: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per node, the ASCII bytes on the path to it as 128 bits ((2, n+1) words) and whether a
    non-ASCII byte is on it; the extra column (for "no node") is wide."""
    n = len(parent)
    path = np.zeros((2, n + 1), dtype=np.uint64)
    wide = np.zeros(n + 1, dtype=bool)
    wide[n] = True
    bit = np.uint64(1) << (byte.astype(np.uint64) & np.uint64(63))
    for d in range(1, len(doff) - 1):  # a level's bytes from the level above
        lo, hi = doff[d], doff[d + 1]
        up, b = parent[lo:hi], byte[lo:hi]
        path[0, lo:hi] = path[0, up] | np.where(b < 64, bit[lo:hi], np.uint64(0))
        path[1, lo:hi] = path[1, up] | np.where((b >= 64) & (b < 128), bit[lo:hi], np.uint64(0))
        wide[lo:hi] = wide[up] | (b >= 128)
    return path, wide


def tokens_extending(vocab: Vocab, prefix: bytes) -> np.ndarray:
    """The ids of the tokens (symbols included) whose bytes start with ``prefix`` and run on past
    it: the trie's subtree below ``prefix``, level by level."""
    trie = vocabulary_trie(vocab)
    node = 0
    for b in prefix:
        lo, hi = int(trie.coff[node]), int(trie.coff[node + 1])
        k = lo + int(np.searchsorted(trie.byte[lo:hi], b))  # a node's children are in byte order
        if k >= hi or trie.byte[k] != b:
            return np.zeros(0, dtype=np.int32)
        node = k
    found, frontier = [], np.array([node])
    while len(frontier):
        _, frontier = ranges(frontier, trie.coff)
        found.append(trie.ids[ranges(frontier, trie.eoff)[1]])
    return np.concatenate(found) if found else np.zeros(0, dtype=np.int32)


@dataclass(frozen=True)
class _Run:
    """A character class's byte automaton laid over the trie.

    A state that loops on the class (the inside of a JSON string, free text) moves along any
    token made of class characters exactly as the class automaton does. Such tokens (``ids``,
    ending in class state ``k`` after ``j`` whole characters) are taken in one step; the walk
    starts only at ``exits``, the trie nodes where a token first leaves the class (``exit_k`` and
    ``exit_j`` as before that byte). A state that counts class characters (a bounded string)
    moves the same way along a chain of states, one per character.

    A run less the tokens beginning with some bytes (``skip_first``) shares its whole run's token
    arrays and names the tokens it leaves out in ``dropped``; its ``present`` and exits are its own.
    A ``steered`` run, one state's, leaves out only the tokens whose bytes leave that state's
    chain (see _steer).
    """

    trans: np.ndarray  # (c+1, 256): the class automaton, c is dead, state 0 is between characters
    edges: np.ndarray  # (e, 3): its live edges (from, byte, to)
    tree: np.ndarray  # (c-1, 3): edges reaching every class state from state 0, in order
    ids: np.ndarray
    k: np.ndarray
    j: np.ndarray
    exits: np.ndarray
    exit_k: np.ndarray
    exit_j: np.ndarray
    one_byte: int  # a character of the class that is one byte long
    cell: np.ndarray  # each token's (j, k) as a flat index into a (rows, class states) table
    exit_cell: np.ndarray  # the same for the exits
    exit_byte: np.ndarray  # each exit's byte (the one that leaves the class)
    present: np.ndarray  # (rows, class states) bools: the cells some token ends in
    token_cell: np.ndarray  # per token id, its cell; the cell count for a token not of the class
    first: np.ndarray  # each token's first byte
    # ASCII bytes that begin no token of this run (a chain's first state steps elsewhere on them)
    skip_first: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    dropped: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int32))  # ids left out
    steered: bool = False
    # the class's whole run, for a run derived from it: their token arrays are the same, so are
    # the tables below (each a pass over the vocabulary, not made again per derived run)
    whole: "_Run | None" = None

    @property
    def count(self) -> int:
        """How many tokens the run holds."""
        return len(self.ids) - len(self.dropped)

    @cached_property
    def cell_counts(self) -> np.ndarray:
        """How many of the run's tokens end in each cell (flat), those it drops included."""
        if self.whole is not None:
            return self.whole.cell_counts
        return np.bincount(self.cell, minlength=self.present.size)

    @cached_property
    def by_cell(self) -> tuple[np.ndarray, np.ndarray]:
        """The run's token ids ordered by cell, and where each cell's begin (cells + 1 offsets):
        the tokens of a few cells, by slices. Built with the vocabulary for the common classes
        only (~1 ms, ten lookups of every token id in its cells): see ``indexed``."""
        if self.whole is not None:
            return self.whole.by_cell
        cell = self.cell.astype(np.int16) if self.present.size < 1 << 15 else self.cell  # a radix sort
        order = np.argsort(cell, kind="stable")
        return self.ids[order], np.searchsorted(self.cell[order], np.arange(self.present.size + 1))

    @property
    def indexed(self) -> bool:
        """Whether ``by_cell`` is built (for this run's whole run)."""
        return "by_cell" in (self.whole or self).__dict__

    @cached_property
    def in_class(self) -> np.ndarray:
        """Per token id, whether it is of the class (those the run drops included)."""
        if self.whole is not None:
            return self.whole.in_class
        return self.token_cell < self.present.size

    @cached_property
    def by_first(self) -> tuple[np.ndarray, np.ndarray]:
        """The run's token positions ordered by first byte, and where each byte's begin (257+1
        offsets, 256 for the root): the tokens a run less some first bytes drops, by slices."""
        order = np.argsort(self.first, kind="stable").astype(np.int32)
        return order, np.searchsorted(self.first[order], np.arange(258))

    @cached_property
    def outside(self) -> np.ndarray:
        """The token ids of the vocabulary that are not of the class, sorted (int32)."""
        if self.whole is not None:
            return self.whole.outside
        return np.flatnonzero(self.token_cell == self.present.size).astype(np.int32)


def _run(trie: "_Trie", char_class: str) -> _Run:
    plain = _plain_ascii(char_class)
    if plain is not None:  # no regex to compile (~1 ms)
        return _ascii_run(trie, plain)
    trans, _ = byte_dfa(f"(?:{char_class})*")
    c = trans.shape[0] - 1
    src, byte = np.nonzero(trans[:c] != c)
    dst = trans[src, byte]
    # keep the states on a loop through state 0 (leaving out the END symbol's path)
    live = (bfs(src, dst, np.array([0]), c) < UNREACHABLE) & (bfs(dst, src, np.array([0]), c) < UNREACHABLE)
    ok = live[src] & live[dst]
    edges = np.stack([src[ok], byte[ok], dst[ok]], axis=1)
    trans = np.full_like(trans, c)
    trans[edges[:, 0], edges[:, 1]] = edges[:, 2]
    tree, seen, frontier = [], {0}, [0]
    while frontier:
        nxt = []
        for a, b, d in edges[np.isin(edges[:, 0], frontier)].tolist():
            if d not in seen:
                seen.add(d)
                tree.append((a, b, d))
                nxt.append(d)
        frontier = nxt
    tree = np.asarray(tree, dtype=np.int64).reshape(-1, 3)
    # the trie walked down from the root, one level at a time, through the nodes still inside the
    # class (a narrow class's few; much of a level, all of it): each level's arrays are its own, as
    # arrays over every trie node faulted in ~1,700 fresh pages (~4 ms) in a new process
    flat = trans.reshape(-1)
    kd = np.int16 if c < 1 << 15 else np.int32
    inside, in_k, in_j = [np.zeros(1, dtype=np.int32)], [np.zeros(1, dtype=kd)], [np.zeros(1, dtype=np.int16)]
    out, out_k, out_j = [], [], []
    nodes, nk, nj = inside[0], in_k[0], in_j[0]
    level = None  # (the level's k, j) over all of it, when it was walked whole
    for depth in range(1, len(trie.doff) - 1):
        if not len(nodes):
            break
        lo, hi = int(trie.doff[depth]), int(trie.doff[depth + 1])
        if len(nodes) * 16 < hi - lo:  # a few nodes inside: their children's ranges
            owner, child = ranges(nodes, trie.coff)
            up_k, up_j = nk[owner], nj[owner]
        else:  # much of the level above inside: all of this level, below a node outside the dead row
            up_lo = int(trie.doff[depth - 1])
            if level is None:
                level = np.full(lo - up_lo, c, dtype=kd), np.zeros(lo - up_lo, dtype=np.int16)
                level[0][nodes - up_lo], level[1][nodes - up_lo] = nk, nj
            child = np.arange(lo, hi, dtype=np.int32)
            up = trie.parent[lo:hi] - up_lo
            up_k, up_j = level[0][up], level[1][up]
        step = flat[up_k.astype(np.int64) * 256 + trie.byte[child]].astype(kd)
        kept = step != c
        left = ~kept & (up_k != c)  # an exit: its byte first leaves the class; nothing below it is inside
        out.append(child[left]), out_k.append(up_k[left]), out_j.append(up_j[left])
        step_j = up_j + (step == 0)
        nodes, nk, nj = child[kept], step[kept], step_j[kept]
        level = (step, step_j) if len(child) == hi - lo else None  # children come in node order
        inside.append(nodes), in_k.append(nk), in_j.append(nj)
    inside, in_k, in_j = np.concatenate(inside), np.concatenate(in_k), np.concatenate(in_j)
    exits = np.concatenate(out).astype(np.int32) if out else np.zeros(0, dtype=np.int32)
    exit_k = np.concatenate(out_k).astype(np.int32) if out else np.zeros(0, dtype=np.int32)
    exit_j = np.concatenate(out_j).astype(np.int32) if out else np.zeros(0, dtype=np.int32)
    # the tokens ending inside (each inside node's trie.ids[eoff[n]:eoff[n+1]]) put in id order by
    # their cells, one per token id, not by sorting the ids
    owner, at = ranges(inside, trie.eoff)
    k, j = in_k[owner].astype(np.int32), in_j[owner].astype(np.int32)
    present = np.zeros((int(max(j.max(initial=0), exit_j.max(initial=0))) + 1, c), dtype=bool)
    present[j, k] = True
    token_cell = _token_cells(trie, present.size, trie.ids[at], j * c + k)
    ids = np.flatnonzero(token_cell != present.size).astype(np.int32)
    k, j = np.divmod(token_cell[ids].astype(np.int32), c)[::-1]
    end = trie.node_of_id[ids]
    one_byte = np.flatnonzero(trans[0, :128] == 0)
    return _Run(trans, edges, tree, ids, k, j, exits, exit_k, exit_j,
                int(one_byte[0]) if len(one_byte) else -1, j * c + k, exit_j * c + exit_k, trie.byte[exits], present,
                token_cell, trie.first[end])


def _token_cells(trie: _Trie, size: int, ids: np.ndarray, cells: np.ndarray) -> np.ndarray:
    """Each token id's cell in a run's (rows, class states) table: ``cells`` for ``ids``, ``size``
    (no cell) for every other token; int16 where the table allows."""
    out = np.full(len(trie.node_of_id), size, dtype=np.int16 if size < 1 << 15 else np.int32)
    out[ids] = cells
    return out


def _ascii_run(trie: _Trie, class_bytes: np.ndarray) -> _Run:
    """``_run`` of a class of ASCII bytes (its automaton one state looping on them): a token is
    inside when all its bytes are in the class, k is 0 and j its length; an exit is a node
    outside whose parent is inside. A narrow class's few nodes are walked in the trie; a wide
    one's are read from the trie's path bytes, one pass over the tokens and one over the nodes
    (walking them costs 2-4x more once the class holds more than a few dozen bytes)."""
    trans = np.ones((2, 256), dtype=np.int32)
    trans[0, class_bytes] = 0
    edges = np.stack([np.zeros_like(class_bytes), class_bytes, np.zeros_like(class_bytes)], axis=1).astype(np.int64)
    allowed = trans[0] == 0
    ids, j, exits, exit_j, present, token_cell = \
        (_walked_run if len(class_bytes) <= WALKED_CLASS_BYTES else _read_run)(trie, allowed)
    return _Run(trans, edges, np.zeros((0, 3), dtype=np.int64), ids, np.zeros(len(ids), dtype=np.int32), j, exits,
                np.zeros(len(exits), dtype=np.int32), exit_j, int(class_bytes[0]) if len(class_bytes) else -1, j, exit_j,
                trie.byte[exits], present, token_cell, trie.first[trie.node_of_id[ids]])


def _ascii_present(j: np.ndarray, exit_j: np.ndarray) -> np.ndarray:
    """An ASCII run's (rows, 1) cells some token ends in, from its tokens' and exits' lengths."""
    present = np.zeros((int(max(j.max(initial=0), exit_j.max(initial=0))) + 1, 1), dtype=bool)
    present[j, 0] = True
    return present


def _walked_run(trie: _Trie, allowed: np.ndarray) -> tuple:
    """(ids, j, exits, exit_j, present, token cells) of an ASCII class, walked."""
    n = len(trie.byte)
    token_cell = np.full(len(trie.node_of_id), -1, dtype=np.int16)  # -1 until the table's size is known
    exits, exit_j = np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int32)
    m = ascii_walk(trie.coff, trie.byte, trie.eoff, trie.ids, allowed, token_cell, exits, exit_j,
                   np.empty(n, dtype=np.int32), np.empty(n, dtype=np.int16))
    ids = np.flatnonzero(token_cell >= 0).astype(np.int32)
    j, exits, exit_j = token_cell[ids].astype(np.int32), exits[:m].copy(), exit_j[:m].copy()
    present = _ascii_present(j, exit_j)
    token_cell[token_cell < 0] = present.size
    return ids, j, exits, exit_j, present, token_cell


def _read_run(trie: _Trie, allowed: np.ndarray) -> tuple:
    """(ids, j, exits, exit_j, present, token cells) of an ASCII class, read from the trie's path bytes."""
    bits = np.zeros(2, dtype=np.uint64)
    for b in np.flatnonzero(allowed[:128]).tolist():
        bits[b >> 6] |= np.uint64(1) << np.uint64(b & 63)
    low, high = ~bits
    # one pass each into arrays as long as the trie's (their unwritten pages never touched), then
    # copies of what was written
    ids, j = np.empty(len(trie.spelled_wide), dtype=np.int32), np.empty(len(trie.spelled_wide), dtype=np.int32)
    m = ascii_tokens(trie.spelled, trie.spelled_wide, trie.length, low, high, ids, j)
    ids, j = ids[:m].copy(), j[:m].copy()
    exits, exit_j = np.empty(len(trie.byte), dtype=np.int32), np.empty(len(trie.byte), dtype=np.int32)
    m = ascii_exits(trie.above, trie.above_wide, trie.byte, ~allowed, trie.doff, low, high, exits, exit_j)
    exits, exit_j = exits[:m].copy(), exit_j[:m].copy()
    present = _ascii_present(j, exit_j)
    return ids, j, exits, exit_j, present, _token_cells(trie, present.size, ids, j)


def _plain_ascii(char_class: str) -> np.ndarray | None:
    """The bytes of a class written as _hex writes ASCII bytes (``[\\x41\\x42]``), or None."""
    found = _PLAIN_ASCII.fullmatch(char_class)
    if found is None:
        return None
    return np.unique([int(h, 16) for h in found.group(1).split("\\x")[1:]]).astype(np.int64)


_PLAIN_ASCII = re.compile(r"\[((?:\\x[0-7][0-9A-F])+)\]")


@dataclass(frozen=True)
class Block:
    """A state's tokens made of one character class, by reference rather than listed: the class
    token ending after j whole characters in class state k leads to ``table[j, k]`` (every row
    alike for a state looping on the class; one row per character counted for a chain)."""

    run: _Run
    table: np.ndarray  # (rows, class states) int32; the DFA's dead state where a token dies
    dead: int

    @property
    def nbytes(self) -> int:
        return self.table.nbytes

    @property
    def live(self) -> np.ndarray:
        """The (rows, class states) cells whose tokens lead somewhere."""
        return (self.table != self.dead) & self.run.present

    @property
    def full(self) -> bool:
        """Every class token is allowed (a loop, or a chain longer than the longest token)."""
        return bool((self.live == self.run.present).all())

    def tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """The allowed class tokens and the state each leads to."""
        to = self.table.reshape(-1)[self.run.cell]
        if self.full and not len(self.run.dropped):
            return self.run.ids, to
        ok = to != self.dead
        if len(self.run.dropped):
            ok &= ~np.isin(self.run.ids, self.run.dropped)
        return self.run.ids[ok], to[ok]

    def target_bounds(self, bound: np.ndarray) -> np.ndarray:
        """``bound`` of every state a class token leads to (one value per cell, not per token)."""
        return bound[self.table[self.live]]

    def bits(self, width: int) -> np.ndarray:
        """The allowed class tokens below ``width`` as bools, a fresh array, never a list: a full
        block's are every token of the class; any other's are, where few, those less the tokens
        of its dead cells or its live cells' tokens (a run indexed by cell), else one lookup per
        token id in its cells, shared by blocks allowing the same cells of one class (the entry
        holds its run, so the run's id in the key stays its own)."""
        if self.full:
            return self._less_dropped(_fitted(self.run.in_class, width))
        key = (id(self.run), width, np.packbits(self.live).tobytes())
        found = CLASS_BITS.get(key)
        if found is None:
            found = CLASS_BITS.put(key, (self.run, self._less_dropped(self._bits(width))))
        return found[1].copy()

    def banned(self, width: int) -> np.ndarray | None:
        """The token ids below ``width`` the block leaves out (sorted int32), when they are under a
        16th of the row (a string's characters, all of them or all but the longest tokens: its
        mask is those less the state's other tokens, with no pass over the row); else None. A
        run less some first bytes has none but a steered one's."""
        if len(self.run.dropped) and not self.run.steered:
            return None
        dead = self._dead_cells()
        if len(dead) and not self.run.indexed:
            return None
        out, dropped = self.run.outside, self.run.dropped
        known = len(self.run.token_cell)  # ids past the vocabulary's are of no class
        if (len(out) + len(dropped) + self._count(dead) + max(0, width - known)) * FEW_BANNED >= width:
            return None
        more = np.concatenate([dropped, self._cell_ids(dead)]) if len(dead) else dropped
        if len(more):  # none of them outside the class
            more = sorted_unique(more).astype(np.int32)
            out = np.insert(out, np.searchsorted(out, more), more)
        if known < width:
            return np.concatenate([out, np.arange(known, width, dtype=np.int32)])
        return out[:np.searchsorted(out, width)]

    def _dead_cells(self) -> np.ndarray:
        """The cells some class token ends in that lead nowhere (flat indices)."""
        return np.flatnonzero(self.run.present.reshape(-1) & (self.table.reshape(-1) == self.dead))

    def _count(self, cells: np.ndarray) -> int:
        """How many class tokens end in ``cells``."""
        return int(self.run.cell_counts[cells].sum())

    def _cell_ids(self, cells: np.ndarray) -> np.ndarray:
        """The class tokens ending in ``cells`` (unsorted)."""
        ids, offsets = self.run.by_cell
        return ids[ranges(cells, offsets)[1]]

    def _bits(self, width: int) -> np.ndarray:
        run = self.run
        if run.indexed:
            live, dead = np.flatnonzero(self.live), self._dead_cells()
            n_live, n_dead = self._count(live), self._count(dead)
            if min(n_live, n_dead) * FEW_BANNED < width:
                few_live = n_live <= n_dead
                out = np.zeros(width, dtype=bool) if few_live else _fitted(run.in_class, width)
                ids = self._cell_ids(live if few_live else dead)
                out[ids[ids < width]] = few_live
                return out
        if len(run.ids) * SPARSE_RUN < width:  # a narrow class (hex digits): set its few tokens
            out = np.zeros(width, dtype=bool)
            ids = run.ids[self.live.reshape(-1)[run.cell]]
            out[ids[ids < width]] = True
            return out
        out = np.take(np.append(self.live.reshape(-1), False), run.token_cell[:width])  # fresh
        return out if len(out) == width else _fitted(out, width)

    def _less_dropped(self, out: np.ndarray) -> np.ndarray:
        dropped = self.run.dropped
        out[dropped[dropped < len(out)]] = False
        return out


def _fitted(bools: np.ndarray, width: int) -> np.ndarray:
    """A fresh copy of ``bools`` cut or padded (False) to ``width``."""
    out = np.zeros(width, dtype=bool)
    m = min(width, len(bools))
    out[:m] = bools[:m]
    return out


def _run_for(trie: _Trie, char_class: str, skip_first: bytes = b"") -> _Run:
    """The class's run, or with ``skip_first`` the same run less the tokens beginning with those
    bytes (derived from the whole class's run, not built over the trie again)."""
    if skip_first:
        return RUNS.get_or_build((trie.key, char_class, skip_first),
                                 lambda: _skipping(_run_for(trie, char_class), trie, skip_first))
    return RUNS.get_or_build((trie.key, char_class), lambda: _run(trie, char_class))


def _skipping(run: _Run, trie: _Trie, skip_first: bytes) -> _Run:
    # the whole run's token arrays are shared, not copied less the dropped tokens: copies of
    # arrays as long as the vocabulary cost ~3 ms in a fresh process (their pages), on the path
    # of a state's first mask
    skip = np.frombuffer(skip_first, dtype=np.uint8).astype(np.int64)
    skipped = np.zeros(257, dtype=bool)  # by first byte; 256 for the root
    skipped[skip] = True
    order, at = run.by_first
    drop = np.sort(np.concatenate([order[at[b]:at[b + 1]] for b in skip.tolist()]))
    counts = run.cell_counts - np.bincount(run.cell[drop], minlength=run.present.size)
    present = (counts > 0).reshape(run.present.shape)
    out = ~skipped[trie.first[run.exits]]
    one_byte = np.flatnonzero((run.trans[0, :128] == 0) & ~skipped[:128])
    return _Run(run.trans, run.edges, run.tree, run.ids, run.k, run.j, run.exits[out], run.exit_k[out], run.exit_j[out],
                int(one_byte[0]) if len(one_byte) else -1, run.cell, run.exit_cell[out], run.exit_byte[out],
                present, run.token_cell, run.first, skip, run.ids[drop], whole=run.whole or run)


STEER_CANDIDATES = 1 << 13  # trie nodes where a steered chain may leave its table (else it is no block)
STEER_NODES = 1 << 12  # nodes its walk may visit off the table
STEER_TOKENS = 1 << 14  # and tokens it may find there


def _steer(trans: np.ndarray, trie: _Trie, char_class: str, block: Block, s: int, departing: np.ndarray, twins: bool,
           boundary: np.ndarray | None) -> tuple[Block, tuple, tuple] | None:
    """``s``'s chain block less only the tokens whose bytes leave its table, walked instead:
    (that block, their (src, token, next state), the walk's starts below them). The DFA may
    leave the table where the block's run skips a first byte (a key steering around declared
    names: "n" may begin "name"; "nx" is back on the table, a plain string) or on a
    ``departing`` byte at any depth (a free-form key ending in a digit), and may die below
    (those tokens are left out). None when such nodes are many, the DFA dies on a first byte, or
    it stands on a boundary off the table."""
    run, table, whole = block.run, block.table, _run_for(trie, char_class)
    root = _root_children(trie)[run.skip_first[~np.isin(run.skip_first, departing)]]
    candidates = [root[root >= 0]] + [trie.by_byte[trie.at[b]:trie.at[b + 1]] for b in departing.tolist()]
    candidates = np.concatenate(candidates).astype(np.int32, copy=False)
    if len(candidates) > STEER_CANDIDATES:
        return None
    queue = np.empty((STEER_NODES, 4), dtype=np.int32)
    tok, dst = np.empty(STEER_TOKENS, dtype=np.int32), np.empty(STEER_TOKENS, dtype=np.int32)
    exit_node, exit_state = np.empty(STEER_TOKENS, dtype=np.int32), np.empty(STEER_TOKENS, dtype=np.int32)
    counts = np.zeros(2, dtype=np.int64)
    dead_first = np.zeros(256, dtype=bool)
    got = steer_walk(np.ascontiguousarray(trans), run.trans, np.ascontiguousarray(table), trie.coff, trie.byte,
                     trie.eoff, trie.ids, trie.parent, s, candidates, twins, _NO_BOUNDARY if boundary is None else boundary,
                     np.empty(len(trie.doff), dtype=np.uint8), queue, tok, dst, exit_node, exit_state, dead_first, counts)
    if got < 0 or dead_first.any():
        # on a dead first byte every token beginning with it is dead: thousands left out per
        # state, where the class's own run, built once, serves every state that takes it
        return None
    k, h = int(counts[0]), int(counts[1])
    exit_node, exit_state = exit_node[:h], exit_state[:h]
    kept = ~np.isin(whole.exits, exit_node)  # the exits below the walked nodes are walked from them
    dropped = np.sort(tok[:k])
    live = dst[:k] != block.dead
    order = np.argsort(tok[:k][live])
    tok, dst = tok[:k][live][order], dst[:k][live][order]
    # states steered alike (a string's first character and the rest) share one run, and so the
    # bools of its tokens (Block.bits)
    key = hashlib.blake2b(dropped.tobytes() + np.packbits(kept).tobytes(), digest_size=16).digest()
    steered = RUNS.get_or_build((trie.key, char_class, "steered", key), lambda: _steered_run(whole, dropped, kept))
    alive = exit_state != block.dead
    return (Block(steered, table, block.dead), (np.full(len(tok), s, dtype=np.int32), tok, dst),
            (np.full(int(alive.sum()), s, dtype=np.int32), exit_node[alive], exit_state[alive]))


def _steered_run(whole: _Run, dropped: np.ndarray, kept: np.ndarray) -> _Run:
    """The class's ``whole`` run less the ``dropped`` tokens, with the exits ``kept``."""
    size = whole.present.size
    cells = np.bincount(whole.token_cell[dropped], minlength=size)[:size]
    return _Run(whole.trans, whole.edges, whole.tree, whole.ids, whole.k, whole.j, whole.exits[kept],
                whole.exit_k[kept], whole.exit_j[kept], whole.one_byte, whole.cell, whole.exit_cell[kept],
                whole.exit_byte[kept], ((whole.cell_counts - cells) > 0).reshape(whole.present.shape),
                whole.token_cell, whole.first, dropped=dropped, steered=True, whole=whole.whole or whole)


def _run_classes(trans: np.ndarray, states: np.ndarray) -> list[tuple[np.ndarray, list[tuple[str, bytes]]]]:
    """Which of ``states`` loop on many ASCII bytes, grouped by those bytes, with the character
    classes to try for them: the bytes plus every non-ASCII character (free text, JSON strings,
    raw strings), then the bytes alone (patterns such as ``[a-z0-9_]*``)."""
    loops = trans[states, :128] == states[:, None]
    many = loops.sum(axis=1) >= MIN_RUN_BYTES
    return _classes_by_bytes(trans, states[many], loops[many])


# the bytes that begin a non-ASCII UTF-8 character, but the symbols' (no ordinary token holds it,
# and a class beside the symbols, a JSON string's, steps on every other lead byte)
_LEAD_BYTES = np.setdiff1d(np.arange(0xC2, 0xF5), [FORGE_BYTE])


def _classes_by_bytes(trans: np.ndarray, states: np.ndarray, inside: np.ndarray
                      ) -> list[tuple[np.ndarray, list[tuple[str, bytes]]]]:
    """``states`` grouped by their (len(states), 128) rows of ASCII bytes ``inside``, each group
    with the character classes to try, as (class, bytes skipped): the bytes plus every non-ASCII
    character (only for states that step on every lead byte: trying it costs a walk of most of
    the vocabulary), then the bytes alone. A JSON string's class less a few bytes comes first
    where it fits (see MAX_SKIPPED_FIRST): a chain's run less the tokens beginning with them, or
    the string's own run steered around them (see _steer)."""
    if not len(states):
        return []
    n = trans.shape[0] - 1
    wide = (trans[states][:, _LEAD_BYTES] != n).all(axis=1)
    # grouped by a dict of row bytes, in np.unique's order: np.unique(axis=0) costs ~0.1 ms a
    # call warm and ~1 ms on its first in a process, on the path of a state's first mask
    groups: dict[bytes, list[int]] = {}
    for i, key in enumerate(np.column_stack([np.packbits(inside, axis=1), wide]).astype(np.uint8)):
        groups.setdefault(key.tobytes(), []).append(i)
    out = []
    for key in sorted(groups):
        ins = np.unpackbits(np.frombuffer(key[:16], dtype=np.uint8)).astype(bool)
        outside = np.flatnonzero(~ins)
        classes = [(_all_but(outside), b"")] if key[16] else []
        skip = np.flatnonzero(~ins & ~_STRING_OUTSIDE_BYTES)
        if classes and not ins[_STRING_OUTSIDE].any() and 0 < len(skip) <= MAX_SKIPPED_FIRST:
            classes.insert(0, (COMMON_CLASSES[0], skip.astype(np.uint8).tobytes()))
        out.append((states[groups[key]], classes + [(f"[{_hex(np.flatnonzero(ins))}]", b"")]))
    return out


def _chain_classes(trans: np.ndarray, states: np.ndarray) -> list[tuple[np.ndarray, list[str]]]:
    """Which of ``states`` send many ASCII bytes to one other state (a bounded string counting its
    characters), grouped by those bytes, with the character classes to try as in _run_classes."""
    n = trans.shape[0] - 1
    if len(states) == 1:  # one state's row, in Python: the numpy below costs ~0.13 ms a call
        s = int(states[0])
        groups: dict[int, list[int]] = {}  # by next state, in order of each one's first byte
        for b, t in enumerate(trans[s, :128].tolist()):
            if t != n and t != s:
                groups.setdefault(t, []).append(b)
        main = max(groups.values(), key=len, default=[])  # ties go to the lowest first byte
        if len(main) < MIN_RUN_BYTES:
            return []
        inside = np.zeros((1, 128), dtype=bool)
        inside[0, main] = True
        return _classes_by_bytes(trans, states, inside)
    rows = trans[states, :128].astype(np.int64)
    wide = ((rows != n) & (rows != states[:, None])).sum(axis=1) >= MIN_RUN_BYTES
    if not wide.any():
        return []
    states, rows = states[wide], rows[wide]
    # dead steps and loops never count: give each a value of its own
    rows = np.where((rows == n) | (rows == states[:, None]), -1 - np.arange(128), rows)
    rows = _first_bytes(rows)
    ordered = np.sort(rows, axis=1)
    # each position's run length so far: its index less the index where its run of equal values began
    same = np.zeros(ordered.shape, dtype=bool)
    same[:, 1:] = ordered[:, 1:] == ordered[:, :-1]
    at = np.broadcast_to(np.arange(128), ordered.shape)
    length = at - np.maximum.accumulate(np.where(same, 0, at), axis=1) + 1
    many = length.max(axis=1) >= MIN_RUN_BYTES
    states, rows, ordered, length = states[many], rows[many], ordered[many], length[many]
    main = ordered[np.arange(len(states)), length.argmax(axis=1)]
    return _classes_by_bytes(trans, states, rows == main[:, None])


def _first_bytes(rows: np.ndarray) -> np.ndarray:
    """Each byte's value in ``rows`` named by the first byte of its row with that value: which
    bytes share a next state, whatever the DFA numbers its states (so ties between equally long
    runs break by byte, and a row's classes follow from its shape alone; see _classes_of)."""
    order = np.argsort(rows, axis=1, kind="stable")
    ordered = np.take_along_axis(rows, order, axis=1)
    starts = np.ones(ordered.shape, dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    at = np.broadcast_to(np.arange(rows.shape[1]), ordered.shape)
    first = np.take_along_axis(order, np.maximum.accumulate(np.where(starts, at, 0), axis=1), axis=1)
    out = np.empty_like(rows)
    np.put_along_axis(out, order, first, axis=1)
    return out


def _classes_of(find, trans: np.ndarray, states: np.ndarray) -> list[tuple[np.ndarray, list[str]]]:
    """``find(trans, states)`` (_run_classes or _chain_classes), remembered for a single state by
    its row's shape: which bytes loop, die, or lead to equal states (all the finders read), so the
    many states of a bounded string classify once, and a JSON string's state once per process,
    not once per schema."""
    if len(states) != 1:
        return find(trans, states)
    s, n = int(states[0]), trans.shape[0] - 1
    row = trans[s]
    if np.count_nonzero(row[:128] != n) < MIN_RUN_BYTES:  # a structural state: neither finder finds one
        return []
    # each ASCII byte named by the first byte leading where it leads (as _first_bytes does, in
    # Python: a few numpy calls cost more than 128 steps here, on the path of a first mask)
    first: dict[int, int] = {}
    names = bytes(first.setdefault(t, b) for b, t in enumerate(row[:128].tolist()))
    key = (find.__name__, names, first.get(s, -1), first.get(n, -1), np.packbits(row[128:] == n).tobytes())
    found = ROW_CLASSES.get(key)
    if found is None:
        found = ROW_CLASSES.put(key, [classes for _, classes in find(trans, states)])
    return [(states, classes) for classes in found]


def _chain_maps(trans: np.ndarray, run: _Run, state: int, twins: bool) -> tuple[np.ndarray | None, np.ndarray]:
    """For a state that steps like the class from one state of a chain to the next, the class-state
    maps along the chain: row j maps each class state to the DFA state after j whole characters.
    The chain either outlasts the longest class token or ends in a state that takes no class
    character (only whole characters end there). With them, the bytes of the class edges some
    row does not step like that on (empty when none: the maps are exact), where the DFA leaves
    the chain (see _steer). None for the maps when the chain ends any other way.

    A chain's next state shares all rows but the last (a string read on visits its states in
    order), so each call leaves the next state's rows in CHAINS, checked but for one new row."""
    n = trans.shape[0] - 1
    if run.one_byte < 0:
        return None, _NO_BYTES
    found = CHAINS.get((id(trans), id(run), state, twins))
    if found is not None and found[0]() is trans and found[1] is run:
        chain, m, steps = found[2:]
    else:
        chain = [state]
        while len(chain) <= len(run.present):
            chain.append(int(trans[chain[-1], run.one_byte]))
            if chain[-1] == chain[-2]:
                break
        # past a state the chain stays on (a key steering around declared names, then a plain
        # string) every row is that state's: worked out once and repeated
        loop = len(chain) - 1
        chain = np.asarray(chain + [chain[-1]] * (len(run.present) + 1 - len(chain)), dtype=np.int32)
        m = _class_rows(trans, run, chain[:loop])
        steps = _chain_steps(trans, run, m, chain[1:loop + 1], twins, skip_first=True)
        if loop < len(run.present):
            m = np.concatenate([m, np.repeat(m[-1:], len(run.present) - loop, axis=0)])
            steps = np.append(steps, np.repeat(steps[-1:], len(run.present) - loop))
    if chain[1] != state:
        nxt = np.append(chain[1:], trans[chain[-1], run.one_byte]).astype(np.int32)
        row = _class_rows(trans, run, nxt[-2:-1])
        CHAINS.put((id(trans), id(run), int(chain[1]), twins),
                   (weakref.ref(trans), run, nxt, np.concatenate([m[1:], row]),
                    np.append(steps[1:], _chain_steps(trans, run, row, nxt[-1:], twins))))
    if steps.all():
        return m, _NO_BYTES
    end = int(np.argmin(steps))
    if end and chain[end] != chain[end - 1] and (trans[m[end, run.edges[:, 0]], run.edges[:, 1]] == n).all():
        m = m[:end + 1].copy()
        m[end, 1:] = n
        return m, _NO_BYTES
    if (m[~steps, 0] == n).any():  # a row past the chain's end: not a chain that wanders off
        return None, _NO_BYTES
    bad = np.flatnonzero(~steps)
    return m, _departing(trans, run, m[bad], chain[1:len(m) + 1][bad], twins, bad[0] == 0)


def _departing(trans: np.ndarray, run: _Run, m: np.ndarray, nexts: np.ndarray, twins: bool, first: bool = False
               ) -> np.ndarray:
    """The bytes of the class edges some row of ``m`` does not step like the class on (to
    ``nexts`` after a whole character); with ``first``, the first row's skipped first bytes are
    not asked."""
    ok = np.empty((len(m), len(run.edges)), dtype=bool)
    steps_alike(trans, np.ascontiguousarray(m), run.edges, np.ascontiguousarray(nexts, dtype=np.int32), twins, ok)
    if first and len(run.skip_first):
        ok[0] |= (run.edges[:, 0] == 0) & np.isin(run.edges[:, 1], run.skip_first)
    return np.unique(run.edges[~ok.all(axis=0), 1])


def _class_rows(trans: np.ndarray, run: _Run, starts: np.ndarray) -> np.ndarray:
    """Per state in ``starts`` (a chain's, or one that may loop on the class), the DFA state each
    class state of one character reaches."""
    m = np.empty((len(starts), run.trans.shape[0] - 1), dtype=np.int32)
    class_maps(trans, run.tree, starts.astype(np.int32, copy=False), m)
    return m


def _chain_steps(trans: np.ndarray, run: _Run, m: np.ndarray, nexts: np.ndarray, twins: bool,
                 skip_first: bool = False) -> np.ndarray:
    """Per row of ``m``, whether every class edge steps as the class does, a whole character
    landing on the chain's next state (``nexts``); with ``skip_first``, the first row's steps on
    the run's skipped first bytes are not asked (no token of the run begins with them)."""
    e = run.edges
    ok = np.empty((len(m), len(e)), dtype=bool)
    steps_alike(trans, m, e, nexts.astype(np.int32, copy=False), twins, ok)
    if skip_first and len(run.skip_first) and len(ok):
        ok[0] |= (e[:, 0] == 0) & np.isin(e[:, 1], run.skip_first)
    return ok.all(axis=1)


def _hex(byte_values: np.ndarray) -> str:
    return "".join(f"\\x{b:02X}" for b in byte_values)


def _all_but(ascii_bytes) -> str:
    """The character class of every character but these ASCII bytes and the symbols."""
    return f"[^{_hex(ascii_bytes)}{SPECIAL_CLASS}]"


# The classes of a JSON string's characters and of free text: nearly every grammar has a state
# looping on one of them, so their runs are built with the vocabulary's trie.
_STRING_OUTSIDE = np.r_[0:0x20, 0x22, 0x5C]
_STRING_OUTSIDE_BYTES = np.isin(np.arange(128), _STRING_OUTSIDE)
COMMON_CLASSES = (_all_but(_STRING_OUTSIDE), _all_but([]))


def _run_states(trans: np.ndarray, run: _Run, states: np.ndarray, twins: bool) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``states`` move like the class automaton: (those states, their class-state map)."""
    m = _class_rows(trans, run, states)
    ok = np.empty((len(m), len(run.edges)), dtype=bool)
    steps_alike(trans, m, run.edges, m[:, 0].copy(), twins, ok)
    ok = ok.all(axis=1)
    return states[ok], m[ok]


def token_edges(trans: np.ndarray, trie: _Trie, max_edges: int, extra: tuple[tuple[bytes, int], ...] = (),
                states: np.ndarray | None = None, boundary: np.ndarray | None = None, hits: list | None = None,
                twins: bool = False):
    """Every (state, token, next state) of the byte DFA from ``states`` (all by default), walking
    the trie from all of them at once.

    Returns the walked edges and, for states that loop on a character class or count its
    characters, the class's tokens as one Block each: {state: Block}. With ``boundary`` (see ``_walk``), a
    class state that is a boundary is walked token by token instead. ``twins`` lets a block's
    next states be twins of the exact ones (see kernels.steps_alike): for rows read per state, not for
    materialised automata.
    """
    n = trans.shape[0] - 1
    if states is None:
        states = np.arange(n, dtype=np.int32)
    blocks: dict[int, Block] = {}
    starts = []  # (state, trie node, DFA state) where the trie walk begins
    direct = []  # (state, token, next state) found beside the blocks (a steered state's, see _steer)
    for group, classes in _classes_of(_run_classes, trans, states):
        for char_class, skip in classes:
            if not len(group):
                break
            if skip:  # a string's run, the loop left where the DFA leaves it (see _steer)
                _steered_loops(trans, trie, char_class, group, twins, boundary, blocks, starts, direct)
                group = _without(group, list(blocks))
                continue
            run = _run_for(trie, char_class)
            looping, m = _run_states(trans, run, group, twins)
            group = _without(group, looping)
            if boundary is not None:
                looping, m = looping[~boundary[m].any(axis=1)], m[~boundary[m].any(axis=1)]
            for s, row in zip(looping.tolist(), m):
                _add_block(blocks, starts, trans, trie, Block(run, np.repeat(row[None], len(run.present), axis=0), n), s)
    rest = _without(states, list(blocks))
    for group, classes in _classes_of(_chain_classes, trans, rest):
        for char_class, skip_first in classes:
            if not len(group):
                break
            run = _run_for(trie, char_class, skip_first)
            for s in group.tolist():
                m, departing = _chain_maps(trans, run, s, twins)
                if m is None or (boundary is not None and boundary[m].any()):
                    continue
                table = np.full(run.present.shape, n, dtype=np.int32)
                table[:len(m)] = m
                block = Block(run, table, n)
                steered = _steer(trans, trie, char_class, block, s, departing, twins, boundary) \
                    if skip_first or len(departing) else None
                if steered is not None:
                    _add_steered(blocks, starts, direct, trans, trie, steered, s)
                elif not len(departing):
                    _add_block(blocks, starts, trans, trie, block, s)
            group = _without(group, list(blocks))
    walked = _without(states, list(blocks))
    # the first byte from the table's rows, not from the root's 256 children for every state
    first, root = trans[walked], _root_children(trie)
    row, byte = np.nonzero((first != n) & (root >= 0))
    starts.append((walked[row], root[byte], first[row, byte]))
    src, node, cur = (np.concatenate(p) for p in zip(*starts))
    parts = _walk(trans, trie, src, node, cur, max_edges - sum(b.run.count for b in blocks.values()), boundary, hits)
    parts += direct + _extra_edges(trans, states, extra)
    if not parts:
        empty = np.zeros(0, dtype=np.int32)
        return empty, empty, empty, blocks
    src, tok, dst = (np.concatenate(p) for p in zip(*parts))
    return src, tok, dst, blocks


def _steered_loops(trans: np.ndarray, trie: _Trie, char_class: str, states: np.ndarray, twins: bool,
                   boundary: np.ndarray | None, blocks: dict, starts: list, direct: list) -> None:
    """Give each of ``states`` that loops on the class but for a few bytes the class's run as its
    block, steered (the tokens that leave the loop walked), where _steer can."""
    run = _run_for(trie, char_class)
    n = trans.shape[0] - 1
    for s, row in zip(states.tolist(), _class_rows(trans, run, states)):
        if boundary is not None and boundary[row].any():
            continue
        block = Block(run, np.repeat(row[None], len(run.present), axis=0), n)
        steered = _steer(trans, trie, char_class, block, s, _departing(trans, run, row[None], row[:1], twins), twins,
                         boundary)
        if steered is not None:
            _add_steered(blocks, starts, direct, trans, trie, steered, s)


def _extra_edges(trans: np.ndarray, states: np.ndarray, extra: tuple[tuple[bytes, int], ...]) -> list:
    """(src, token, next state) of each ``extra`` (text, token) read from ``states``, where it lives."""
    n = trans.shape[0] - 1
    parts = []
    for text, token in extra:
        cur = states
        for b in text:
            cur = trans[cur, b]
        ok = cur != n
        parts.append((states[ok], np.full(int(ok.sum()), token, dtype=np.int32), cur[ok]))
    return parts


def _without(values: np.ndarray, drop) -> np.ndarray:
    """``values`` less those in ``drop``; for the few states of one state's row, by comparing
    all pairs (np.isin's fixed cost is most of such a call)."""
    if len(drop) == 0:
        return values
    drop = np.asarray(drop)
    if len(values) * len(drop) <= 4096:
        return values[~(values[:, None] == drop[None, :]).any(axis=1)]
    return values[~np.isin(values, drop)]


def _add_block(blocks: dict, starts: list, trans: np.ndarray, trie: _Trie, block: Block, s: int) -> None:
    """Record ``s``'s class block and where its walk begins: the exits, from the state each
    reaches in the class before its leaving byte."""
    run = block.run
    cur = trans[block.table.reshape(-1)[run.exit_cell], run.exit_byte]
    alive = cur != block.dead
    blocks[s] = block
    starts.append((np.full(int(alive.sum()), s, dtype=np.int32), run.exits[alive], cur[alive]))
    if len(run.skip_first) and not run.steered:  # the tokens beginning with a skipped byte are walked from s
        node = _root_children(trie)[run.skip_first]
        nxt = trans[s, run.skip_first]
        ok = (node >= 0) & (nxt != block.dead)
        starts.append((np.full(int(ok.sum()), s, dtype=np.int32), node[ok], nxt[ok]))


def _add_steered(blocks: dict, starts: list, direct: list, trans: np.ndarray, trie: _Trie, steered: tuple, s: int
                 ) -> None:
    """Record ``s``'s steered block (see _add_block), the tokens it leaves out with their next
    states, and the walk starts below them (_steer's three parts)."""
    block, edges, below = steered
    direct.append(edges)
    starts.append(below)
    _add_block(blocks, starts, trans, trie, block, s)


WALK_START = 1 << 14  # entries a walk's output arrays have room for at first


def _walk(trans: np.ndarray, trie: _Trie, src: np.ndarray, node: np.ndarray, cur: np.ndarray, max_edges: int,
          boundary: np.ndarray | None = None, hits: list | None = None) -> list:
    """Walk the trie down from ``node`` (each at DFA state ``cur``, for ``src``) level by level: the
    (src, token, next state) of every token ending on the way. With ``boundary`` ((n+1,) bools),
    every (src, node, state) where the walk stands on a boundary state is appended to ``hits``.

    The walk itself is one compiled loop (kernels.walk_levels); the tokens ending on the nodes it
    reached and its boundary states are read afterwards with a few array calls."""
    if not len(src):
        return []
    src, node, cur = src.astype(np.int32, copy=False), node.astype(np.int64, copy=False), cur.astype(np.int32, copy=False)
    size = max(WALK_START, 16 * len(src))
    while True:  # untouched room costs no page; a walk past it is walked again with four times the room
        out = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int32)
        m = walk_levels(np.ascontiguousarray(trans), trie.coff, trie.byte, trie.eoff, src, node, cur, max_edges, *out)
        if m == -2:
            raise CompileError(f"the token automaton exceeds {max_edges} transitions")
        if m >= 0:
            break
        size *= 4
    src, node, cur = out[0][:m], out[1][:m], out[2][:m]
    if boundary is not None:
        at = boundary[cur]
        hits.append((src[at], node[at], cur[at]))
    owner, pos = ranges(node, trie.eoff)
    return [(src[owner], trie.ids[pos], cur[owner])] if len(owner) else []


def descend(trans: np.ndarray, trie: _Trie, nodes: np.ndarray, state: int, boundary: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The tokens below the trie ``nodes`` read on from DFA state ``state`` (the nodes' own bytes
    already read): (tokens, next states, boundary nodes, their states), as ``token_row_hits``."""
    return _row_walk(trans, trie, state, nodes, boundary)


ROW_WALK_START = 1 << 10  # nodes and tokens a row's walk has room for at first (most rows are short)
_NO_BOUNDARY = np.zeros(0, dtype=bool)
_NO_BYTES = np.zeros(0, dtype=np.int64)
_ROOT = np.zeros(1, dtype=np.int64)


def _row_walk(trans: np.ndarray, trie: _Trie, state: int, nodes: np.ndarray, boundary: np.ndarray | None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """kernels.walk_row from ``state`` below ``nodes``: (tokens, next states, boundary nodes, their
    states), copied out of the walk's room (a cached row must not hold the room's pages)."""
    nodes = np.ascontiguousarray(nodes, dtype=np.int64)
    marks = _NO_BOUNDARY if boundary is None else boundary
    size = room = ROW_WALK_START
    counts = np.zeros(2, dtype=np.int64)
    while True:
        src_buf, node_buf, cur_buf = np.empty(size, np.int32), np.empty(size, np.int64), np.empty(size, np.int32)
        hit_node, hit_state = np.empty(size, dtype=np.int32), np.empty(size, dtype=np.int32)
        tok, dst = np.empty(room, dtype=np.int32), np.empty(room, dtype=np.int32)
        got = walk_row(np.ascontiguousarray(trans), trie.coff, trie.byte, trie.eoff, trie.ids, state, nodes, marks,
                       src_buf, node_buf, cur_buf, tok, dst, hit_node, hit_state, counts)
        if got == -1:
            size *= 4
        elif got == -3:
            room = int(counts[0])
        else:
            break
    k, h = int(counts[0]), int(counts[1])
    return tok[:k].copy(), dst[:k].copy(), hit_node[:h].copy(), hit_state[:h].copy()


def _structural(trans: np.ndarray, state: int) -> bool:
    """Whether ``state`` steps on too few ASCII bytes to loop on or count a class (token_edges then
    finds no block for it, and its row is one walk)."""
    return np.count_nonzero(trans[state, :128] != trans.shape[0] - 1) < MIN_RUN_BYTES


def token_row_hits(trans: np.ndarray, trie: _Trie, state: int, boundary: np.ndarray
                   ) -> tuple[Block | None, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """One state's tokens, as ``token_row`` (a block's next states are never on the boundary),
    and the trie nodes where a token's bytes stand on a ``boundary`` state partway or at its end,
    with those states."""
    if _structural(trans, state):
        return (None,) + _row_walk(trans, trie, state, _ROOT, boundary)
    hits: list = []
    _, tok, dst, blocks = token_edges(trans, trie, NO_EDGE_LIMIT, (), np.array([state], dtype=np.int32), boundary, hits,
                                      twins=True)
    return (blocks.get(state), tok, dst) + _hits(hits)


def _hits(hits: list) -> tuple[np.ndarray, np.ndarray]:
    if not hits:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32)
    return (np.concatenate([h[1] for h in hits]).astype(np.int32),
            np.concatenate([h[2] for h in hits]).astype(np.int32))


def _root_children(trie: _Trie) -> np.ndarray:
    """The trie node each byte leads to from the root (-1 where no token starts with it)."""
    out = np.full(256, -1, dtype=np.int32)
    children = np.arange(trie.coff[0], trie.coff[1])
    out[trie.byte[children]] = children
    return out


def token_row(trans: np.ndarray, trie: _Trie, state: int, extra: tuple[tuple[bytes, int], ...] = ()
              ) -> tuple[Block | None, np.ndarray, np.ndarray]:
    """One state's tokens: its class block (None when it has none), and the tokens walked one by
    one with the states they lead to (unsorted), the dead state left out."""
    if _structural(trans, state):
        tok, dst, _, _ = _row_walk(trans, trie, state, _ROOT, None)
        more = _extra_edges(trans, np.array([state], dtype=np.int32), extra)
        if more:
            tok = np.concatenate([tok] + [p[1] for p in more])
            dst = np.concatenate([dst] + [p[2] for p in more])
        return None, tok, dst
    _, tok, dst, blocks = token_edges(trans, trie, NO_EDGE_LIMIT, extra, np.array([state], dtype=np.int32), twins=True)
    return blocks.get(state), tok, dst


def build(regex: str, vocab: Vocab, key: str, macro: tuple[str, int] | None = None,
           max_edges: int = DEFAULT_MAX_EDGES) -> Automaton:
    """The token automaton of ``regex`` over ``vocab``, pruned to the useful states."""
    trans, final = byte_dfa(regex)
    n = len(final)
    extra = ((macro[0].encode(), macro[1]),) if macro else ()
    src, tok, dst, blocks = token_edges(trans, vocabulary_trie(vocab), max_edges, extra)
    # keep the states the initial one reaches by tokens and that can still reach acceptance
    block_dst = {s: sorted_unique(b.table[b.live]) for s, b in blocks.items()}
    block_src = [np.full(len(t), s) for s, t in block_dst.items()]
    gs, gd = state_graph(np.concatenate([src, *block_src]), np.concatenate([dst, *block_dst.values()]), n)
    to_end = bfs(gd, gs, np.flatnonzero(final), n)
    alive = (bfs(gs, gd, np.array([0]), n) < UNREACHABLE) & (to_end < UNREACHABLE)
    if not alive[0]:
        raise CompileError("the regex accepts no string this vocabulary can produce")
    keep = alive[src] & alive[dst]
    dense = (np.cumsum(alive) - 1).astype(np.int32)
    m = int(alive.sum())
    src, tok, dst = dense[src[keep]], tok[keep], dense[dst[keep]]
    order = np.argsort(src.astype(np.int64) << 32 | tok)
    tok, dst = tok[order], dst[order]
    offsets = np.concatenate([[0], np.cumsum(np.bincount(src, minlength=m))]).astype(np.int64)
    if blocks:  # merge each class block (sorted) with its state's walked tokens
        toks, tgts, counts = [], [], np.zeros(m + 1, dtype=np.int64)
        for s in np.flatnonzero(alive).tolist():
            d = dense[s]
            t, g = tok[offsets[d]:offsets[d + 1]], dst[offsets[d]:offsets[d + 1]]
            if s in blocks:
                ids, to = blocks[s].tokens()
                ok = alive[to]
                ids, to = ids[ok], dense[to[ok]]
                at = np.searchsorted(ids, t)
                t, g = np.insert(ids, at, t), np.insert(to, at, g)
            toks.append(t)
            tgts.append(g)
            counts[d + 1] = len(t)
        tok, dst, offsets = np.concatenate(toks), np.concatenate(tgts), np.cumsum(counts)
    return Automaton(offsets, tok, dst, final[alive], to_end[alive], key)
