"""Token automata: what both kinds offer, the materialised kind as flat arrays, and the graph
routines that measure them.

States are dense, 0..n-1, state 0 the initial one. Per state: the allowed token ids (sorted),
the state each leads to, whether it accepts, and the fewest tokens still needed to reach
acceptance, which is what lets a matcher close the output before the budget runs out.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

UNREACHABLE = np.iinfo(np.int32).max // 2


class TokenAutomaton:
    """What both kinds of token automaton offer (state 0 is the initial one).

    ``row(state)`` gives a state's allowed tokens and the state each leads to; ``bound[s]`` is a
    consistent upper bound on the tokens from ``s`` to acceptance (exact for a materialised
    automaton): every state with a finite bound has a token to a state whose bound is one less,
    so masks that keep the next state's bound within the tokens left always finish in budget.
    """

    final: np.ndarray  # bool (n,)
    initial_state = 0

    @property
    def bound(self) -> np.ndarray:
        raise NotImplementedError

    # What a tool call's pieces offer (a LinkedAutomaton too, whose states are tuples).

    def bound_of(self, state: int) -> int:
        return int(self.bound[state])

    def is_final(self, state: int) -> bool:
        return bool(self.final[state])

    def has_tokens(self, state: int) -> bool:
        return len(self.row(state)[0]) > 0

    def row(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def next_state(self, state: int, token: int) -> int:
        raise NotImplementedError

    @property
    def num_states(self) -> int:
        return len(self.final)

    @property
    def min_tokens(self) -> int:
        """The length of the shortest output the masks guide to (EOS not counted)."""
        return int(self.bound[0])

    def fits(self, budget: int) -> bool:
        return self.min_tokens <= budget

    def walk(self, token_ids: list[int], state: int = 0) -> int:
        """Follow ``token_ids`` from ``state``; -1 once a token is not allowed."""
        for t in token_ids:
            state = self.next_state(state, t)
            if state < 0:
                return -1
        return state

    def successors_within(self, state: int, budget: int) -> np.ndarray:
        """Token ids allowed in ``state`` whose next state's bound is within ``budget``."""
        ids, targets = self.row(state)
        return ids[self.bound[targets] <= budget]

    def is_complete(self, state: int) -> bool:
        """Accepting, and no token may follow."""
        return bool(self.final[state]) and len(self.row(state)[0]) == 0

    def target_cap(self, state: int) -> int:
        """The largest finite bound among the state's successors: budgets at or above it allow every token."""
        b = self.bound[self.row(state)[1]]
        return int(b[b < UNREACHABLE].max(initial=-1))

    def allowed_bits(self, state: int, budget: int, width: int) -> np.ndarray | None:
        """The allowed tokens below ``width`` as bools, where an automaton has them cheaper than
        as a list of ids (see LazyAutomaton); None here."""
        return None

    def banned(self, state: int, budget: int, width: int) -> np.ndarray | None:
        """The tokens below ``width`` the state bans (sorted int32), where an automaton knows them
        without a pass over the row and they are few (see LazyAutomaton); None here."""
        return None


# a mask lists its allowed ids when they are under 1/FEW_ALLOWED of the row, its banned ids when
# those are under 1/FEW_BANNED (automata.masks); a class block tells the second without the row
FEW_ALLOWED = 32
FEW_BANNED = 16


def less(ids: np.ndarray, drop: np.ndarray) -> np.ndarray:
    """The sorted ``ids`` less every value in ``drop`` (unsorted, repeats allowed)."""
    if not len(drop) or not len(ids):
        return ids
    at = np.searchsorted(ids, drop)
    found = at < len(ids)
    at = at[found]
    at = at[ids[at] == drop[found]]
    keep = np.ones(len(ids), dtype=bool)
    keep[at] = False
    return ids[keep]


@dataclass(eq=False)
class Automaton(TokenAutomaton):
    """A materialised token automaton: every state's tokens as flat arrays, exact distances."""

    offsets: np.ndarray  # int64 (n+1,): state s owns tokens[offsets[s]:offsets[s+1]]
    tokens: np.ndarray  # int32, sorted within each state
    targets: np.ndarray  # int32, the state each token leads to
    final: np.ndarray  # bool (n,)
    dist: np.ndarray  # int32 (n,): fewest tokens to acceptance, UNREACHABLE if none
    key: str = ""
    positions: np.ndarray | None = None  # literal automata: each state's byte offset in the literal

    @property
    def bound(self) -> np.ndarray:
        return self.dist

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.offsets, self.tokens, self.targets, self.final, self.dist))

    def row(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = self.offsets[state], self.offsets[state + 1]
        return self.tokens[lo:hi], self.targets[lo:hi]

    def next_state(self, state: int, token: int) -> int:
        """The state after ``token``, or -1 when the token is not allowed."""
        lo, hi = self.offsets[state], self.offsets[state + 1]
        i = lo + int(self.tokens[lo:hi].searchsorted(np.int32(token)))  # a Python int would cast the row
        if i < hi and self.tokens[i] == token:
            return int(self.targets[i])
        return -1

    def is_complete(self, state: int) -> bool:
        return bool(self.final[state]) and self.offsets[state + 1] == self.offsets[state]

    def target_cap(self, state: int) -> int:
        return int(self.max_target_dist[state])

    @cached_property
    def max_target_dist(self) -> np.ndarray:
        """Per state, the largest finite distance among its successors (mask cache key cap)."""
        d = self.dist[self.targets]
        d = np.where(d >= UNREACHABLE, -1, d)
        out = np.full(self.num_states, -1, dtype=np.int64)
        counts = np.diff(self.offsets)
        nonempty = counts > 0
        out[nonempty] = np.maximum.reduceat(d, self.offsets[:-1][nonempty]) if d.size else -1
        return out


def sorted_unique(ids: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted: np.unique's result, by a sort (numpy 2.4's
    hash-based np.unique takes 18 ms on a vocabulary-wide row, 50x a sort)."""
    s = np.sort(ids)
    return s[np.concatenate(([True], s[1:] != s[:-1]))] if len(s) else s


SMALL_GRAPH = 20_000  # edges up to which a breadth-first search walks in Python


def bfs(a: np.ndarray, b: np.ndarray, start: np.ndarray, n: int) -> np.ndarray:
    """Breadth-first levels from ``start`` along edges a -> b (UNREACHABLE where never reached)."""
    order = np.argsort(a, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(a, minlength=n))])
    heads = b[order]
    if len(a) <= SMALL_GRAPH:
        return _bfs_walk(offsets.tolist(), heads.tolist(), start.tolist(), n)
    dist = np.full(n, UNREACHABLE, dtype=np.int32)
    frontier = sorted_unique(start)
    d = 0
    while len(frontier):
        dist[frontier] = d
        _, pos = ranges(frontier, offsets)
        nxt = sorted_unique(heads[pos])
        frontier = nxt[dist[nxt] == UNREACHABLE]
        d += 1
    return dist


def _bfs_walk(offsets: list[int], heads: list[int], start: list[int], n: int) -> np.ndarray:
    """``bfs`` one state at a time: a byte DFA's graph is long and narrow (a literal key is a chain
    of states), where a level's few states cost less in Python than a level's numpy calls."""
    dist = [UNREACHABLE] * n
    frontier = []
    for s in start:
        if dist[s] == UNREACHABLE:
            dist[s] = 0
            frontier.append(s)
    d = 0
    while frontier:
        d += 1
        nxt = []
        for s in frontier:
            for t in heads[offsets[s]:offsets[s + 1]]:
                if dist[t] == UNREACHABLE:
                    dist[t] = d
                    nxt.append(t)
        frontier = nxt
    return np.array(dist, dtype=np.int32)


def state_graph(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (from, to) state pairs among the edges (free text gives 150k per state)."""
    flat = src.astype(np.int64) * n + dst
    if n * n <= 1 << 26:
        seen = np.zeros(n * n, dtype=bool)
        seen[flat] = True
        flat = np.flatnonzero(seen)
    else:
        flat = sorted_unique(flat)
    return flat // n, flat % n


def distances(offsets: np.ndarray, targets: np.ndarray, final: np.ndarray) -> np.ndarray:
    """Per state, the fewest tokens to an accepting state (reverse breadth-first search)."""
    n = len(final)
    src, dst = state_graph(np.repeat(np.arange(n), np.diff(offsets)), targets, n)
    return bfs(dst, src, np.flatnonzero(final), n)


def ranges(starts: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the positions offsets[starts[i]]..offsets[starts[i]+1]-1: (owner i, position)."""
    if len(starts) == 1:  # a walk narrowed to one trie node or state (a literal's bytes): no array work
        lo, hi = int(offsets[starts[0]]), int(offsets[starts[0] + 1])
        return np.zeros(hi - lo, dtype=np.int64), np.arange(lo, hi)
    lo = offsets[starts]
    counts = offsets[starts + 1] - lo
    owner = np.repeat(np.arange(len(starts)), counts)
    pos = np.arange(int(counts.sum())) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
    return owner, pos

