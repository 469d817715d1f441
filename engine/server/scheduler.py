"""Continuous batching: one thread owns mlx-lm's BatchGenerator; requests join it as they arrive.

Each job brings its own prompt, sampler, logits processor (its Matcher) and end tokens. The
thread inserts waiting jobs between decoding steps, hands every new token to its job's callback,
and takes a job out the moment it ends: its end token, its budget, its grammar's completion, a
stop string, or a client that went away (``cancel``).
"""

from __future__ import annotations

import importlib
import itertools
import os
import pickle
import queue
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import mlx.core as mx
import numpy as np

# mlx_lm's package exports a function named ``generate`` over the module of the same name
_mlx_generate = importlib.import_module("mlx_lm.generate")


MAX_ACTIVE = 16  # sequences decoded together, by default


class Busy(Exception):
    """Every slot and every place in the queue is taken."""


class Broken(Exception):
    """The server can run no more requests: it is stopping, or its distributed group lost a rank."""


@dataclass(eq=False)
class Job:
    """One sequence. ``on_token(token)`` runs on the generation thread for each token (end tokens
    aside) and returns True to end the job there; ``on_end(reason, error)`` runs once, with reason
    "eos" (an end token), "complete" (the grammar allows only the end, or ``on_token`` asked to
    stop), "length", "cancelled" or "error"."""

    ids: list[int]
    max_tokens: int
    sampler: Callable
    processors: list
    eos: list[int]
    on_token: Callable[[int], bool]
    on_end: Callable[[str, Exception | None], None]
    complete_at: Callable[[int], bool] | None = None  # the grammar allows nothing but the end after n tokens
    cancelled: bool = False
    produced: int = 0
    failed: Exception | None = None  # what one of its processors raised: it alone ends
    key: int | None = None  # its announcement to the other ranks (Scheduler.announce)


class Scheduler:
    """``submit`` jobs from any thread; they run in one BatchGenerator on the scheduler's thread.

    With ``group`` (a distributed group of several processes, this one rank 0), every step's
    changes to the batch (requests announced, inserted, removed) are sent to the other ranks first,
    which run ``follow`` on their shard of the model, so each rank steps the same batch."""

    def __init__(self, model: Any, *, max_active: int = MAX_ACTIVE, max_waiting: int = 64, group: Any = None) -> None:
        self.model = model
        self.max_active, self.max_waiting = max_active, max_waiting
        self.group = group if group is not None and group.size() > 1 else None
        self.broken: str | None = None  # why the group can serve no more (a rank was lost)
        self._inbox: queue.Queue = queue.Queue()
        self._lock = threading.RLock()  # re-entered by ``stop`` from a signal handler
        self._jobs: set[Job] = set()  # submitted and not ended
        self._keys = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="toolgate-batch", daemon=True)
        self._thread.start()

    @property
    def load(self) -> int:
        """Jobs running or waiting."""
        return len(self._jobs)

    def announce(self, spec: Any) -> int | None:
        """With a group: send ``spec`` (what ``follow``'s ``mirror`` builds a job from) to the
        other ranks now, so they compile while this rank does; returns the key its job is
        submitted under (``Job.key``), or dropped with (``drop``). Without a group: None."""
        if self.group is None:
            return None
        key = next(self._keys)
        self._inbox.put(("plan", key, spec))
        return key

    def drop(self, key: int | None) -> None:
        """The announced request ``key`` will not run (refused, or its client left)."""
        if key is not None:
            self._inbox.put(("drop", key))

    def submit(self, job: Job) -> None:
        if self.broken:
            raise Broken(self.broken)
        job.processors = [_guarded(job, p) for p in job.processors]
        with self._lock:
            if len(self._jobs) >= self.max_active + self.max_waiting:
                raise Busy(f"{len(self._jobs)} requests are running or waiting "
                           f"(limit {self.max_active + self.max_waiting})")
            self._jobs.add(job)
        self._inbox.put(job)

    def cancel(self, job: Job) -> None:
        """End ``job`` at the next step (a client that disconnected); its slot is freed then."""
        job.cancelled = True
        self._inbox.put(None)  # wakes the thread when nothing else runs

    def stop(self, reason: str) -> None:
        """End every job now with ``reason`` (a Broken error) and take no more: the process is
        going down. The generation thread may be stuck in a collective with a dead rank (mlx's ring
        backend can block rather than raise), so nothing here waits for it."""
        self.broken = self.broken or reason
        self._fail_all(Broken(self.broken))

    def close(self) -> None:
        self._stopped = True
        self._inbox.put(None)
        self._thread.join(timeout=1 if self.broken else 10)  # a broken group's thread may never return

    def _end(self, job: Job, reason: str, error: Exception | None = None) -> None:
        with self._lock:
            if job not in self._jobs:
                return
            self._jobs.discard(job)
        try:
            job.on_end(reason, error)
        except Exception:
            pass  # a callback's failure must not stop the other sequences

    def _fail_all(self, error: Exception) -> None:
        for job in list(self._jobs):
            self._end(job, "error", error)

    def _run(self) -> None:
        try:
            self._lead()
        except Exception as e:  # the group lost a rank: nothing can run any more
            self.stop(f"the distributed group stopped: {e}")

    def _lead(self) -> None:
        gen = _batch(self.model, self.max_active)
        active: dict[int, Job] = {}
        waiting: list[Job] = []
        plans: list = []
        drops: list[int] = []
        done: list[int] = []  # uids ended after the last step, taken out of the batch before the next
        while True:
            try:
                item = self._inbox.get(block=not (active or waiting or done or plans or drops or self._stopped))
                while True:
                    if isinstance(item, Job):
                        waiting.append(item)
                    elif item is not None:
                        (plans if item[0] == "plan" else drops).append(item[1] if item[0] == "drop" else item[1:])
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            for job in [j for j in waiting if j.cancelled]:
                waiting.remove(job)
                self._end(job, "cancelled")
            room = self.max_active - len(active)
            new, waiting = waiting[:max(room, 0)], waiting[max(room, 0):]
            for uid, job in active.items():
                if job.cancelled:
                    done.append(uid)
                    self._end(job, "cancelled")
            for uid in done:
                active.pop(uid, None)
            step = bool(active or new) and not self._stopped
            if self.group is not None:
                changes = plans or drops or new or done or self._stopped or not step
                _share((plans, drops, [(j.key, j.ids) for j in new], done, step, self._stopped) if changes else None,
                       self.group)
            plans, drops = [], []
            if done:
                gen.remove(done)
                done = []
            if self._stopped:
                break
            if new:
                active.update(zip(_insert(gen, new), new))
            if not step:
                continue
            try:
                responses = gen.next_generated()
            except Exception as e:
                if self.group is not None:
                    raise  # a lost rank: the group cannot go on
                for job in active.values():  # the model itself failed: every sequence in the batch goes
                    self._end(job, "error", e)
                active.clear()
                gen.close()
                gen = _batch(self.model, self.max_active)
                continue
            for uid, job in active.items():
                if job.failed is not None:
                    done.append(uid)
                    self._end(job, "error", job.failed)
            for r in responses:
                job = active.get(r.uid)
                if job is None or r.uid in done:
                    continue
                if r.finish_reason == "stop":  # an end token: not part of the output
                    active.pop(r.uid)
                    self._end(job, "eos")
                    continue
                job.produced += 1
                stop = job.on_token(r.token)
                if r.finish_reason is not None:  # the budget: mlx-lm dropped it already
                    active.pop(r.uid)
                    self._end(job, "length")
                elif stop or (job.complete_at is not None and job.complete_at(job.produced)):
                    done.append(r.uid)
                    self._end(job, "complete")
            for uid in done:
                active.pop(uid, None)
        gen.close()
        self.stop("the server stopped")


def follow(model: Any, group: Any, mirror: Callable[[Any], Job], *, max_active: int = MAX_ACTIVE) -> None:
    """A rank other than 0: step the batch rank 0's Scheduler leads, on this rank's shard of the
    model, until rank 0 stops; ``max_active`` must be rank 0's (it shapes the batch). ``mirror(spec)``
    builds the job rank 0 announced with ``spec`` (its processors and sampler; its callbacks go
    unused): built in a worker thread as soon as it is announced, so this rank compiles while rank
    0 does."""
    gen = _batch(model, max_active)
    builds: dict[int, Any] = {}
    with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
        while True:
            message = _share(None, group)
            plans, drops, inserts, removes, step, stopped = message or ((), (), (), (), True, False)
            for key, spec in plans:
                builds[key] = pool.submit(mirror, spec)
            for key in drops:
                builds.pop(key, None)
            if removes:
                gen.remove(removes)
            if stopped:
                break
            if inserts:
                jobs = [builds.pop(key).result() for key, _ in inserts]
                for job, (_, ids) in zip(jobs, inserts):
                    job.ids = ids  # rank 0's prompt, token for token
                    job.processors = [_guarded(job, p) for p in job.processors]
                _insert(gen, jobs)
            if step:
                gen.next_generated()
    gen.close()


def _batch(model: Any, max_active: int) -> Any:
    """mlx-lm's BatchGenerator on this thread's default stream: the one ``_share`` runs on, so that
    every rank orders its messages and the model's own collectives alike."""
    return _mlx_generate.BatchGenerator(model, completion_batch_size=max_active,
                                        stream=mx.default_stream(mx.default_device()))


def _insert(gen: Any, jobs: list[Job]) -> list[int]:
    """``jobs`` into the batch, each with its sampler, processors and end tokens; their uids."""
    return gen.insert([j.ids for j in jobs], max_tokens=[j.max_tokens for j in jobs],
                      samplers=[j.sampler for j in jobs], logits_processors=[j.processors for j in jobs],
                      stop_sequences=[_mlx_generate.StopSequences([[t] for t in j.eos]) for j in jobs])


def _share(message: Any, group: Any) -> Any:
    """Rank 0's ``message`` on every rank of ``group`` (the others pass None). None, the message
    of most steps (nothing but a step), costs one collective of one number instead of two."""
    if group.rank() == 0:
        if message is None:
            mx.eval(mx.distributed.all_sum(0, group=group))
            return None
        data = mx.array(np.frombuffer(pickle.dumps(message), dtype=np.uint8))
        mx.eval(mx.distributed.all_sum(data.size, group=group))
        mx.eval(mx.distributed.all_sum(data, group=group))
        return message
    size = mx.distributed.all_sum(0, group=group).item()
    if size == 0:
        return None
    data = mx.distributed.all_sum(mx.zeros(size, dtype=mx.uint8), group=group)
    return pickle.loads(np.array(data).tobytes())


def _guarded(job: Job, processor: Callable) -> Callable:
    """``processor`` for ``job`` alone: what it raises marks the job failed (the scheduler ends it
    after this step) instead of failing every sequence of the batch."""
    def run(tokens, logits):
        if job.failed is not None:
            return logits
        try:
            return processor(tokens, logits)
        except Exception as e:
            job.failed = e
            return logits
    return run
