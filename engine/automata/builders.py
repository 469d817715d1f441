"""Builder processes: each automaton build runs in a forked child bounded in time and memory.

A build that overruns is stopped by killing its builder, which leaves the caller's process
untouched; the next build forks a new one. Idle builders are kept for reuse (fork shares the
vocabulary's trie at no cost).
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import resource
import sys
import threading

from ..errors import CompileError
from ..vocabulary import Vocab
from . import index, lazy
from .index import build
from .lazy import lazy_tables
from .linked import link_tables

DEFAULT_TIMEOUT = 60.0  # seconds one automaton build may take
DEFAULT_BUILD_MEMORY = 8 << 30  # bytes one build may add to its process


def _serve(conn, vocab: Vocab, max_memory: int, parent: int) -> None:
    """A builder process: build each requested automaton and send its arrays back, until its
    parent (pid ``parent``) closes the pipe or is gone: a forked child holds the parent's end of
    the pipe too, so a parent killed by a signal is seen by its pid, not by the pipe."""
    # another thread may have held these at the fork
    index.TRIE_LOCK = threading.Lock()
    index.TRIES.reset_lock()
    index.RUNS.reset_lock()
    lazy.ROWS.reset_lock()
    # a build that runs out of memory aborts; the parent reports it, so keep the child quiet
    faulthandler.disable()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    try:
        used = int(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmSize"))) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (used + max_memory, used + max_memory))
    except (OSError, ValueError, StopIteration):
        pass  # no /proc or no rlimit (macOS): the transition bound still caps what a build holds
    while True:
        try:
            while not conn.poll(2.0):
                if os.getppid() != parent:
                    return
            kind, regex, key, macro, max_edges = conn.recv()
        except (EOFError, OSError):
            return
        try:
            if kind == "lazy":
                reply = ("ok", lazy_tables(regex, vocab, macro))
            elif kind == "linked":
                regexes, limits = regex
                reply = ("ok", link_tables(regexes, vocab, limits))
            else:
                a = build(regex, vocab, key, macro, max_edges)
                reply = ("ok", (a.offsets, a.tokens, a.targets, a.final, a.dist))
        except MemoryError:
            reply = ("error", f"compiling needed more than the {max_memory >> 20} MiB memory bound")
        except CompileError as e:
            reply = ("error", str(e))
        except Exception as e:  # report, never leave the parent waiting
            reply = ("error", f"{type(e).__name__}: {e}")
        try:
            conn.send(reply)
        except MemoryError:
            conn.send(("error", f"the automaton is too large to send back ({max_memory >> 20} MiB bound)"))


def _cpu_seconds(pid: int) -> float | None:
    """CPU time a process has used (Linux's /proc; None elsewhere)."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


class _Builder:
    """A forked process that builds automata for one vocabulary. A build that overruns its time
    is stopped by killing the process, which leaves this one untouched; the next build forks anew."""

    def __init__(self, vocab: Vocab, max_memory: int) -> None:
        # fork shares the vocabulary's trie at no cost; elsewhere a fork after MLX has started is not
        # safe (macOS frameworks), so the child is spawned and builds the trie once for itself
        ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        if ctx.get_start_method() == "fork":
            vocab.derive_all()
            index.vocabulary_trie(vocab)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, vocab, max_memory, os.getpid()), daemon=True)
        self.proc.start()
        child.close()
        self.busy = False  # a request sent and its reply not yet read: not reusable

    def build(self, kind: str, regex: str, key: str, macro, max_edges: int, timeout: float) -> tuple:
        try:
            self.busy = True
            cpu = _cpu_seconds(self.proc.pid)
            self.conn.send((kind, regex, key, macro, max_edges))
            if not self.conn.poll(timeout):
                used = _cpu_seconds(self.proc.pid)
                self.close()
                # how much of the time the builder computed tells a slow build from a stuck one
                spent = f" (the build ran {used - cpu:.1f} s of CPU)" if cpu is not None and used is not None else ""
                raise CompileError(f"compiling took longer than the {timeout:g} s limit{spent}")
            kind, value = self.conn.recv()
            self.busy = False
        except (EOFError, OSError):
            self.close()
            raise CompileError("the compiler process died (memory bound exceeded?)") from None
        if kind != "ok":
            raise CompileError(value)
        return value

    @property
    def alive(self) -> bool:
        return self.proc.is_alive()

    def close(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        self.conn.close()


_IDLE: list[tuple[tuple[str, int], _Builder]] = []  # idle builders with their (vocabulary, memory bound)
_IDLE_LOCK = threading.Lock()
MAX_IDLE_BUILDERS = 4  # kept across vocabularies; the least recently used one goes first


def idle_builders() -> list[int]:
    """Process ids of the builders kept idle for reuse."""
    with _IDLE_LOCK:
        return [b.proc.pid for _, b in _IDLE]


def build_bounded(kind: str, regex: str, vocab: Vocab, key: str, macro, max_edges: int, timeout: float,
                  max_memory: int) -> tuple:
    """Build in a builder process, one per concurrent build, so time and memory stay bounded: the
    arrays of an Automaton (``kind="automaton"``), of a LazyAutomaton (``kind="lazy"``) or of a
    LinkedAutomaton (``kind="linked"``, ``regex`` the regexes and their counters' limits)."""
    slot = (vocab.fingerprint, max_memory)
    with _IDLE_LOCK:
        at = next((i for i, (s, _) in enumerate(_IDLE) if s == slot), None)
        builder = _IDLE.pop(at)[1] if at is not None else None
    if builder is None:
        builder = _Builder(vocab, max_memory)
    try:
        return builder.build(kind, regex, key, macro, max_edges, timeout)
    finally:
        retired = []
        with _IDLE_LOCK:
            if builder.alive and not builder.busy:
                _IDLE.append((slot, builder))
            else:
                retired.append(builder)
            while len(_IDLE) > MAX_IDLE_BUILDERS:
                retired.append(_IDLE.pop(0)[1])
        for b in retired:
            b.close()
