"""regex -> token automaton, compiled once: from memory, from disk, or built in a builder process."""

from __future__ import annotations

import hashlib
import os
import threading

import numpy as np

from ..caches import Cache
from ..errors import CompileError
from ..vocabulary import Vocab
from . import store
from .automaton import Automaton
from .builders import DEFAULT_BUILD_MEMORY, DEFAULT_TIMEOUT, build_bounded
from .index import DEFAULT_MAX_EDGES, build
from .lazy import LazyAutomaton, lazy_tables
from .linked import LinkedAutomaton, link_tables

MAX_REGEX_CHARS = 2_000_000
AUTOMATA = Cache("automata", 1 << 30, lambda a: a.nbytes)  # by key, bounded by bytes
_KEY_LOCKS: dict[str, threading.Lock] = {}  # one build per key at a time; entries live during a build
_KEY_LOCKS_GUARD = threading.Lock()


def automaton_key(regex: str, vocab: Vocab, macro: tuple[str, int] | None = None, lazy: bool = False) -> str:
    kind = "lazy" if lazy else "automaton"
    h = hashlib.sha256(f"{store.FORMAT_VERSION}\0{kind}\0{vocab.fingerprint}\0{macro}\0{regex}".encode())
    return h.hexdigest()[:32]


def check_regex_size(regex: str) -> None:
    """The size bound compile_regex applies, for callers that compile later (lazy tool arguments)."""
    if len(regex) > MAX_REGEX_CHARS:
        raise CompileError(f"regex of {len(regex)} characters exceeds the {MAX_REGEX_CHARS} limit")


def compile_regex(regex: str, vocab: Vocab, *, timeout: float | None = DEFAULT_TIMEOUT,
                  max_transitions: int = DEFAULT_MAX_EDGES, max_memory: int = DEFAULT_BUILD_MEMORY,
                  macro: tuple[str, int] | None = None, lazy: bool = False) -> Automaton | LazyAutomaton:
    """The token automaton for ``regex``: from memory, from disk, or built.

    ``lazy=True`` gives a LazyAutomaton (the byte DFA; each state's tokens found on its first
    visit), otherwise every state's tokens are materialised up front. A build runs in a builder
    process bounded by ``timeout`` seconds and ``max_memory`` bytes (``timeout=None`` builds in
    this process, bounded only by ``max_transitions``); exceeding a bound raises CompileError.
    ``macro`` (character, id) lets the regex use one extra pseudo-token (see tools.turn).
    """
    check_regex_size(regex)

    def make(arrays):
        if lazy:
            return LazyAutomaton(arrays["trans"], arrays["final"], arrays["bound"], vocab, key, macro)
        return Automaton(arrays["offsets"], arrays["tokens"], arrays["targets"], arrays["final"], arrays["dist"], key)
    key = automaton_key(regex, vocab, macro, lazy)
    return _cached(key, lambda: _build(regex, vocab, key, macro, lazy, max_transitions, timeout, max_memory), make)


def _cached(key: str, build, make):
    """The automaton under ``key``: from memory, from disk, or ``make(build())`` (then stored)."""
    found = AUTOMATA.get(key)
    if found is not None:
        return found
    with _KEY_LOCKS_GUARD:
        lock = _KEY_LOCKS.setdefault(key, threading.Lock())
    with lock:  # one build per key even when many threads ask at once
        found = AUTOMATA.get(key)
        if found is not None:
            return found
        folder = store.cache_dir()
        path = folder / f"{key}.npz" if folder else None
        arrays = store.load(path, key) if path else None
        if arrays is not None:
            try:
                os.utime(path)  # recently used: pruned last
            except OSError:
                pass
        else:
            arrays = build()
            if path:
                store.save_later(path, key, arrays)
        a = AUTOMATA.put(key, make(arrays))
    with _KEY_LOCKS_GUARD:
        _KEY_LOCKS.pop(key, None)
    return a


def compile_linked(regexes: list[str], vocab: Vocab, *, timeout: float | None = DEFAULT_TIMEOUT,
                   max_memory: int = DEFAULT_BUILD_MEMORY, limits: list[int] = ()) -> LinkedAutomaton:
    """The linked automaton of a root regex and its definitions (see automata.linked), ``limits``
    those of its counter markers: from memory, from disk, or built in a builder process as
    ``compile_regex`` does."""
    for r in regexes:
        check_regex_size(r)
    h = hashlib.sha256(f"{store.FORMAT_VERSION}\0linked\0{vocab.fingerprint}\0{list(limits)}".encode())
    for r in regexes:
        h.update(b"\0" + r.encode())
    key = h.hexdigest()[:32]

    def build():
        if timeout is not None:
            return build_bounded("linked", (list(regexes), list(limits)), vocab, key, None, 0, timeout, max_memory)
        return link_tables(list(regexes), vocab, list(limits))
    return _cached(key, build, lambda arrays: LinkedAutomaton(arrays, vocab, key))


def _build(regex, vocab, key, macro, lazy, max_transitions, timeout, max_memory) -> dict[str, np.ndarray]:
    kind = "lazy" if lazy else "automaton"
    if timeout is not None:
        value = build_bounded(kind, regex, vocab, key, macro, max_transitions, timeout, max_memory)
    elif lazy:
        value = lazy_tables(regex, vocab, macro)
    else:
        a = build(regex, vocab, key, macro, max_transitions)
        value = (a.offsets, a.tokens, a.targets, a.final, a.dist)
    names = ("trans", "final", "bound") if lazy else ("offsets", "tokens", "targets", "final", "dist")
    return dict(zip(names, value))
