"""The automata of a tool list's call pieces: literals built directly, arguments compiled (lazily;
linked where their translation links definitions).

Also what joins them: tokens that finish a literal piece and run on into the next piece
(``": {"`` as one token), and each piece's fewest tokens to the end of its call.
"""

from __future__ import annotations

import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from tqdm import tqdm

from ..automata import UNREACHABLE, Automaton, LinkedAutomaton, TokenAutomaton, compile_linked, compile_regex, distances
from ..automata.index import tokens_extending
from ..caches import Cache
from ..errors import CompileError
from ..vocabulary import Vocab
from .calls import INDEX_MARK, CallSpec

PROGRESS_FROM = 20  # argument pieces; fewer compile in well under a second
LITERALS = Cache("literal automata", 64 << 20, lambda a: a.nbytes)
FIRST_BYTES = Cache("first bytes", 4096)  # by automaton key: first bytes of the initial state's tokens


def literal_automaton(text: str, vocab: Vocab) -> Automaton:
    """The automaton of one fixed string (special tokens as their symbols), built directly."""
    return LITERALS.get_or_build(("literal", vocab.fingerprint, text), lambda: _literal(text, vocab))


def _literal(text: str, vocab: Vocab) -> Automaton:
    data = text.encode()
    table = vocab.outlines_map
    longest = vocab.longest
    n = len(data)
    edges: list[list[tuple[int, int]]] = [[] for _ in range(n + 1)]
    for i in range(n):
        for j in range(i + 1, min(n, i + longest) + 1):
            for t in table.get(data[i:j], ()):
                edges[i].append((t, j))
    reach, stack = {0}, [0]
    while stack:
        for _, j in edges[stack.pop()]:
            if j not in reach:
                reach.add(j)
                stack.append(j)
    order = sorted(reach)
    dense = {s: k for k, s in enumerate(order)}
    counts = np.zeros(len(order) + 1, dtype=np.int64)
    toks, tgts = [], []
    for k, s in enumerate(order):
        row = sorted(edges[s])
        toks += [t for t, _ in row]
        tgts += [dense[j] for _, j in row]
        counts[k + 1] = len(row)
    offsets = np.cumsum(counts)
    tokens = np.asarray(toks, dtype=np.int32)
    targets = np.asarray(tgts, dtype=np.int32)
    final = np.array([s == n for s in order], dtype=bool)
    dist = distances(offsets, targets, final)
    if dist[0] >= UNREACHABLE:
        raise CompileError(f"the vocabulary cannot spell {text!r}")
    return Automaton(offsets, tokens, targets, final, dist, "literal", positions=np.asarray(order, dtype=np.int64))


def _prefixed(vocab: Vocab, prefix: bytes) -> list[tuple[bytes, int]]:
    """Ordinary tokens longer than ``prefix`` that start with it (found in the vocabulary's trie:
    sorting 150k token strings took a process's first tool compile 0.4 s)."""
    return [(vocab.token_bytes[i], i) for i in sorted(tokens_extending(vocab, prefix).tolist())
            if vocab.token_bytes[i]]


def _first_bytes(a: TokenAutomaton | LinkedAutomaton, vocab: Vocab) -> set[int]:
    """The first bytes of the tokens allowed in ``a``'s initial state."""
    def build():
        toks = a.successors_within(a.initial_state, UNREACHABLE).tolist()
        return {vocab.token_bytes[t][0] for t in toks if t < len(vocab.token_bytes) and vocab.token_bytes[t]}
    return FIRST_BYTES.get_or_build(a.key, build)


class PieceStore:
    """Per tool list: each piece's automaton (argument pieces compiled on first use with ``lazy``)
    and the fewest tokens from each piece to the end of its call."""

    def __init__(self, vocab: Vocab, calls: list[CallSpec], *, lazy: bool, timeout: float | None) -> None:
        self.vocab = vocab
        self.calls = calls
        self.lazy = lazy
        self.timeout = timeout
        self._pieces: dict[tuple[int, int, int], TokenAutomaton | LinkedAutomaton] = {}
        self._rest: dict[tuple[int, int, int], int] = {}
        self._straddles: dict[tuple[int, int, int, int], tuple[np.ndarray, list, np.ndarray]] = {}
        self._lock = threading.Lock()

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in list(self._pieces.values()))

    def compile_all(self, workers: int) -> None:
        """Compile every argument piece now (``lazy=False``), ``workers`` at a time; a progress bar
        on stderr (a terminal only) when there are many."""
        jobs = [(ti, p) for ti, spec in enumerate(self.calls) for p, pc in enumerate(spec.pieces) if not pc.literal]
        bar = tqdm(total=len(jobs), desc="compiling tool arguments", unit="tool", file=sys.stderr,
                   disable=None if len(jobs) >= PROGRESS_FROM else True, leave=False)
        with bar, ThreadPoolExecutor(max(1, workers)) as ex:
            for _ in ex.map(lambda job: self.piece(job[0], job[1], 0), jobs):
                bar.update()

    def piece(self, ti: int, p: int, k: int) -> TokenAutomaton | LinkedAutomaton:
        """Tool ``ti``'s piece ``p`` in call number ``k``: literal pieces materialised, argument
        pieces lazy (or linked) automata compiled on first use (with ``lazy``) or up front."""
        spec = self.calls[ti].pieces[p]
        key = (ti, p, k if spec.indexed else 0)
        a = self._pieces.get(key)
        if a is None:
            if spec.literal:
                a = literal_automaton(spec.text.replace(INDEX_MARK, str(k)), self.vocab)
            else:
                try:
                    if spec.definitions:
                        a = compile_linked([spec.text, *spec.definitions], self.vocab, timeout=self.timeout)
                    else:
                        a = compile_regex(spec.text, self.vocab, timeout=self.timeout, lazy=True)
                except CompileError as e:
                    raise CompileError(f"tool {self.calls[ti].tool.name!r}: its arguments: {e}") from None
            with self._lock:
                self._pieces[key] = a
        return a

    def joins(self, ti: int, p: int) -> bool:
        return self.calls[ti].pieces[p].joins

    def last(self, ti: int, p: int) -> bool:
        return p + 1 >= len(self.calls[ti].pieces)

    def _min(self, ti: int, q: int, k: int) -> int:
        """Piece ``q``'s fewest tokens as counted from outside it. Lazily compiled grammars always
        count an argument piece by its bound, compiled or not, so what a request may do never
        depends on which tools earlier requests happened to call."""
        spec = self.calls[ti].pieces[q]
        if spec.literal:
            return self.piece(ti, q, k).min_tokens
        return spec.bound if self.lazy else self.piece(ti, q, 0).min_tokens

    def rest(self, ti: int, p: int, k: int) -> int:
        """Fewest tokens of the pieces after ``p`` of tool ``ti``'s call number ``k``."""
        key = (ti, p, k)
        r = self._rest.get(key)
        if r is None:
            r = self._rest[key] = sum(self._min(ti, q, k) for q in range(p + 1, len(self.calls[ti].pieces)))
        return r

    def call_min(self, ti: int, k: int = 0) -> int:
        """The fewest tokens of a whole call to tool ``ti``."""
        return self.rest(ti, -1, k)

    def straddle(self, ti: int, p: int, k: int, st: int) -> tuple[np.ndarray, list, np.ndarray]:
        """Tokens that finish literal piece ``p`` from state ``st`` and run on into piece p+1 (sorted),
        the state each reaches there and its bound (so the model can write e.g. ``": {"`` as one
        token)."""
        spec = self.calls[ti].pieces[p]
        key = (ti, p, k if spec.indexed else 0, st)
        got = self._straddles.get(key)
        if got is not None:
            return got
        data = spec.text.replace(INDEX_MARK, str(k)).encode()
        suffix = data[int(self.piece(ti, p, k).positions[st]):]
        toks, tgts, bounds = [], [], []
        candidates = _prefixed(self.vocab, suffix) if suffix else []
        if candidates:
            nxt = self.piece(ti, p + 1, k)
            first = _first_bytes(nxt, self.vocab)
            single = self.vocab.byte_tokens.tolist()
            for b, t in candidates:
                if b[len(suffix)] not in first:
                    continue
                s = nxt.initial_state
                for byte in b[len(suffix):]:
                    s = nxt.next_state(s, single[byte]) if single[byte] >= 0 else -1
                    if s == -1:
                        break
                if s != -1:
                    toks.append(t)
                    tgts.append(s)
                    bounds.append(nxt.bound_of(s))
        toks_a = np.asarray(toks, dtype=np.int32)
        order = np.argsort(toks_a, kind="stable")
        got = self._straddles[key] = (toks_a[order], [tgts[i] for i in order.tolist()],
                                      np.asarray(bounds, dtype=np.int64)[order])
        return got
