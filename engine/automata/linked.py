"""Reference graphs linked instead of expanded: one byte DFA per definition, a call stack in the state.

A schema whose ``$ref``s would expand into too large a regex is translated with each referenced
definition written once, as a regex of its own, and each use written as a marker no token spells
(``symbols.link_symbol(k)``). Each regex becomes a byte DFA, a *part* (part 0 is the root). A
marker's step from ``u`` to ``v`` is a call: the walk enters part ``k`` at its initial state and,
once ``k`` accepts, may return to ``v``. A configuration is (return stack, part, state); a match
state is the sorted tuple of the configurations reachable without reading a byte (calls and
returns), so recursive definitions nest as deep as the budget allows.

Bounds: a part's ``bound`` counts a call as the callee's bound at its initial state, found by
iterating to a fixpoint (recursion included); a configuration's cost is its state's bound plus
the bounds of the return states on its stack. The bound is an upper bound on the tokens left
and consistent (see automata.lazy), so masks that keep the next configuration's cost within the
tokens left always finish in budget.

A token may straddle parts (``"},{"`` returns from one definition and calls the next): the trie
walk of a state reports where a token's bytes stand on a state that calls or returns, and the
rest of the token is walked from that trie node on, in the part it enters.

Long strings are counted, as in an expanded grammar (automata.counters): a definition written
``"C{lo}(?:C|M)*"`` loops on its characters, and a configuration inside the loop holds (state,
characters so far) for its state. Its loop takes at least as many characters as the longest
token holds (the translation counts only such bounds), so a token can pass the limit only from
inside the loop, where the count is known: near the limit a configuration's tokens are walked
with the count (counters.fits), farther from it they are its state's own.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from ..caches import Cache
from ..errors import CompileError
from ..symbols import counter_symbol, link_symbol
from ..vocabulary import Vocab
from . import counters
from .automaton import UNREACHABLE, bfs, less, sorted_unique
from .byte_dfa import byte_dfa
from .index import NO_EDGE_LIMIT, Block, descend, token_edges, token_row_hits, vocabulary_trie
from .lazy import shortest_path_table, single_steps

PART_THREADS = 2  # parts compiled at once, when their regexes hold more than PARALLEL_FROM characters
PARALLEL_FROM = 20_000
MAX_STACK = 256  # nested calls one configuration may hold: a guard, the budget binds first
# by (key, part, state), and by (key, part, state, trie nodes) for the rest of tokens entering a part
WALKS = Cache("linked walks", 256 << 20, lambda r: sum(a.nbytes for a in r if a is not None))
# by (key, configuration): (class block or None, the other tokens, their costs, the largest cost)
EDGES = Cache("linked edges", 256 << 20, lambda r: r[1].nbytes + r[2].nbytes + (r[0].nbytes if r[0] else 0))
CLOSURES = Cache("linked closures", 1 << 18)  # by (key, configuration)
STACK_COSTS = Cache("linked stack costs", 1 << 18)  # by (key, return stack): the bounds of its returns
STEPS = Cache("linked steps", 1 << 18)  # by (key, state, token bytes): (configurations after, their largest cost)

# (stack: tuple of (part, state) return points, part, state); inside a counted loop the state is
# (state, characters so far) once the count is above 0
Config = tuple


def match_state(configurations) -> tuple:
    """Configurations as a match state: each once, in one order (a counted state, (state, count),
    ranks as a plain one written (state,): Python does not order an int against a tuple)."""
    return tuple(sorted(set(configurations), key=lambda c: (c[0], c[1], c[2] if type(c[2]) is tuple else (c[2],))))


def _state(s) -> int:
    """A configuration's DFA state (inside a counted loop it is held with the count)."""
    return s[0] if isinstance(s, tuple) else s


def _grouped(values: np.ndarray, keys: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """(key, the values with that key, in their order) for each distinct key, ascending. A walk's
    boundary hits are mostly a handful, where numpy's calls cost more than a loop in Python."""
    if len(keys) > 64:
        return [(u, values[keys == u]) for u in sorted_unique(keys).tolist()]
    at: dict[int, list[int]] = {}
    for i, u in enumerate(keys.tolist()):
        at.setdefault(u, []).append(i)
    if len(at) == 1:
        return [(next(iter(at)), values)]
    return [(u, values[at[u]]) for u in sorted(at)]


def link_tables(regexes: list[str], vocab: Vocab, limits: list[int] = ()) -> dict[str, np.ndarray]:
    """For the root regex and the definitions after it (marker k calls part k + 1), each part's byte DFA with dead states cut, its calls and its bound, as named arrays:
    ``trans{i}``, ``final{i}``, ``calls{i}`` ((m, 3): state, callee, return state), ``bound{i}``,
    and ``loops{i}`` ((m, 2): loop state, limit) for the counted loops of counter markers whose
    limits are ``limits``."""
    trie = vocabulary_trie(vocab)
    single = np.flatnonzero(vocab.byte_tokens >= 0)
    symbols = [(ch.encode(), i) for i, ch in vocab.symbols.items()]
    out: dict[str, np.ndarray] = {"parts": np.array(len(regexes))}
    # definitions often repeat one another's text: each distinct regex is built once
    first = {r: i for i, r in reversed(list(enumerate(regexes)))}
    unique = sorted(set(first.values()))

    def part(i: int) -> tuple:
        return _part(regexes[i], len(regexes), trie, single, symbols, limits)
    if len(unique) > 1 and sum(len(regexes[i]) for i in unique) > PARALLEL_FROM:
        with ThreadPoolExecutor(min(PART_THREADS, len(unique))) as pool:  # outlines-core builds without the GIL
            built = dict(zip(unique, pool.map(part, unique)))
    else:  # starting a thread costs milliseconds (it waits for the GIL): small schemas build in line
        built = {i: part(i) for i in unique}
    edges = []
    for i, regex in enumerate(regexes):
        trans, final, call, e, loops = built[first[regex]]
        edges.append(e)
        out[f"trans{i}"], out[f"final{i}"], out[f"calls{i}"], out[f"loops{i}"] = trans, final, call, loops
    bounds = _bounds(edges, [out[f"calls{i}"] for i in range(len(regexes))],
                     [out[f"final{i}"] for i in range(len(regexes))])
    if bounds[0][0] >= UNREACHABLE:
        raise CompileError("the linked definitions accept no string this vocabulary can produce")
    for i, b in enumerate(bounds):
        out[f"bound{i}"] = b
    return out


def _bounds(edges: list, calls: list[np.ndarray], finals: list[np.ndarray]) -> list[np.ndarray]:
    """Each part's bound, a call weighing its callee's bound at its initial state. Parts are
    computed callees first, and a part again only when a callee's weight went down (recursion),
    until nothing changes: the same fixpoint as rounds over every part, with each part of an
    acyclic reference graph computed once."""
    count = len(calls)
    callers: list[set] = [set() for _ in range(count)]
    for i, c in enumerate(calls):
        for k in set(c[:, 1].tolist()):
            callers[k].add(i)
    order, seen = [], set()
    for root in range(count):  # depth-first post-order: callees before their callers
        if root in seen:
            continue
        seen.add(root)
        todo = [(root, iter(sorted(set(calls[root][:, 1].tolist()))))]
        while todo:
            u, it = todo[-1]
            k = next(it, None)
            if k is None:
                order.append(u)
                todo.pop()
            elif k not in seen:
                seen.add(k)
                todo.append((k, iter(sorted(set(calls[k][:, 1].tolist())))))
    weights = np.full(count, UNREACHABLE, dtype=np.int64)
    bounds: list = [None] * count
    queue, queued = deque(order), set(order)
    while queue:
        i = queue.popleft()
        queued.discard(i)
        bounds[i] = _weighted_bound(*edges[i], calls[i], weights, finals[i])
        if bounds[i][0] != weights[i]:
            weights[i] = bounds[i][0]
            for c in callers[i] - queued:
                queue.append(c)
                queued.add(c)
    return bounds


def _part(regex: str, count: int, trie, single: np.ndarray, symbols: list, limits: list[int]) -> tuple:
    """One part's byte DFA with dead states cut, its calls ((m, 3): state, callee, return state),
    its token edges (single bytes, symbols, whole tokens along shortest byte paths) and its counted
    loops ((m, 2): state, limit; found before the cut, which drops their markers' paths)."""
    trans, final = byte_dfa(regex)
    n = len(final)
    marked = any(counter_symbol(k) in regex for k in range(len(limits)))
    found = counters.find_loops(trans, list(limits)) if marked else {}
    loops = np.array([[x.state, x.limit] for x in found.values()], dtype=np.int64).reshape(-1, 2)
    calls = [np.zeros((0, 3), dtype=np.int32)]
    for k in range(count - 1):  # marker k calls part k + 1
        if link_symbol(k) in regex:
            cur = np.arange(n)
            for b in link_symbol(k).encode():
                cur = trans[cur, b]
            at = np.flatnonzero(cur != n)
            calls.append(np.stack([at, np.full(len(at), k + 1), cur[at]], axis=1).astype(np.int32))
    call = np.concatenate(calls)
    src, dst = single_steps(trans, single, symbols)
    # reachability to acceptance counts a call as one step; the weights come in _bounds
    steps = bfs(np.concatenate([dst, call[:, 2]]), np.concatenate([src, call[:, 0]]), np.flatnonzero(final), n)
    live = np.append(steps < UNREACHABLE, False)
    trans = np.where(live[trans], trans, n).astype(np.int32)
    call = call[live[call[:, 0]] & live[call[:, 2]]]
    s2, _, d2, _ = token_edges(shortest_path_table(trans, steps), trie, NO_EDGE_LIMIT)
    return trans, final, call, (np.concatenate([src, s2]), np.concatenate([dst, d2])), loops


def _weighted_bound(src: np.ndarray, dst: np.ndarray, calls: np.ndarray, weights: np.ndarray, final: np.ndarray
                    ) -> np.ndarray:
    """Fewest tokens to acceptance along token edges and calls, a call weighing its callee's bound
    (written as a chain of that many steps through extra nodes, so a plain BFS counts it)."""
    n = len(final)
    w = weights[calls[:, 1]] if len(calls) else np.zeros(0, dtype=np.int64)
    ok = w < UNREACHABLE
    c, w = calls[ok], np.maximum(w[ok], 1)
    if len(c):
        e = np.repeat(np.arange(len(c)), w)
        j = np.arange(int(w.sum())) - np.repeat(np.cumsum(w) - w, w)
        base = n + np.repeat(np.cumsum(w - 1) - (w - 1), w)
        a = np.where(j == 0, c[e, 0], base + j - 1)
        b = np.where(j == w[e] - 1, c[e, 2], base + j)
        src, dst = np.concatenate([src, a]), np.concatenate([dst, b])
        total = n + int((w - 1).sum())
    else:
        total = n
    return bfs(dst.astype(np.int64), src.astype(np.int64), np.flatnonzero(final), total)[:n]


class LinkedAutomaton:
    """The parts of a linked schema and matching over them; states are tuples of configurations."""

    def __init__(self, arrays: dict[str, np.ndarray], vocab: Vocab, key: str) -> None:
        count = int(arrays["parts"])
        self.trans = [arrays[f"trans{i}"] for i in range(count)]
        self.final = [arrays[f"final{i}"] for i in range(count)]
        self.bound = [arrays[f"bound{i}"] for i in range(count)]
        self.calls: list[dict[int, list[tuple[int, int]]]] = []
        self.boundary = []
        for i in range(count):
            at: dict[int, list[tuple[int, int]]] = {}
            for u, k, v in arrays[f"calls{i}"].tolist():
                at.setdefault(u, []).append((k, v))
            self.calls.append(at)
            edge = np.append(self.final[i], False)
            edge[list(at)] = True
            self.boundary.append(edge)
        self.loops: list[dict[int, counters.Loop]] = []
        self.counted: list[counters.Tables | None] = []
        for i in range(count):
            found = arrays.get(f"loops{i}", np.zeros((0, 2), dtype=np.int64)).tolist()
            loops = {s: counters.loop(self.trans[i], s, limit) for s, limit in found}
            self.loops.append(loops)
            self.counted.append(counters.tables(self.trans[i], loops) if loops else None)
        self.vocab = vocab
        self.key = key
        self._check_left_recursion()

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes + f.nbytes + b.nbytes for t, f, b in zip(self.trans, self.final, self.bound))

    @property
    def num_states(self) -> int:
        return sum(len(f) for f in self.final)

    @property
    def min_tokens(self) -> int:
        return int(self.bound[0][0])

    def fits(self, budget: int) -> bool:
        return self.min_tokens <= budget

    def _check_left_recursion(self) -> None:
        """A definition that calls itself before reading a byte would nest without end."""
        for start in range(len(self.trans)):
            todo, seen = [start], set()
            while todo:
                for k, _ in self.calls[todo.pop()].get(0, ()):
                    if k == start:
                        raise CompileError(f"linked definition {start} refers to itself before any character")
                    if k not in seen:
                        seen.add(k)
                        todo.append(k)

    # --- configurations -------------------------------------------------------------------

    def stack_cost(self, stack: tuple) -> int:
        if not stack:
            return 0
        c = STACK_COSTS.get((self.key, stack))
        if c is None:
            p, v = stack[-1]
            c = STACK_COSTS.put((self.key, stack), self.stack_cost(stack[:-1]) + int(self.bound[p][v]))
        return c

    def cost(self, c: Config) -> int:
        return int(self.bound[c[1]][_state(c[2])]) + self.stack_cost(c[0])

    def costs(self, c: Config, states: np.ndarray) -> np.ndarray:
        """``cost`` of the configurations ``c``'s stack and part make with each of ``states``."""
        return self.bound[c[1]][states].astype(np.int64) + self.stack_cost(c[0])

    def closure(self, c: Config) -> tuple:
        """``c`` and the configurations it reaches without a byte: calls and returns."""
        got = CLOSURES.get((self.key, c))
        if got is not None:
            return got
        out, seen, i = [c], {c}, 0
        closed: list = []  # configurations of returns' closures, whose own reach is in them
        depth = len(c[0])
        while i < len(out):
            stack, p, s = out[i]
            i += 1
            nxt = []
            if len(stack) < MAX_STACK:
                nxt += [(stack + ((p, v),), k, 0) for k, v in self.calls[p].get(s, ())]
            if stack and self.final[p][_state(s)]:
                back = (stack[:-1], *stack[-1])
                if len(stack) <= depth:
                    # a return below c's own stack: its closure (kept) is what every final state
                    # returning there shares, taken whole rather than walked again
                    whole = [x for x in self.closure(back) if x not in seen]
                    seen.update(whole)
                    closed += whole
                else:
                    nxt.append(back)
            for x in nxt:
                if x not in seen:
                    seen.add(x)
                    out.append(x)
        return CLOSURES.put((self.key, c), tuple(out + closed))

    @property
    def initial_state(self) -> tuple:
        return match_state(self.closure(((), 0, 0)))

    def step(self, state: tuple, text: bytes, left: int) -> tuple | None:
        """The state after the bytes ``text``, keeping configurations that finish within ``left``."""
        key = (self.key, state, text)
        got = STEPS.get(key)
        if got is None:
            got = STEPS.put(key, self._step(state, text))
        nxt, top = got
        if nxt is None or left >= top:
            return nxt
        out = tuple(c for c in nxt if self.cost(c) <= max(left, 0))
        return out or None

    def _step(self, state: tuple, text: bytes) -> tuple[tuple | None, int]:
        """Every configuration after ``text`` (sorted) and the largest cost among them."""
        cur = set(state)
        for b in text:
            nxt = set()
            for stack, p, s in cur:
                loops = self.loops[p]
                if loops:
                    s, count = s if isinstance(s, tuple) else (s, 0)
                    t, count = counters.step(self.trans[p], loops, s, count, bytes((b,)))
                    if t < 0:
                        continue
                    to = (t, count) if count and counters.current_loop(loops, t) else t
                else:
                    t = to = int(self.trans[p][s, b])
                    if t == len(self.final[p]):
                        continue
                nxt.update(self.closure((stack, p, t)) if self.boundary[p][t] else ((stack, p, to),))
            if not nxt:
                return None, 0
            cur = nxt
        return match_state(cur), max(map(self.cost, cur))

    def is_final(self, state: tuple) -> bool:
        return any(not stack and self.final[p][_state(s)] for stack, p, s in state)

    def is_complete(self, state: tuple) -> bool:
        return self.is_final(state) and all(e[0] is None and len(e[1]) == 0 for e in map(self.edges, state))

    # --- tokens ---------------------------------------------------------------------------

    def edges(self, c: Config) -> tuple[Block | None, np.ndarray, np.ndarray, int]:
        """The tokens ``c`` may read: its class block (None when it has none, or when some block
        token leads nowhere within reach: then its tokens are listed), the other tokens each with
        the cost of the configuration it ends in, and the largest cost of all (-1 for none):
        budgets at or above it allow every token."""
        stack, p, s = c
        if isinstance(s, tuple):  # inside a counted loop: the state's own tokens, less those past its limit
            own = self.edges((stack, p, s[0]))
            if not self._near(p, *s):
                return own
            return EDGES.get_or_build((self.key, c), lambda: self._fitting(c, own))

        def build():
            toks: list = []
            costs: list = []
            block = self._read(c, self._walk(c[1], c[2]), toks, costs)
            cap = -1
            if block is not None:
                b = block.target_bounds(self.bound[c[1]])
                if (b < UNREACHABLE).all():
                    cap = int(b.max(initial=-1)) + self.stack_cost(c[0])
                else:
                    ids, to = block.tokens()
                    toks.append(ids)
                    costs.append(self.costs(c, to))
                    block = None
            if not toks:
                return block, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64), cap
            tok, cost = np.concatenate(toks), np.concatenate(costs)
            live = cost < UNREACHABLE
            if not live.all():
                tok, cost = tok[live], cost[live]
            return block, tok, cost, max(cap, int(cost.max(initial=-1)))
        return EDGES.get_or_build((self.key, c), build)

    def _near(self, p: int, s: int, count: int) -> bool:
        """A token from ``s`` with ``count`` characters so far may pass its loop's limit."""
        t = self.counted[p]
        k = t.inside[s]
        return k >= 0 and t.limits[k] - count < self.vocab.longest

    def _fitting(self, c: Config, own: tuple) -> tuple:
        """``edges`` of ``c`` (a counted configuration) from its state's own, ``own``: the tokens
        that keep the count within its limit, listed."""
        _, p, (s, count) = c
        block, toks, costs, _ = own
        if block is not None:
            ids, to = block.tokens()
            toks, costs = np.concatenate([ids, toks]), np.concatenate([self.costs(c, to), costs])
        ok = counters.fits(self.trans[p], self.loops[p], self.counted[p], s, count, self.vocab, toks)
        toks, costs = toks[ok], costs[ok]
        return None, toks, costs, int(costs.max(initial=-1))

    def _read(self, c: Config, walked: tuple, toks: list, costs: list) -> Block | None:
        """Collect the tokens of one walk from ``c`` and follow every boundary it stood on into the
        configurations entered there (the rest of the token read from that trie node on); returns
        the walk's class block, whose tokens are not collected."""
        stack, p, _ = c
        block, tok, dst, hit_node, hit_state = walked
        if len(tok):
            toks.append(tok)
            costs.append(self.costs(c, dst))
        if len(hit_node):
            # every token standing on a boundary walks on together with the others entering the
            # same configuration: a number's final states all return to one caller state, and
            # walking on from each of them alone read a call site's rest once per final state
            groups = _grouped(hit_node, hit_state)
            entered: dict[Config, list[int]] = {}
            for i, (u, _) in enumerate(groups):
                for e in self.closure((stack, p, u))[1:]:
                    entered.setdefault(e, []).append(i)
            trie = vocabulary_trie(self.vocab)
            merged: dict[tuple, np.ndarray] = {}  # the configurations a return enters share their nodes
            for e, which in entered.items():
                key = tuple(which)
                nodes = merged.get(key)
                if nodes is None:
                    nodes = merged[key] = groups[which[0]][1] if len(which) == 1 else \
                        sorted_unique(np.concatenate([groups[i][1] for i in which]))
                self._read(e, self._descend(e[1], e[2], nodes, trie), toks, costs)
        return block

    def _descend(self, p: int, s: int, nodes: np.ndarray, trie) -> tuple:
        """The rest of the tokens standing on trie ``nodes`` read in part ``p`` from state ``s``, as
        ``_walk`` gives them (no class block). Many configurations enter the same part state with
        the same nodes (every stack that returns there), so the walk is kept."""
        return WALKS.get_or_build((self.key, p, s, nodes.tobytes()), lambda: (None,) + descend(
            self.trans[p], trie, nodes, s, self.boundary[p]))

    def _walk(self, p: int, s: int) -> tuple:
        """Part ``p``'s tokens from state ``s``: (class block or None, tokens, next states, boundary
        nodes, their states)."""
        return WALKS.get_or_build((self.key, p, s), lambda: token_row_hits(
            self.trans[p], vocabulary_trie(self.vocab), s, self.boundary[p]))

    def allowed(self, state: tuple, budget: int) -> np.ndarray:
        """Token ids whose next state can still finish within ``budget`` tokens after them (a
        token may appear twice when two configurations read it)."""
        parts = []
        for c in state:
            block, toks, costs, cap = self.edges(c)
            if block is not None:
                ids, to = block.tokens()
                parts.append(ids if budget >= cap else ids[self.costs(c, to) <= budget])
            parts.append(toks if budget >= cap else toks[costs <= budget])
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def allowed_bits(self, state: tuple, budget: int, width: int) -> np.ndarray | None:
        """The allowed tokens below ``width`` as bools when ``budget`` allows every token and some
        configuration has a class block (looked up by cell, not listed); else None."""
        edges = [self.edges(c) for c in state]
        if all(e[0] is None for e in edges) or any(budget < e[3] for e in edges):
            return None
        bits = None  # the first block's bools, a fresh array: the others are added to it
        for block, _, _, _ in edges:
            if block is not None:
                if bits is None:
                    bits = block.bits(width)
                else:
                    bits |= block.bits(width)
        for _, toks, _, _ in edges:
            bits[toks[toks < width]] = True
        return bits

    def banned(self, state: tuple, budget: int, width: int) -> np.ndarray | None:
        """The tokens below ``width`` no configuration allows (sorted int32), when ``budget`` allows
        every token and each class block is full and leaves few out (what all blocks leave out,
        less every other token); else None."""
        edges = [self.edges(c) for c in state]
        if any(budget < e[3] for e in edges):
            return None
        outs = [e[0].banned(width) for e in edges if e[0] is not None]
        if not outs or any(o is None for o in outs):
            return None
        out = outs[0]
        for o in outs[1:]:
            out = np.intersect1d(out, o, assume_unique=True)
        for _, toks, _, _ in edges:
            out = less(out, toks)
        return out

    def cap(self, state: tuple) -> int:
        """The largest budget that can still change this state's mask."""
        return max([0] + [self.edges(c)[3] for c in state])

    # TokenAutomaton's protocol, as a tool call's pieces use it (token ids in, -1 for refused).

    def bound_of(self, state: tuple) -> int:
        return min(map(self.cost, state))

    def has_tokens(self, state: tuple) -> bool:
        return any(e[0] is not None or len(e[1]) for e in map(self.edges, state))

    def next_state(self, state: tuple, token: int) -> tuple | int:
        """The state after ``token`` (no configuration dropped for the budget), or -1."""
        text = self.vocab.token_text(token)
        nxt = self.step(state, text, UNREACHABLE) if text else None
        return -1 if nxt is None else nxt

    def successors_within(self, state: tuple, budget: int) -> np.ndarray:
        return self.allowed(state, budget)

    def target_cap(self, state: tuple) -> int:
        return self.cap(state)
