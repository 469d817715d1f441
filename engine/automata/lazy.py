"""A token automaton kept as its byte DFA: each state's tokens are found on its first visit.

Compiling is the regex's byte DFA plus one number per state, ``bound``: the fewest tokens to
acceptance along known token paths, the single-byte tokens (every byte but the symbols' lead
byte is a token in the vocabularies we read) and the whole tokens that spell the shortest byte
completions. It is an upper bound on the true token distance, and a consistent one: every live
state has a token to a state whose bound is one less. Masks allow a token when its next state's
bound fits the budget left, so an output that starts within budget always finishes within it.
The price is some slack at the edge: ``min_tokens`` is the initial state's bound, at least the
true minimum (the gap is measured in tests/test_lazy.py). A state's tokens come from walking
the vocabulary's trie from that state alone (index.token_row), cached by content. A state that
loops on a character class (a string's inside) or counts its characters (a bounded string) keeps
that class's tokens as a reference (index.Block), not as a vocabulary-wide list: its mask is one
lookup per token id in the block's small table, plus the tokens that leave the class.
"""

from __future__ import annotations

import numpy as np

from ..caches import Cache
from ..errors import CompileError
from ..vocabulary import Vocab
from .automaton import UNREACHABLE, TokenAutomaton, bfs, less
from .byte_dfa import byte_dfa
from .index import NO_EDGE_LIMIT, Block, token_edges, token_row, vocabulary_trie

# by (automaton key, state): (class block or None, walked tokens, their next states)
ROWS = Cache("token rows", 256 << 20, lambda r: r[1].nbytes + r[2].nbytes + (r[0].nbytes if r[0] else 0))
# the same with the block's tokens listed, for callers that want every token
LISTED_ROWS = Cache("listed token rows", 256 << 20, lambda r: r[0].nbytes + r[1].nbytes)


def lazy_tables(regex: str, vocab: Vocab, macro: tuple[str, int] | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The byte DFA with dead states cut out, and each state's ``bound``: (trans, final, bound)."""
    trans, final = byte_dfa(regex)
    n = len(final)
    symbols = [(ch.encode(), i) for i, ch in vocab.symbols.items()] + ([(macro[0].encode(), macro[1])] if macro else [])
    src, dst = single_steps(trans, np.flatnonzero(vocab.byte_tokens >= 0), symbols)
    steps = bfs(dst, src, np.flatnonzero(final), n)
    if steps[0] >= UNREACHABLE:
        raise CompileError("the regex accepts no string this vocabulary can produce")
    live = np.append(steps < UNREACHABLE, False)
    trans = np.where(live[trans], trans, n).astype(np.int32)
    # whole tokens along the shortest byte paths shorten the bound to about the true token count
    short = shortest_path_table(trans, steps)
    s2, _, d2, _ = token_edges(short, vocabulary_trie(vocab), NO_EDGE_LIMIT)
    bound = bfs(np.concatenate([dst, d2]), np.concatenate([src, s2]), np.flatnonzero(final), n)
    return trans, final, bound


SYMBOL_BLOCK = 4096  # states stepped through every symbol together (single_steps)


def single_steps(trans: np.ndarray, single_bytes: np.ndarray, symbols: list[tuple[bytes, int]]
                  ) -> tuple[np.ndarray, np.ndarray]:
    """The (state, next state) pairs one single-byte token or one whole symbol makes; a pair may
    repeat (breadth-first searches do not mind), but not within a run of bytes going alike."""
    n = trans.shape[0] - 1
    step = trans[:n][:, single_bytes]
    keep = step != n
    keep[:, 1:] &= step[:, 1:] != step[:, :-1]
    src, dst = [np.repeat(np.arange(n, dtype=np.int32), keep.sum(axis=1))], [step[keep]]
    # a symbol is read only from a state with a step on its lead byte (END's, for one, leaves
    # every final state): those states go through every symbol of a length at once, a block of
    # them at a time (some vocabularies have hundreds of symbols)
    by_length: dict[int, list[bytes]] = {}
    for text, _ in symbols:
        by_length.setdefault(len(text), []).append(text)
    for texts in by_length.values():
        spelled = np.frombuffer(b"".join(texts), dtype=np.uint8).reshape(len(texts), -1)
        leads = np.flatnonzero((trans[:n, np.unique(spelled[:, 0])] != n).any(axis=1)).astype(np.int32)
        for lo in range(0, len(leads), SYMBOL_BLOCK):
            at = leads[lo: lo + SYMBOL_BLOCK]
            cur = np.repeat(at[:, None], len(texts), axis=1)
            for b in spelled.T:
                cur = trans[cur, b]
            ok = cur != n
            src.append(at[np.nonzero(ok)[0]])
            dst.append(cur[ok])
    return np.concatenate(src), np.concatenate(dst)


SHORTCUTS = 3  # distinct next states per state whose shortest-path tokens are walked


def shortest_path_table(trans: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """The byte DFA cut down to one byte per (state, next state) on a shortest byte path to
    acceptance (a space where it is one, for long space tokens, else the lowest byte), for up to
    SHORTCUTS next states per state, so walking the trie through it finds the tokens that spell
    shortest completions without visiting the whole vocabulary."""
    n = trans.shape[0] - 1
    rows = trans[:n]
    good = np.append(steps, UNREACHABLE)[rows] == (steps - 1)[:, None]
    out = np.full_like(trans, n)
    idx = np.arange(n)
    for _ in range(SHORTCUTS):
        col = np.where(good[:, 0x20], 0x20, good.argmax(axis=1))
        has = good[idx, col]
        if not has.any():
            break
        target = np.where(has, rows[idx, col], -1)
        out[idx[has], col[has]] = target[has]
        good &= rows != target[:, None]  # that next state is taken
    return out


class LazyAutomaton(TokenAutomaton):
    """A token automaton over a byte DFA (state 0 initial); token rows are built per visited state."""

    def __init__(self, trans: np.ndarray, final: np.ndarray, bound: np.ndarray, vocab: Vocab, key: str,
                 macro: tuple[str, int] | None = None) -> None:
        self.trans = trans
        self.final = final
        self._bound = bound
        self.vocab = vocab
        self.key = key
        self._extra = ((macro[0].encode(), macro[1]),) if macro else ()
        self._macro_id = macro[1] if macro else None
        self._caps: dict[int, tuple[int, bool]] = {}  # state -> (target_cap, every target has a bound)

    @property
    def bound(self) -> np.ndarray:
        return self._bound

    @property
    def nbytes(self) -> int:
        return self.trans.nbytes + self.final.nbytes + self._bound.nbytes

    def parts(self, state: int) -> tuple[Block | None, np.ndarray, np.ndarray]:
        """``state``'s class block (or None) and its other tokens with their next states."""
        return ROWS.get_or_build((self.key, state),
                                 lambda: token_row(self.trans, vocabulary_trie(self.vocab), state, self._extra))

    def row(self, state: int) -> tuple[np.ndarray, np.ndarray]:
        """``state``'s tokens (unsorted) and the state each leads to, found on first use."""
        def build():
            block, tok, dst = self.parts(state)
            if block is None:
                return tok, dst
            ids, to = block.tokens()
            return np.concatenate([ids, tok]), np.concatenate([to, dst])
        return LISTED_ROWS.get_or_build((self.key, state), build)

    def _cap(self, state: int) -> tuple[int, bool]:
        got = self._caps.get(state)
        if got is None:
            block, _, dst = self.parts(state)
            b = self._bound[dst]
            if block is not None:
                b = np.concatenate([block.target_bounds(self._bound), b])
            finite = b < UNREACHABLE
            got = self._caps[state] = (int(b[finite].max(initial=-1)), bool(finite.all()))
        return got

    def is_complete(self, state: int) -> bool:
        block, tok, _ = self.parts(state)
        return bool(self.final[state]) and len(tok) == 0 and (block is None or not block.live.any())

    def _block_within(self, state: int, budget: int) -> tuple[Block, np.ndarray] | None:
        """``state``'s class block and other tokens, when it has a block and ``budget`` allows every
        token (so none needs its bound read); else None."""
        cap, finite = self._cap(state)
        block, tok, _ = self.parts(state)
        return None if block is None or not finite or budget < cap else (block, tok)

    def allowed_bits(self, state: int, budget: int, width: int) -> np.ndarray | None:
        """Every token of ``state`` below ``width`` as bools, when ``budget`` allows them all and
        the state has a class block (its tokens looked up by cell, never listed); else None."""
        found = self._block_within(state, budget)
        if found is None:
            return None
        block, tok = found
        bits = block.bits(width)
        bits[tok[tok < width]] = True
        return bits

    def banned(self, state: int, budget: int, width: int) -> np.ndarray | None:
        """The tokens below ``width`` the state bans, when ``budget`` allows all its tokens and its
        class block is full and leaves few out: the block's outside less the walked tokens."""
        found = self._block_within(state, budget)
        if found is None:
            return None
        block, tok = found
        out = block.banned(width)
        return None if out is None else less(out, tok)

    def target_cap(self, state: int) -> int:
        return self._cap(state)[0]

    def successors_within(self, state: int, budget: int) -> np.ndarray:
        cap, finite = self._cap(state)
        if finite and budget >= cap:  # the common case, without a pass over the row
            return self.row(state)[0]
        return super().successors_within(state, budget)

    def next_state(self, state: int, token: int) -> int:
        """The state after ``token``, or -1 when the token is not allowed."""
        if token == self._macro_id:
            text = self._extra[0][0]
        else:
            text = self.vocab.token_text(token)
            if not text:
                return -1
        dead = len(self.final)
        trans = self.trans
        for b in text:
            state = trans[state, b]
            if state == dead:
                return -1
        return int(state)
