"""Continuous batching: one thread owns mlx-lm's BatchGenerator; requests join it as they arrive.

Each job brings its own prompt, sampler, logits processor (its Matcher) and end tokens. The
thread inserts waiting jobs between decoding steps, hands every new token to its job's callback,
and takes a job out the moment it ends: its end token, its budget, its grammar's completion, a
stop string, or a client that went away (``cancel``).
"""

from __future__ import annotations

import importlib
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable

# mlx_lm's package exports a function named ``generate`` over the module of the same name
_mlx_generate = importlib.import_module("mlx_lm.generate")


class Busy(Exception):
    """Every slot and every place in the queue is taken."""


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


class Scheduler:
    """``submit`` jobs from any thread; they run in one BatchGenerator on the scheduler's thread."""

    def __init__(self, model: Any, *, max_active: int = 16, max_waiting: int = 64) -> None:
        self.model = model
        self.max_active, self.max_waiting = max_active, max_waiting
        self._inbox: queue.Queue = queue.Queue()
        self._lock = threading.Lock()
        self._load = 0  # jobs submitted and not ended
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="toolgate-batch", daemon=True)
        self._thread.start()

    @property
    def load(self) -> int:
        """Jobs running or waiting."""
        return self._load

    def submit(self, job: Job) -> None:
        job.processors = [_guarded(job, p) for p in job.processors]
        with self._lock:
            if self._load >= self.max_active + self.max_waiting:
                raise Busy(f"{self._load} requests are running or waiting (limit {self.max_active + self.max_waiting})")
            self._load += 1
        self._inbox.put(job)

    def cancel(self, job: Job) -> None:
        """End ``job`` at the next step (a client that disconnected); its slot is freed then."""
        job.cancelled = True
        self._inbox.put(None)  # wakes the thread when nothing else runs

    def close(self) -> None:
        self._stopped = True
        self._inbox.put(None)
        self._thread.join(timeout=10)

    def _end(self, job: Job, reason: str, error: Exception | None = None) -> None:
        with self._lock:
            self._load -= 1
        try:
            job.on_end(reason, error)
        except Exception:
            pass  # a callback's failure must not stop the other sequences

    def _run(self) -> None:
        gen = _mlx_generate.BatchGenerator(self.model, completion_batch_size=self.max_active)
        active: dict[int, Job] = {}
        waiting: list[Job] = []
        while not self._stopped:
            try:
                item = self._inbox.get(block=not active and not waiting)
                while True:
                    if item is not None:
                        waiting.append(item)
                    item = self._inbox.get_nowait()
            except queue.Empty:
                pass
            if self._stopped:
                break
            for job in [j for j in waiting if j.cancelled]:
                waiting.remove(job)
                self._end(job, "cancelled")
            room = self.max_active - len(active)
            if room > 0 and waiting:
                new, waiting = waiting[:room], waiting[room:]
                uids = gen.insert([j.ids for j in new], max_tokens=[j.max_tokens for j in new],
                                  samplers=[j.sampler for j in new], logits_processors=[j.processors for j in new],
                                  stop_sequences=[_mlx_generate.StopSequences([[t] for t in j.eos]) for j in new])
                active.update(zip(uids, new))
            gone = [uid for uid, j in active.items() if j.cancelled]
            if gone:
                gen.remove(gone)
                for uid in gone:
                    self._end(active.pop(uid), "cancelled")
            if not active:
                continue
            try:
                responses = gen.next_generated()
            except Exception as e:  # the model itself failed: every sequence in the batch goes
                for uid, job in active.items():
                    self._end(job, "error", e)
                active.clear()
                gen.close()
                gen = _mlx_generate.BatchGenerator(self.model, completion_batch_size=self.max_active)
                continue
            failed = [uid for uid, j in active.items() if j.failed is not None]
            if failed:
                gen.remove(failed)
                for uid in failed:
                    job = active.pop(uid)
                    self._end(job, "error", job.failed)
            finished = []
            for r in responses:
                job = active.get(r.uid)
                if job is None:
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
                    finished.append(r.uid)
            if finished:
                gen.remove(finished)
                for uid in finished:
                    self._end(active.pop(uid), "complete")
        gen.close()


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
