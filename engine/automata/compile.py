"""regex -> token automaton, compiled once: from memory, from disk, or built in a builder process."""

from __future__ import annotations

import hashlib
import os
import threading

from ..caches import Cache
from ..errors import CompileError
from ..vocabulary import Vocab
from . import store
from .automaton import Automaton
from .builders import DEFAULT_BUILD_MEMORY, DEFAULT_TIMEOUT, build_bounded
from .index import DEFAULT_MAX_EDGES, build

MAX_REGEX_CHARS = 2_000_000
AUTOMATA = Cache("automata", 1 << 30, lambda a: a.nbytes)  # by key, bounded by bytes
_KEY_LOCKS: dict[str, threading.Lock] = {}  # one build per key at a time; entries live during a build
_KEY_LOCKS_GUARD = threading.Lock()


def automaton_key(regex: str, vocab: Vocab, macro: tuple[str, int] | None = None) -> str:
    h = hashlib.sha256(f"{store.FORMAT_VERSION}\0{vocab.fingerprint}\0{macro}\0{regex}".encode())
    return h.hexdigest()[:32]


def check_regex_size(regex: str) -> None:
    """The size bound compile_regex applies, for callers that compile later (lazy tool arguments)."""
    if len(regex) > MAX_REGEX_CHARS:
        raise CompileError(f"regex of {len(regex)} characters exceeds the {MAX_REGEX_CHARS} limit")


def compile_regex(regex: str, vocab: Vocab, *, timeout: float | None = DEFAULT_TIMEOUT,
                  max_transitions: int = DEFAULT_MAX_EDGES, max_memory: int = DEFAULT_BUILD_MEMORY,
                  macro: tuple[str, int] | None = None) -> Automaton:
    """The token automaton for ``regex``: from memory, from disk, or built.

    A build runs in a builder process bounded by ``timeout`` seconds and ``max_memory`` bytes
    (``timeout=None`` builds in this process, bounded only by ``max_transitions``); exceeding a
    bound raises CompileError. ``macro`` (character, id) lets the regex use one extra
    pseudo-token (see toolcalls).
    """
    check_regex_size(regex)
    key = automaton_key(regex, vocab, macro)
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
        a = store.load(path, key) if path else None
        if a is not None:
            try:
                os.utime(path)  # recently used: pruned last
            except OSError:
                pass
        else:
            a = (build(regex, vocab, key, macro, max_transitions) if timeout is None else
                 build_bounded(regex, vocab, key, macro, max_transitions, timeout, max_memory))
            if path:
                try:
                    store.save(path, a)
                    store.prune(path.parent, path)
                except OSError:
                    pass  # a read-only or full cache folder only costs a rebuild next time
        a = AUTOMATA.put(key, a)
    with _KEY_LOCKS_GUARD:
        _KEY_LOCKS.pop(key, None)
    return a
