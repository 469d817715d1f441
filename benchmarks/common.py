"""What every benchmark script shares: progress lines, percentiles, and the throughput protocol."""

from __future__ import annotations

import sys
import time
from typing import Callable

import mlx.core as mx
import mlx_lm
import numpy as np
from mlx_lm.sample_utils import make_sampler


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def alternating_rates(model, tok, prompt: mx.array, max_tokens: int, runs: int,
                      modes: dict[str, Callable[[], list]], progress: bool = False) -> dict[str, list[float]]:
    """tokens/s after the first token (prefill left out) for each mode's logits processors, the modes
    alternating within each run and every mode of a run on the same seed; run 0 only warms caches."""
    rates: dict[str, list[float]] = {mode: [] for mode in modes}
    for r in range(runs + 1):
        for mode, processors in modes.items():
            procs = processors()
            mx.random.seed(r)
            n, t = 0, time.perf_counter()
            for _ in mlx_lm.stream_generate(model, tok, prompt, max_tokens=max_tokens,
                                            sampler=make_sampler(temp=1.0), logits_processors=procs):
                if n == 0:
                    t = time.perf_counter()
                n += 1
            if r > 0 and n > 1:
                rates[mode].append((n - 1) / (time.perf_counter() - t))
        if progress:
            log(f"  throughput run {r}/{runs}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in rates.items() if v))
    return rates
