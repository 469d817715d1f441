"""The disk cache of compiled automata: one .npz file per key, pruned by bytes, least recently used first."""

from __future__ import annotations

import atexit
import os
import queue
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

FORMAT_VERSION = 4
DEFAULT_DISK_BYTES = 4 << 30
RESCAN = 64  # saves between scans of a folder whose tally stays under the limit
_TALLY: dict[Path, list[int]] = {}  # folder -> [bytes this process knows it holds, saves since its scan]
_TALLY_LOCK = threading.Lock()
WRITE_DELAY = 0.1  # seconds a save waits after its compile, so it does not compete with the first masks
_PENDING: queue.Queue = queue.Queue()  # (time queued, path, key, arrays) the writer has yet to save
_WRITER: threading.Thread | None = None
_WRITER_LOCK = threading.Lock()
_HURRY = threading.Event()  # set while flush waits: no delay


def _fresh_state_in_child() -> None:
    global _TALLY_LOCK, _PENDING, _WRITER, _WRITER_LOCK, _HURRY
    _TALLY_LOCK = threading.Lock()  # a fork may happen while another thread holds it
    _WRITER_LOCK = threading.Lock()
    _PENDING, _WRITER = queue.Queue(), None  # the parent's writer saves the parent's automata
    _HURRY = threading.Event()


os.register_at_fork(after_in_child=_fresh_state_in_child)


def save_later(path: Path, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Save (then prune) on a writer thread, so a compile does not wait for its disk write; the
    automaton is in memory meanwhile. ``flush`` waits for the writes (it runs at exit too)."""
    global _WRITER
    with _WRITER_LOCK:
        if _WRITER is None or not _WRITER.is_alive():
            _WRITER = threading.Thread(target=_write_pending, name="toolgate-cache-writer", daemon=True)
            _WRITER.start()
    _PENDING.put((time.monotonic(), path, key, arrays))


def _write_pending() -> None:
    while True:
        queued, path, key, arrays = _PENDING.get()
        try:
            _HURRY.wait(max(0.0, queued + WRITE_DELAY - time.monotonic()))
            save(path, key, arrays)
            prune(path.parent, path)
        except Exception:
            pass  # a read-only or full cache folder only costs a rebuild next time
        finally:
            _PENDING.task_done()


def flush() -> None:
    """Wait until every automaton handed to ``save_later`` is on disk (or failed to be)."""
    _HURRY.set()
    try:
        _PENDING.join()
    finally:
        _HURRY.clear()


atexit.register(flush)


def disk_limit() -> int:
    """Bytes the disk cache may hold (``TOOLGATE_CACHE_BYTES``); least recently used files go first."""
    value = os.environ.get("TOOLGATE_CACHE_BYTES")
    return int(value) if value else DEFAULT_DISK_BYTES


def prune(folder: Path, keep: Path) -> None:
    """Keep ``folder`` under the disk limit after ``keep`` was written. The folder is scanned
    (a stat per file) only when this process's tally of it passes the limit, or every RESCAN
    saves for what other processes wrote, so a large cache does not slow every compile."""
    with _TALLY_LOCK:
        tally = _TALLY.get(folder)
        if tally is not None:
            try:
                tally[0] += keep.stat().st_size
            except OSError:
                pass
            tally[1] += 1
            if tally[0] <= disk_limit() and tally[1] < RESCAN:
                return
        _TALLY[folder] = [_scan(folder, keep), 0]


def _scan(folder: Path, keep: Path) -> int:
    """Drop least recently used files past the limit (and stale temporary ones): the bytes left."""
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
    return total


def cache_dir() -> Path | None:
    """Where compiled automata persist; ``TOOLGATE_CACHE_DIR=off`` disables the disk cache."""
    value = os.environ.get("TOOLGATE_CACHE_DIR")
    if value == "off":
        return None
    if value:
        return Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mlx-toolgate"


def save(path: Path, key: str, arrays: dict[str, np.ndarray]) -> None:
    """Write an automaton's arrays (see ``load`` for the two kinds) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, version=np.array(FORMAT_VERSION), key=np.array(key), **arrays)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(path: Path, key: str) -> dict[str, np.ndarray] | None:
    """A cached automaton's arrays, or None when the file is missing, corrupt or for another key.

    Three kinds: an Automaton's (offsets, tokens, targets, final, dist), a LazyAutomaton's
    (trans, final, bound) and a LinkedAutomaton's (parts, and trans/final/bound/calls per part).
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            if int(z["version"]) != FORMAT_VERSION or str(z["key"]) != key:
                return None
            arrays = {name: z[name] for name in z.files if name not in ("version", "key")}
    except Exception:
        return None
    return arrays if _consistent(arrays) else None


def _consistent(z: dict[str, np.ndarray]) -> bool:
    try:
        if "parts" in z:
            return all(_consistent({"trans": z[f"trans{i}"], "final": z[f"final{i}"], "bound": z[f"bound{i}"]})
                       and z[f"calls{i}"].ndim == 2 for i in range(int(z["parts"])))
        n = len(z["final"])
        if "trans" in z:
            t = z["trans"]
            return (n > 0 and t.shape == (n + 1, 256) and z["bound"].shape == (n,)
                    and t.min() >= 0 and t.max() <= n)
        return (n > 0 and z["offsets"].shape == (n + 1,) and z["offsets"][0] == 0
                and z["offsets"][-1] == len(z["tokens"]) == len(z["targets"]) and z["dist"].shape == (n,)
                and (len(z["targets"]) == 0 or (z["targets"].min() >= 0 and z["targets"].max() < n)))
    except (KeyError, ValueError, TypeError, IndexError):
        return False
