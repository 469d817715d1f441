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
                      modes: dict[str, Callable[[], list]], progress: bool = False) -> dict[str, dict[str, list[float]]]:
    """Each mode's runs with its logits processors: 'rates', tokens/s after the first token (prefill left
    out), one per run; 'steps', the seconds between consecutive tokens, every run's pooled. The modes
    alternate within each run, in reverse order every other run, all of a run's on the same seed; run 0
    only warms caches."""
    out: dict[str, dict[str, list[float]]] = {mode: {"rates": [], "steps": []} for mode in modes}
    for r in range(runs + 1):
        for mode in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
            procs = modes[mode]()
            mx.random.seed(r)
            stamps = []
            for _ in mlx_lm.stream_generate(model, tok, prompt, max_tokens=max_tokens,
                                            sampler=make_sampler(temp=1.0), logits_processors=procs):
                stamps.append(time.perf_counter())
            if r > 0 and len(stamps) > 1:
                out[mode]["rates"].append((len(stamps) - 1) / (stamps[-1] - stamps[0]))
                out[mode]["steps"] += list(np.diff(stamps))
        if progress:
            log(f"  throughput run {r}/{runs}: " + ", ".join(
                f"{k} {v['rates'][-1]:.1f}" for k, v in out.items() if v["rates"]))
    return out


def step_ratio(runs: dict[str, dict[str, list[float]]], mode: str, base: str = "unconstrained") -> float:
    """The base's median time per token over the mode's, every run's steps pooled: steadier than a ratio of
    tokens/s, which drifts by up to 20 % from run to run on this machine."""
    return float(np.median(runs[base]["steps"]) / np.median(runs[mode]["steps"]))
