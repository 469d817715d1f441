"""Regex -> token automaton: compiled once (expensive, cached), walked per request (cheap).

outlines-core compiles the regex to a DFA over bytes (an index over the 256 one-byte tokens);
we walk the vocabulary's byte trie through that DFA from every state at once, level by level,
dropping dead branches early, which gives every (state, token, next state) without visiting
the whole vocabulary per state. States that loop on a wide character class (free text, JSON
string characters, raw strings, patterns like ``[a-z0-9_]*``) take all tokens made of such
characters in one precomputed block (see _Run). The result is kept as flat numpy arrays (CSR:
for each state the allowed token ids, sorted, and the state each leads to) plus, per state,
the fewest tokens still needed to reach acceptance: what lets a processor close the output
before the budget runs out. Compiled automata are cached in memory (LRU by bytes) and on disk.
"""

from __future__ import annotations

import faulthandler
import hashlib
import multiprocessing
import os
import resource
import sys
import tempfile
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path

import mlx.core as mx
import numpy as np
from outlines_core import Index, Vocabulary

from .errors import CompileError
from .vocabulary import PUA_BASE, PUA_LIMIT, Vocab

FORMAT_VERSION = 2
UNREACHABLE = np.iinfo(np.int32).max // 2
DEFAULT_MEMORY_BYTES = 1 << 30
DEFAULT_MASK_BYTES = 512 << 20
MAX_REGEX_CHARS = 2_000_000
END = chr(PUA_BASE + PUA_LIMIT - 2)  # U+EFFE: ends every compiled regex; no token spells it
START = chr(PUA_BASE + PUA_LIMIT - 3)  # U+EFFD: starts every compiled regex (see _byte_dfa)
DEFAULT_MAX_EDGES = 64_000_000  # token transitions per automaton (about 12 bytes each while building)
DEFAULT_DISK_BYTES = 4 << 30
DEFAULT_TIMEOUT = 60.0  # seconds one automaton build may take
DEFAULT_BUILD_MEMORY = 8 << 30  # bytes one build may add to its process
MIN_RUN_BYTES = 16  # a state looping on fewer ASCII bytes is walked token by token


def disk_limit() -> int:
    """Bytes the disk cache may hold (``TOOLGATE_CACHE_BYTES``); least recently used files go first."""
    value = os.environ.get("TOOLGATE_CACHE_BYTES")
    return int(value) if value else DEFAULT_DISK_BYTES


def _prune(folder: Path, keep: Path) -> None:
    files = []
    for f in folder.iterdir():
        try:
            st = f.stat()
        except OSError:
            continue
        if f.suffix == ".tmp" and st.st_mtime < time.time() - 3600:  # left by a killed writer
            f.unlink(missing_ok=True)
        elif f.suffix == ".npz":
            files.append((st.st_mtime, st.st_size, f))
    total, limit = sum(size for _, size, _ in files), disk_limit()
    for _, size, f in sorted(files):
        if total <= limit:
            break
        if f != keep:
            f.unlink(missing_ok=True)
            total -= size


def cache_dir() -> Path | None:
    """Where compiled automata persist; ``TOOLGATE_CACHE_DIR=off`` disables the disk cache."""
    value = os.environ.get("TOOLGATE_CACHE_DIR")
    if value == "off":
        return None
    if value:
        return Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mlx-toolgate"


@dataclass(eq=False)
class Automaton:
    """A token automaton: dense states 0..n-1, state 0 is the initial one."""

    offsets: np.ndarray  # int64 (n+1,): state s owns tokens[offsets[s]:offsets[s+1]]
    tokens: np.ndarray  # int32, sorted within each state
    targets: np.ndarray  # int32, the state each token leads to
    final: np.ndarray  # bool (n,)
    dist: np.ndarray  # int32 (n,): fewest tokens to acceptance, UNREACHABLE if none
    key: str = ""
    positions: np.ndarray | None = None  # literal automata: each state's byte offset in the literal

    @property
    def num_states(self) -> int:
        return len(self.final)

    @property
    def min_tokens(self) -> int:
        """The fewest tokens of any accepted output (EOS not counted)."""
        return int(self.dist[0])

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.offsets, self.tokens, self.targets, self.final, self.dist))

    def next_state(self, state: int, token: int) -> int:
        """The state after ``token``, or -1 when the token is not allowed."""
        lo, hi = self.offsets[state], self.offsets[state + 1]
        i = lo + int(self.tokens[lo:hi].searchsorted(np.int32(token)))  # a Python int would cast the row
        if i < hi and self.tokens[i] == token:
            return int(self.targets[i])
        return -1

    def successors_within(self, state: int, budget: int) -> np.ndarray:
        """Token ids allowed in ``state`` whose next state can still finish in ``budget`` tokens."""
        lo, hi = self.offsets[state], self.offsets[state + 1]
        ok = self.dist[self.targets[lo:hi]] <= budget
        return self.tokens[lo:hi][ok]

    def walk(self, token_ids: list[int], state: int = 0) -> int:
        """Follow ``token_ids`` from ``state``; -1 once a token is not allowed."""
        for t in token_ids:
            state = self.next_state(state, t)
            if state < 0:
                return -1
        return state

    @property
    def max_target_dist(self) -> np.ndarray:
        """Per state, the largest finite distance among its successors (mask cache key cap)."""
        d = self.dist[self.targets]
        d = np.where(d >= UNREACHABLE, -1, d)
        out = np.full(self.num_states, -1, dtype=np.int64)
        counts = np.diff(self.offsets)
        nonempty = counts > 0
        out[nonempty] = np.maximum.reduceat(d, self.offsets[:-1][nonempty]) if d.size else -1
        return out


def _bfs(a: np.ndarray, b: np.ndarray, start: np.ndarray, n: int) -> np.ndarray:
    """Breadth-first levels from ``start`` along edges a -> b (UNREACHABLE where never reached)."""
    order = np.argsort(a, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(a, minlength=n))])
    heads = b[order]
    dist = np.full(n, UNREACHABLE, dtype=np.int32)
    frontier = np.unique(start)
    d = 0
    while len(frontier):
        dist[frontier] = d
        _, pos = _ranges(frontier, offsets)
        nxt = np.unique(heads[pos])
        frontier = nxt[dist[nxt] == UNREACHABLE]
        d += 1
    return dist


def _state_graph(src: np.ndarray, dst: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct (from, to) state pairs among the edges (free text gives 150k per state)."""
    flat = src.astype(np.int64) * n + dst
    if n * n <= 1 << 26:
        seen = np.zeros(n * n, dtype=bool)
        seen[flat] = True
        flat = np.flatnonzero(seen)
    else:
        flat = np.unique(flat)
    return flat // n, flat % n


def _distances(offsets: np.ndarray, targets: np.ndarray, final: np.ndarray) -> np.ndarray:
    """Per state, the fewest tokens to an accepting state (reverse breadth-first search)."""
    n = len(final)
    src, dst = _state_graph(np.repeat(np.arange(n), np.diff(offsets)), targets, n)
    return _bfs(dst, src, np.flatnonzero(final), n)


_BYTE_VOCAB: Vocabulary | None = None
_TRIES: dict[str, "_Trie"] = {}
_TRIE_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Trie:
    """The vocabulary's token strings as a byte trie (node 0 is the root).

    ``child[coff[n]:coff[n+1]]`` are node n's children, ``byte[c]`` the byte leading to child c,
    ``ids[eoff[n]:eoff[n+1]]`` the token ids whose bytes end exactly at node n.
    """

    child: np.ndarray
    coff: np.ndarray
    byte: np.ndarray
    ids: np.ndarray
    eoff: np.ndarray
    parent: np.ndarray
    runs: dict = field(default_factory=dict)  # character class -> _Run, made on first use


def _trie(vocab: Vocab) -> _Trie:
    with _TRIE_LOCK:
        got = _TRIES.get(vocab.fingerprint)
        if got is not None:
            return got
        node_of = {b"": 0}
        parent, byte, ends = [0], [0], []
        for text, ids in vocab.outlines_map.items():
            for d in range(1, len(text) + 1):
                prefix = text[:d]
                if prefix not in node_of:
                    node_of[prefix] = len(parent)
                    parent.append(node_of[text[:d - 1]])
                    byte.append(text[d - 1])
            node = node_of[text]
            ends += [(node, i) for i in ids]
        n = len(parent)
        parents = np.asarray(parent[1:], dtype=np.int64)
        coff = np.concatenate([[0], np.cumsum(np.bincount(parents, minlength=n))])
        end = np.asarray(ends, dtype=np.int64).reshape(-1, 2)
        order = np.argsort(end[:, 0], kind="stable")
        eoff = np.concatenate([[0], np.cumsum(np.bincount(end[:, 0], minlength=n))])
        got = _Trie(child=(np.argsort(parents, kind="stable") + 1).astype(np.int32), coff=coff,
                    byte=np.asarray(byte, dtype=np.uint8), ids=end[order, 1].astype(np.int32), eoff=eoff,
                    parent=np.asarray(parent, dtype=np.int32))
        if len(_TRIES) >= 8:
            _TRIES.pop(next(iter(_TRIES)))
        _TRIES[vocab.fingerprint] = got
        return got


@dataclass(frozen=True)
class _Run:
    """A character class's byte automaton laid over the trie.

    A state that loops on the class (the inside of a JSON string, free text) moves along any
    token made of class characters exactly as the class automaton does. Such tokens (``ids``,
    ending in class state ``k``) are taken in one step; the walk starts only at ``exits``, the
    trie nodes where a token first leaves the class (``exit_k`` is the class state before).
    """

    trans: np.ndarray  # (c+1, 256): the class automaton, c is dead, state 0 is between characters
    edges: np.ndarray  # (e, 3): its live edges (from, byte, to)
    tree: np.ndarray  # (c-1, 3): edges reaching every class state from state 0, in order
    ids: np.ndarray
    k: np.ndarray
    exits: np.ndarray
    exit_k: np.ndarray


def _run(trie: "_Trie", char_class: str) -> _Run:
    trans, _ = _byte_dfa(f"(?:{char_class})*")
    c = trans.shape[0] - 1
    src, byte = np.nonzero(trans[:c] != c)
    dst = trans[src, byte]
    # keep the states on a loop through state 0 (leaving out the END symbol's path)
    live = (_bfs(src, dst, np.array([0]), c) < UNREACHABLE) & (_bfs(dst, src, np.array([0]), c) < UNREACHABLE)
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
    node_k = np.full(len(trie.parent), -1, dtype=np.int32)
    node_k[0] = 0
    frontier = np.array([0])
    while len(frontier):
        owner, pos = _ranges(frontier, trie.coff)
        child = trie.child[pos]
        k = node_k[frontier[owner]]
        step = trans[np.where(k >= 0, k, c), trie.byte[child]]
        node_k[child] = np.where(step == c, -1, step)
        frontier = child
    inside = np.flatnonzero(node_k >= 0)[1:]
    owner, pos = _ranges(inside, trie.eoff)
    ids, k = trie.ids[pos], node_k[inside[owner]]
    order = np.argsort(ids)
    exits = np.flatnonzero((node_k < 0) & (node_k[trie.parent] >= 0)).astype(np.int32)
    return _Run(trans, edges, np.asarray(tree, dtype=np.int64).reshape(-1, 3), ids[order], k[order],
                exits, node_k[trie.parent[exits]])


def _run_for(trie: _Trie, char_class: str) -> _Run:
    with _TRIE_LOCK:
        got = trie.runs.get(char_class)
    if got is None:
        got = _run(trie, char_class)
        with _TRIE_LOCK:
            if len(trie.runs) >= 256:
                trie.runs.pop(next(iter(trie.runs)))
            trie.runs[char_class] = got
    return got


def _run_classes(trans: np.ndarray) -> list[tuple[np.ndarray, list[str]]]:
    """States that loop on many ASCII bytes, grouped by those bytes, with the character classes
    to try for them: the bytes plus every non-ASCII character (free text, JSON strings, raw
    strings), then the bytes alone (patterns such as ``[a-z0-9_]*``)."""
    n = trans.shape[0] - 1
    loops = trans[:n, :128] == np.arange(n)[:, None]
    wide = np.flatnonzero(loops.sum(axis=1) >= MIN_RUN_BYTES)
    if not len(wide):
        return []
    keys, inverse = np.unique(np.packbits(loops[wide], axis=1), axis=0, return_inverse=True)
    out = []
    for g in range(len(keys)):
        inside = np.flatnonzero(np.unpackbits(keys[g])[:128])
        outside = np.setdiff1d(np.arange(128), inside)
        out.append((wide[inverse.reshape(-1) == g],
                    [f"[^{_hex(outside)}\\x{{E000}}-\\x{{EFFF}}]", f"[{_hex(inside)}]"]))
    return out


def _hex(byte_values: np.ndarray) -> str:
    return "".join(f"\\x{b:02X}" for b in byte_values)


def _run_states(trans: np.ndarray, run: _Run, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Which of ``states`` move like the class automaton: (those states, their class-state map)."""
    dead = trans.shape[0] - 1
    m = np.full((len(states), run.trans.shape[0] - 1), dead, dtype=np.int32)
    m[:, 0] = states
    for a, b, d in run.tree.tolist():
        m[:, d] = trans[m[:, a], b]
    e = run.edges
    ok = ((trans[m[:, e[:, 0]], e[:, 1]] == m[:, e[:, 2]]) & (m[:, e[:, 2]] != dead)).all(axis=1)
    return states[ok], m[ok]


def _byte_dfa(regex: str) -> tuple[np.ndarray, np.ndarray]:
    """The regex's DFA over bytes: (transitions (n+1, 256) with n as the dead state, final (n,)).

    outlines-core compiles the regex; its index over the 256 one-byte tokens is the DFA, except
    that it leaves out a step from a matching position into a non-matching one (a multi-byte
    character after a complete match, say). Compiling ``(?:regex)`` followed by END, a symbol no
    token can spell, means no position before END matches, so no step is left out; a state is
    final when END leads from it to acceptance. START, another symbol no token spells, goes in
    front: outlines-core also builds the unanchored DFA, where any byte may begin a match, and for
    a regex whose first character recurs inside it (a JSON string's quote, escaped within) that
    DFA grows exponentially with repetition counts (``{0,20}`` took minutes). A match can only
    begin at START, so the unanchored part stays as small as the anchored one.
    """
    global _BYTE_VOCAB
    if _BYTE_VOCAB is None:
        _BYTE_VOCAB = Vocabulary(256, {bytes([b]): [b] for b in range(256)})
    try:
        index = Index(f"{START}(?:{regex}){END}", _BYTE_VOCAB)
    except Exception as e:  # outlines-core raises plain ValueError/RuntimeError on regex trouble
        raise CompileError(f"cannot build an automaton for this regex: {e}") from None
    table = index.get_transitions()
    init = index.get_initial_state()
    for b in START.encode():
        init = table[init][b]
    order = [init] + sorted(s for s in table if s != init)
    dense = {s: i for i, s in enumerate(order)}
    n = len(order)
    trans = np.full((n + 1, 256), n, dtype=np.int32)
    for s, row in table.items():
        i = dense[s]
        for b, nxt in row.items():
            if b < 256:
                trans[i, b] = dense[nxt]
    accepting = np.zeros(n + 1, dtype=bool)
    accepting[[dense[s] for s in index.get_final_states()]] = True
    cur = np.arange(n)
    for b in END.encode():
        cur = trans[cur, b]
    return trans, accepting[cur]


def _ranges(starts: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each i, the positions offsets[starts[i]]..offsets[starts[i]+1]-1: (owner i, position)."""
    lo = offsets[starts]
    counts = offsets[starts + 1] - lo
    owner = np.repeat(np.arange(len(starts)), counts)
    pos = np.arange(int(counts.sum())) + np.repeat(lo - (np.cumsum(counts) - counts), counts)
    return owner, pos


def _token_edges(trans: np.ndarray, trie: _Trie, extra: tuple[tuple[bytes, int], ...], max_edges: int):
    """Every (state, token, next state) of the byte DFA, walking the trie from all states at once.

    Returns the walked edges and, for states that loop on a character class, the class's tokens
    as one block each: {state: (token ids, next states)}.
    """
    n = trans.shape[0] - 1
    blocks: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    starts = [(np.arange(n, dtype=np.int32), np.zeros(n, dtype=np.int32), np.arange(n, dtype=np.int32))]
    for group, classes in _run_classes(trans):
        for char_class in classes:
            run = _run_for(trie, char_class)
            states, m = _run_states(trans, run, group)
            group = np.setdiff1d(group, states)
            for s, row in zip(states.tolist(), m):
                blocks[s] = (run.ids, row[run.k])
                cur = trans[row[run.exit_k], trie.byte[run.exits]]
                alive = cur != n
                starts.append((np.full(int(alive.sum()), s, dtype=np.int32), run.exits[alive], cur[alive]))
    if blocks:
        walked = np.ones(n, dtype=bool)
        walked[list(blocks)] = False
        starts[0] = tuple(a[walked] for a in starts[0])
    src, node, cur = (np.concatenate(p) for p in zip(*starts))
    parts, total = [], sum(len(b[0]) for b in blocks.values())
    while len(src):
        owner, pos = _ranges(node, trie.eoff)
        parts.append((src[owner], trie.ids[pos], cur[owner]))
        total += len(owner)
        if total > max_edges:
            raise CompileError(f"the token automaton exceeds {max_edges} transitions")
        owner, pos = _ranges(node, trie.coff)
        child = trie.child[pos]
        nxt = trans[cur[owner], trie.byte[child]]
        alive = nxt != n
        src, node, cur = src[owner[alive]], child[alive], nxt[alive]
    for text, token in extra:
        cur = np.arange(n, dtype=np.int32)
        for b in text:
            cur = trans[cur, b]
        ok = np.flatnonzero(cur != n).astype(np.int32)
        parts.append((ok, np.full(len(ok), token, dtype=np.int32), cur[ok]))
    src, tok, dst = (np.concatenate(p) for p in zip(*parts))
    return src, tok, dst, blocks


def _build(regex: str, vocab: Vocab, key: str, macro: tuple[str, int] | None = None,
           max_edges: int = DEFAULT_MAX_EDGES) -> Automaton:
    """The token automaton of ``regex`` over ``vocab``, pruned to the useful states."""
    trans, final = _byte_dfa(regex)
    n = len(final)
    extra = ((macro[0].encode(), macro[1]),) if macro else ()
    src, tok, dst, blocks = _token_edges(trans, _trie(vocab), extra, max_edges)
    # keep the states the initial one reaches by tokens and that can still reach acceptance
    block_dst = {s: np.unique(t) for s, (_, t) in blocks.items()}
    block_src = [np.full(len(t), s) for s, t in block_dst.items()]
    gs, gd = _state_graph(np.concatenate([src, *block_src]), np.concatenate([dst, *block_dst.values()]), n)
    to_end = _bfs(gd, gs, np.flatnonzero(final), n)
    alive = (_bfs(gs, gd, np.array([0]), n) < UNREACHABLE) & (to_end < UNREACHABLE)
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
                ids, to = blocks[s]
                ok = alive[to]
                ids, to = ids[ok], dense[to[ok]]
                at = np.searchsorted(ids, t)
                t, g = np.insert(ids, at, t), np.insert(to, at, g)
            toks.append(t)
            tgts.append(g)
            counts[d + 1] = len(t)
        tok, dst, offsets = np.concatenate(toks), np.concatenate(tgts), np.cumsum(counts)
    return Automaton(offsets, tok, dst, final[alive], to_end[alive], key)


def _save(path: Path, a: Automaton) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(
                f,
                version=np.array(FORMAT_VERSION),
                key=np.array(a.key),
                offsets=a.offsets,
                tokens=a.tokens,
                targets=a.targets,
                final=a.final,
                dist=a.dist,
            )
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _load(path: Path, key: str) -> Automaton | None:
    """A cached automaton, or None when the file is missing, corrupt or for another key."""
    try:
        with np.load(path, allow_pickle=False) as z:
            if int(z["version"]) != FORMAT_VERSION or str(z["key"]) != key:
                return None
            a = Automaton(z["offsets"], z["tokens"], z["targets"], z["final"], z["dist"], key)
    except Exception:
        return None
    n = len(a.final)
    ok = (
        n > 0
        and a.offsets.shape == (n + 1,)
        and a.offsets[0] == 0
        and a.offsets[-1] == len(a.tokens) == len(a.targets)
        and a.dist.shape == (n,)
        and (len(a.targets) == 0 or (a.targets.min() >= 0 and a.targets.max() < n))
    )
    return a if ok else None


def _serve(conn, vocab: Vocab, max_memory: int) -> None:
    """A builder process: build each requested automaton and send its arrays back."""
    global _TRIE_LOCK, _KEY_LOCKS_GUARD
    _TRIE_LOCK, _KEY_LOCKS_GUARD = threading.Lock(), threading.Lock()  # another thread may have held them at the fork
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
            regex, key, macro, max_edges = conn.recv()
        except (EOFError, OSError):
            return
        try:
            a = _build(regex, vocab, key, macro, max_edges)
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


class _Builder:
    """A forked process that builds automata for one vocabulary. A build that overruns its time
    is stopped by killing the process, which leaves this one untouched; the next build forks anew."""

    def __init__(self, vocab: Vocab, max_memory: int) -> None:
        # fork shares the vocabulary's trie at no cost; elsewhere a fork after MLX has started is not
        # safe (macOS frameworks), so the child is spawned and builds the trie once for itself
        ctx = multiprocessing.get_context("fork" if sys.platform == "linux" else "spawn")
        if ctx.get_start_method() == "fork":
            _trie(vocab)
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_serve, args=(child, vocab, max_memory), daemon=True)
        self.proc.start()
        child.close()
        self.busy = False  # a request sent and its reply not yet read: not reusable

    def build(self, regex: str, key: str, macro, max_edges: int, timeout: float) -> Automaton:
        try:
            self.busy = True
            self.conn.send((regex, key, macro, max_edges))
            if not self.conn.poll(timeout):
                self.close()
                raise CompileError(f"compiling took longer than the {timeout:g} s limit")
            kind, value = self.conn.recv()
            self.busy = False
        except (EOFError, OSError):
            self.close()
            raise CompileError("the compiler process died (memory bound exceeded?)") from None
        if kind != "ok":
            raise CompileError(value)
        return Automaton(*value, key=key)

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


def _build_bounded(regex: str, vocab: Vocab, key: str, macro, max_edges: int, timeout: float,
                   max_memory: int) -> Automaton:
    """Build in a builder process, one per concurrent build, so time and memory stay bounded."""
    slot = (vocab.fingerprint, max_memory)
    with _IDLE_LOCK:
        at = next((i for i, (s, _) in enumerate(_IDLE) if s == slot), None)
        builder = _IDLE.pop(at)[1] if at is not None else None
    if builder is None:
        builder = _Builder(vocab, max_memory)
    try:
        return builder.build(regex, key, macro, max_edges, timeout)
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


class _LRU:
    """A thread-safe LRU bounded by the bytes of its values."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.bytes = 0
        self.items: OrderedDict = OrderedDict()
        self.lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self.lock:
            value = self.items.get(key)
            if value is None:
                self.misses += 1
                return None
            self.hits += 1
            self.items.move_to_end(key)
            return value[0]

    def put(self, key, value, size: int) -> None:
        with self.lock:
            if key in self.items:
                return
            self.items[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes and len(self.items) > 1:
                _, (_, old) = self.items.popitem(last=False)
                self.bytes -= old

    def clear(self) -> None:
        with self.lock:
            self.items.clear()
            self.bytes = 0


AUTOMATA = _LRU(DEFAULT_MEMORY_BYTES)
MASKS = _LRU(DEFAULT_MASK_BYTES)  # additive masks by content, shared by every grammar
_KEY_LOCKS: dict[str, threading.Lock] = {}
_KEY_LOCKS_GUARD = threading.Lock()


def automaton_key(regex: str, vocab: Vocab, macro: tuple[str, int] | None = None) -> str:
    h = hashlib.sha256(f"{FORMAT_VERSION}\0{vocab.fingerprint}\0{macro}\0{regex}".encode())
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
        folder = cache_dir()
        path = folder / f"{key}.npz" if folder else None
        a = _load(path, key) if path else None
        if a is not None:
            try:
                os.utime(path)  # recently used: pruned last
            except OSError:
                pass
        else:
            a = (_build(regex, vocab, key, macro, max_transitions) if timeout is None else
                 _build_bounded(regex, vocab, key, macro, max_transitions, timeout, max_memory))
            if path:
                try:
                    _save(path, a)
                    _prune(path.parent, path)
                except OSError:
                    pass  # a read-only or full cache folder only costs a rebuild next time
        AUTOMATA.put(key, a, a.nbytes)
    with _KEY_LOCKS_GUARD:
        _KEY_LOCKS.pop(key, None)
    return a


def additive_mask(ids: np.ndarray, width: int) -> mx.array:
    """A float32 row: 0 where ``ids`` are allowed, -inf elsewhere (added to the logits)."""
    m = np.full(width, -np.inf, dtype=np.float32)
    m[ids] = 0.0
    return mx.array(m)


def shared_mask(ids: np.ndarray, width: int, by_content: _LRU) -> tuple[bytes, mx.array]:
    """The additive mask allowing ``ids``, built once per content: (its digest, the mask)."""
    digest = hashlib.blake2b(ids.astype(np.int32).tobytes() + width.to_bytes(4, "little"), digest_size=16).digest()
    m = by_content.get(digest)
    if m is None:
        m = additive_mask(ids, width)
        by_content.put(digest, m, width * 4)
    return digest, m


class MaskTable:
    """Additive float32 masks (0 allowed, -inf banned) per (state, budget cap), deduplicated."""

    def __init__(self, automaton: Automaton, vocab: Vocab, width: int):
        self.a = automaton
        self.vocab = vocab
        self.width = width
        self.cap = automaton.max_target_dist
        self.by_key: dict[tuple[int, int], bytes] = {}
        self.by_content = MASKS
        self.lock = threading.Lock()
        eos = [i for i in vocab.eos_ids if i < width]
        self.eos = np.asarray(eos, dtype=np.int64)
        self.eos_only = additive_mask(self.eos[:1], width)

    def allowed(self, state: int, left: int) -> np.ndarray:
        """Token ids allowed in ``state`` with ``left`` tokens still to generate (this one included)."""
        ids = self.a.successors_within(state, left - 1) if left > 0 else self.a.tokens[:0]
        ids = ids[ids < self.width]
        if self.a.final[state]:
            ids = np.concatenate([ids, self.eos])
        return ids

    def mask(self, state: int, left: int) -> mx.array:
        key = (state, int(min(left - 1, self.cap[state])))
        digest = self.by_key.get(key)
        m = self.by_content.get(digest) if digest is not None else None
        if m is not None:
            return m
        ids = self.allowed(state, left)
        if len(ids) == 0:
            return self.eos_only
        digest, m = shared_mask(ids, self.width, self.by_content)
        with self.lock:
            self.by_key[key] = digest
        return m
