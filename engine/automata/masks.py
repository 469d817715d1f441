"""Masks, built once per content and shared by every grammar, in one of three forms (``apply_mask``
applies each, ``allowed_bools`` reads each): where under a quarter of the row is allowed, the
allowed ids (uint32), written into a row of -inf; where under a quarter is banned (a string's
characters), the banned ids (int32), set to -inf in the logits; else an additive float32 row (0
allowed, -inf banned).

A dense row is 148 fresh memory pages (~0.5 ms of page faults in a fresh process) the first time a
set is masked; an id list is a few. Applying few ids (under a 32nd of the row allowed, a 16th
banned) costs about what the add does (65-80 us a step here), a quarter of the row's ids ~50 us
more. So a set between the two is listed first and made a row at its UPGRADE_AFTER-th use: a
state seen once (a counted pattern's positions) never pays the row, and a set used often pays
the row once, after at most UPGRADE_AFTER - 1 slower applies (~0.35 ms in all). Not float16: that
would halve a row's pages, but on the CPU backend adding a float16 row to float32 logits costs
~0.3 ms a step (the conversion), 3x the add itself."""

from __future__ import annotations

import hashlib
import itertools
import threading
from typing import Callable, Hashable

import mlx.core as mx
import numpy as np

from ..caches import Cache
from ..vocabulary import Vocab
from .automaton import FEW_ALLOWED, FEW_BANNED, TokenAutomaton, less, sorted_unique

MASKS = Cache("masks", 512 << 20, lambda m: m.nbytes)  # by content digest, bounded by bytes
# (owner, state, capped budget, width) -> mask digest, and ("cap", owner, state) -> the state's cap
STATE_MASKS = Cache("state masks", 1 << 20)
_OWNERS = itertools.count()
LISTED = 4  # a set with under 1/LISTED of the row allowed (or banned) is listed...
UPGRADE_AFTER = 8  # ...and made a dense row at this use unless it is few (FEW_ALLOWED, FEW_BANNED)
USES = Cache("mask uses", 1 << 16)  # by digest of a listed set that is not few: [times used]


def new_owner() -> int:
    """A number naming one grammar in STATE_MASKS (an id() could be reused after the grammar is gone)."""
    return next(_OWNERS)


def state_mask(owner: int, state: Hashable, budget: int, width: int, cap: Callable[[], int],
               build: Callable[[int], tuple[bytes, mx.array]]) -> mx.array:
    """``owner``'s mask in ``state`` with ``budget`` tokens after this one. Budgets at or above the
    state's ``cap()`` (asked once per state) all give one mask, so the budget is capped there; a
    miss calls ``build(capped budget)`` -> (digest, mask) and remembers the digest."""
    c = STATE_MASKS.get(("cap", owner, state))
    if c is None:
        c = STATE_MASKS.put(("cap", owner, state), cap())
    budget = min(budget, c)
    key = (owner, state, budget, width)
    digest = STATE_MASKS.get(key)
    m = MASKS.get(digest) if digest is not None else None
    if m is None:
        digest, m = build(budget)
        STATE_MASKS.put(key, digest)
        return m
    return used(digest, m, width)


def used(digest: bytes, m: mx.array, width: int) -> mx.array:
    """The mask ``m`` (under ``digest``) used once more: a listed set that is not few becomes its
    dense row, in the cache too, at its UPGRADE_AFTER-th use."""
    if m.dtype == mx.float32 or m.size * (FEW_ALLOWED if m.dtype == mx.uint32 else FEW_BANNED) < width:
        return m
    uses = USES.get_or_build(digest, lambda: [0])
    uses[0] += 1  # two threads may both count one use: the row comes a use early
    if uses[0] < UPGRADE_AFTER:
        return m
    return MASKS.replace(digest, mx.array(_additive(allowed_bools(m, width))))


def apply_mask(logits: mx.array, mask: mx.array) -> mx.array:
    """``logits`` with every token ``mask`` bans at -inf: the allowed ones keep their values."""
    if mask.dtype == mx.float32:
        return logits + mask
    if mask.dtype == mx.int32 and mask.size == 0:
        return logits  # nothing banned
    ids = mask.reshape((1,) * (logits.ndim - 1) + (-1,))
    if logits.ndim > 1 and logits.shape[0] > 1:
        ids = mx.broadcast_to(ids, (*logits.shape[:-1], mask.size))
    if mask.dtype == mx.int32:
        return mx.put_along_axis(logits, ids, mx.array(-np.inf, dtype=logits.dtype), -1)
    none = MASKS.get_or_build(("-inf row", logits.shape, logits.dtype), lambda: _evaluated(
        mx.full(logits.shape, -np.inf, dtype=logits.dtype)))  # filled once, not every step
    return mx.put_along_axis(none, ids, mx.take_along_axis(logits, ids, -1), -1)


def _evaluated(a: mx.array) -> mx.array:
    mx.eval(a)
    return a


def allowed_bools(mask: mx.array, width: int) -> np.ndarray:
    """The tokens ``mask`` allows, one bool per logit."""
    if mask.dtype == mx.float32:
        return np.array(mask).reshape(-1) == 0
    banned = mask.dtype == mx.int32
    allowed = np.full(width, banned)
    allowed[np.array(mask)] = not banned
    return allowed


def shared_mask(ids: np.ndarray, width: int) -> tuple[bytes, mx.array]:
    """The mask allowing ``ids`` (repeats allowed), built once per content: (its digest, the mask).
    The digest is of the set: its sorted ids when under 1/LISTED of the row (the mask is then
    those ids), its sorted banned ids when those are (the mask is those), else its bits (an
    eighth of a wide row's ids)."""
    if len(ids) * FEW_ALLOWED < width:  # few: sorted faster than set in a row and read back
        return _listed(sorted_unique(ids).astype(np.uint32), width)
    allowed = np.zeros(width, dtype=bool)
    allowed[ids] = True
    return bits_mask(allowed)


def bits_mask(allowed: np.ndarray) -> tuple[bytes, mx.array]:
    """``shared_mask`` of the tokens given as bools, one per logit (the same digest for the same
    set); ``allowed`` may be changed (a fresh row of bools is 37 fresh pages in a new process)."""
    width, count = len(allowed), int(np.count_nonzero(allowed))
    if count * LISTED < width:
        return _listed(np.flatnonzero(allowed).astype(np.uint32), width)
    if (width - count) * LISTED < width:
        return banned_mask(np.flatnonzero(np.logical_not(allowed, out=allowed)).astype(np.int32), width)
    digest = _digest(b"b", np.packbits(allowed), width)
    return digest, MASKS.get_or_build(digest, lambda: mx.array(_additive(allowed)))


def _listed(unique: np.ndarray, width: int) -> tuple[bytes, mx.array]:
    """The mask allowing ``unique`` (sorted distinct uint32 ids): (its digest, the mask)."""
    digest = _digest(b"i", unique, width)
    return digest, MASKS.get_or_build(digest, lambda: mx.array(unique))


def banned_mask(banned: np.ndarray, width: int) -> tuple[bytes, mx.array]:
    """The mask banning ``banned`` (sorted distinct int32 ids, under 1/LISTED of the row) and
    allowing the rest, built once per content: (its digest, the mask)."""
    digest = _digest(b"x", banned, width)
    return digest, MASKS.get_or_build(digest, lambda: mx.array(banned))


def _digest(form: bytes, content: np.ndarray, width: int) -> bytes:
    """A mask's digest: its form, its content's bytes and the row's width. SHA-256 (OpenSSL's,
    with the CPU's SHA instructions) hashes a listed set's ids 2.6x as fast as blake2b here, and
    a set of 30,000 ids is 120 KB; the contents are hashed in place, not joined into a copy."""
    h = hashlib.sha256(form)
    h.update(np.ascontiguousarray(content))
    h.update(width.to_bytes(4, "little"))
    return h.digest()[:16]


def _additive(allowed: np.ndarray) -> np.ndarray:
    """The float32 row of 0 where allowed, -inf elsewhere, built as bits: an allowed byte 1 less
    one is 0 (0.0), a banned 0 less one is all ones, masked to -inf's bits (0xFF800000). Two
    integer passes over one fresh row, about 3x the speed of log(1)/log(0) and 5-10x np.where's."""
    m = allowed.view(np.uint8).astype(np.uint32)
    m -= 1
    m &= 0xFF800000
    return m.view(np.float32)


def allowed_mask(ids: np.ndarray, final: bool, vocab: Vocab, width: int) -> tuple[bytes, mx.array]:
    """The shared mask allowing ``ids`` below ``width``, and end-of-sequence when ``final`` (or
    when nothing else is allowed, so a generation past its end can only stop): (digest, mask)."""
    ids = ids[ids < width]
    if final:
        ids = np.concatenate([ids, np.asarray([i for i in vocab.eos_ids if i < width], dtype=np.int32)])
    return shared_mask(ids if len(ids) else np.asarray(vocab.eos_ids[:1], dtype=np.int32), width)


def allowed_bits_mask(bits: np.ndarray, final: bool, vocab: Vocab) -> tuple[bytes, mx.array]:
    """``allowed_mask`` of the tokens given as bools, one per logit (``bits`` is changed)."""
    if final:
        bits[[i for i in vocab.eos_ids if i < len(bits)]] = True
    return bits_mask(bits)


def banned_final_mask(banned: np.ndarray, final: bool, vocab: Vocab, width: int) -> tuple[bytes, mx.array]:
    """``banned_mask``, end-of-sequence allowed too when ``final``: (digest, mask)."""
    if final:
        banned = less(banned, np.asarray(vocab.eos_ids, dtype=np.int64))
    return banned_mask(banned, width)


def block_mask(a, state, budget: int, final: bool, vocab: Vocab, width: int) -> tuple[bytes, mx.array] | None:
    """``state``'s mask (``budget`` tokens after this one) in the cheapest form automaton ``a`` has
    without listing its tokens: few banned ids (no pass over the row), else its bools; None when
    it has neither (its tokens are then listed): (digest, mask)."""
    if budget < 0:
        return None
    banned = a.banned(state, budget, width)
    if banned is not None:
        return banned_final_mask(banned, final, vocab, width)
    bits = a.allowed_bits(state, budget, width)
    return None if bits is None else allowed_bits_mask(bits, final, vocab)


def eos_mask(vocab: Vocab, width: int) -> mx.array:
    """The mask that allows only the vocabulary's first end-of-sequence token below ``width``."""
    return MASKS.get_or_build((vocab.fingerprint, "eos", width), lambda: mx.array(
        np.asarray([i for i in vocab.eos_ids if i < width][:1], dtype=np.uint32)))


class MaskTable:
    """Shared masks per (state, budget cap)."""

    def __init__(self, automaton: TokenAutomaton, vocab: Vocab, width: int):
        self.a = automaton
        self.vocab = vocab
        self.width = width
        self.by_key: dict[tuple[int, int], bytes] = {}
        self.lock = threading.Lock()
        eos = [i for i in vocab.eos_ids if i < width]
        self.eos = np.asarray(eos, dtype=np.int64)

    @property
    def eos_only(self) -> mx.array:
        """The end-of-sequence mask, built when a state first needs it (most grammars' first masks do not)."""
        return eos_mask(self.vocab, self.width)

    def allowed(self, state: int, left: int) -> np.ndarray:
        """Token ids allowed in ``state`` with ``left`` tokens still to generate (this one included)."""
        ids = self.a.successors_within(state, left - 1) if left > 0 else self.eos[:0]
        ids = ids[ids < self.width]
        if self.a.final[state]:
            ids = np.concatenate([ids, self.eos])
        return ids

    def mask(self, state: int, left: int) -> mx.array:
        key = (state, min(left - 1, self.a.target_cap(state)))
        digest = self.by_key.get(key)
        m = MASKS.get(digest) if digest is not None else None
        if m is not None:
            return used(digest, m, self.width)
        got = block_mask(self.a, state, left - 1, bool(self.a.final[state]), self.vocab, self.width)
        if got is not None:
            digest, m = got
        else:
            ids = self.allowed(state, left)
            if len(ids) == 0:
                return self.eos_only
            digest, m = shared_mask(ids, self.width)
        with self.lock:
            self.by_key[key] = digest
        return m
