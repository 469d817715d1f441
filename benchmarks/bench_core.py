"""Core benchmark: throughput ratio, processor time per token, compile time (cold/warm).

    python benchmarks/bench_core.py --quick      # a few minutes on 2 cores
    python benchmarks/bench_core.py              # more schemas and runs

Everything is measured side by side in one run; figures are printed and written to
benchmarks/RESULTS_CORE.md together with the command line.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # random models, instances
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import mlx.core as mx  # noqa: E402
import mlx_lm  # noqa: E402
from mlx_lm.sample_utils import make_sampler  # noqa: E402

import engine  # noqa: E402
from common import alternating_rates, log, pct, step_ratio  # noqa: E402
from models import write_random_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TOOLGATE_SHARED", ROOT.parent / "shared"))
SUBSETS = ["Glaiveai2K", "Github_trivial", "Github_easy", "Github_medium", "Github_hard", "JsonSchemaStore",
           "Kubernetes", "Snowplow", "WashingtonPost", "Github_ultra"]
LONG_SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"id": {"type": "integer"}, "label": {"type": "string"}},
    "required": ["id", "label"]}}}, "required": ["items"]}


def throughput(model, tok, runs, max_tokens):
    """Unconstrained (twice: the noise floor) vs constrained, alternating runs with the same seeds."""
    g = engine.compile_json_schema(tok, LONG_SCHEMA)
    prompt = mx.array(tok.encode("Write a long JSON list of items:"))
    rates = alternating_rates(model, tok, prompt, max_tokens, runs, {
        "unconstrained": lambda: [], "unconstrained again": lambda: [],
        "constrained": lambda: [g.matcher(max_tokens)]})
    return rates


def processor_cost(tok, model, max_tokens, seeds):
    """Time one processor call (advance + mask + add, evaluated), first visits in and out."""
    g = engine.compile_json_schema(tok, LONG_SCHEMA)
    sequences = []
    for s in seeds:
        mx.random.seed(s)
        r = engine.generate(model, tok, "List:", response_format=g, max_tokens=max_tokens,
                            sampler=make_sampler(temp=1.0))
        sequences.append(r.token_ids)
    logits = mx.zeros((1, 151936))
    mx.eval(logits)
    g._tables.clear()  # first pass pays the first visits
    times = {"cold": [], "warm": [], "host": []}
    for phase in ("cold", "warm", "host"):
        for seq in sequences:
            p = g.matcher(max_tokens)
            prefix = [1, 2, 3]
            arrays = [mx.array(prefix + seq[:i]) for i in range(len(seq) + 1)]
            mx.eval(arrays)
            for arr in arrays:
                t = time.perf_counter()
                out = p(arr, logits)
                if phase != "host":  # host: the call alone; the add runs inside the model's step
                    mx.eval(out)
                times[phase].append((time.perf_counter() - t) * 1e6)
                mx.eval(out)
    floor = []
    for _ in range(300):
        t = time.perf_counter()
        mx.eval(logits + 0)
        floor.append((time.perf_counter() - t) * 1e6)
    return times, floor


def compile_times(tok, per_subset, timeout):
    rows = []
    for subset in SUBSETS:
        path = SHARED / "data" / "jsonschemabench" / f"{subset}.jsonl"
        data = sorted((json.loads(line) for line in open(path)), key=lambda r: r["unique_id"])
        step = max(1, len(data) // per_subset)
        rows += [(subset, r) for r in data[::step][:per_subset]]
    out = []
    for i, (subset, row) in enumerate(rows):
        log(f"  compile {i + 1}/{len(rows)} {row['id']}")
        engine.clear_caches(vocabularies=False)
        rec = {"subset": subset, "id": row["id"]}
        t = time.perf_counter()
        try:
            engine.compile_json_schema(tok, row["schema"], timeout=timeout)
        except engine.ToolgateError as e:
            rec["error"] = f"{type(e).__name__}: {str(e)[:100]}"
            rec["cold"] = time.perf_counter() - t
            out.append(rec)
            continue
        rec["cold"] = time.perf_counter() - t
        t = time.perf_counter()
        engine.compile_json_schema(tok, row["schema"])
        rec["warm_memory"] = time.perf_counter() - t
        engine.automata.store.flush()  # the disk write happens on a writer thread, 0.1 s after the compile
        engine.clear_caches(vocabularies=False)
        t = time.perf_counter()
        engine.compile_json_schema(tok, row["schema"])
        rec["warm_disk"] = time.perf_counter() - t
        out.append(rec)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS_CORE.md"))
    args = ap.parse_args()
    runs, max_tokens, per_subset, timeout = (5, 128, 3, 30.0) if args.quick else (10, 200, 10, 30.0)
    os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="toolgate-bench-")
    folder = write_random_model(SHARED / "tokenizers" / "qwen3", tempfile.mkdtemp(), vocab_size=151936)
    model, tok = mlx_lm.load(str(folder))
    log("throughput ...")
    rates = throughput(model, tok, runs, max_tokens)
    log("processor cost ...")
    times, floor = processor_cost(tok, model, max_tokens, seeds=range(3))
    log("compile times ...")
    comp = compile_times(tok, per_subset, timeout)
    ok = [r for r in comp if "error" not in r]
    lines = [
        "# Core benchmark results", "",
        f"Command: `python benchmarks/bench_core.py{' --quick' if args.quick else ''}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}; mlx {mx.__version__}, "
        f"mlx-lm {mlx_lm.__version__}; Qwen3 tokenizer (151,669 tokens, 151,936 logits); "
        f"random-weight Qwen3-shaped model (hidden 64, 2 layers), float32, CPU.", "",
        "## Throughput (alternating runs, same seeds)", "",
        "Ratio: the median time per token, every run's steps pooled, unconstrained over the mode's (tokens/s "
        "per run drifts by up to 20 % here); `unconstrained again` shows how far from 1 noise alone puts it.", "",
        "| run | ratio, time per token | ratio, tokens/s medians | median ms per token | tokens/s, all runs |",
        "|---|---|---|---|---|",
        *[f"| {k} | {step_ratio(rates, k):.3f} | {statistics.median(v['rates']) / statistics.median(rates['unconstrained']['rates']):.3f} | "
          f"{statistics.median(v['steps']) * 1000:.2f} | {', '.join(f'{x:.1f}' for x in v['rates'])} |" for k, v in rates.items()],
        "", f"**Ratio constrained / unconstrained: {step_ratio(rates, 'constrained'):.3f}** (target 0.97)", "",
        "## Processor time per call (advance + mask + add, evaluated), microseconds", "",
        "| | calls | p50 | p99 | max |", "|---|---|---|---|---|",
        f"| first visits included | {len(times['cold'])} | {pct(times['cold'], 50):.0f} | {pct(times['cold'], 99):.0f} | {max(times['cold']):.0f} |",
        f"| masks already built | {len(times['warm'])} | {pct(times['warm'], 50):.0f} | {pct(times['warm'], 99):.0f} | {max(times['warm']):.0f} |",
        f"| masks already built, the call alone (host work; the add is evaluated with the model's step) | {len(times['host'])} | {pct(times['host'], 50):.0f} | {pct(times['host'], 99):.0f} | {max(times['host']):.0f} |",
        f"| floor: evaluating `logits + 0` alone | {len(floor)} | {pct(floor, 50):.0f} | {pct(floor, 99):.0f} | {max(floor):.0f} |",
        "", "Targets: p50 under 50 µs, p99 under 1 ms.", "",
        f"## Compile time, JSONSchemaBench dev subsets ({per_subset} schemas per subset, every k-th by id, "
        f"{timeout:g} s bound per compile)", "",
        f"Compiled {len(ok)} of {len(comp)}.", "",
        "| | p50 | p90 | p99 | max |", "|---|---|---|---|---|",
    ]
    for key, label in (("cold", "cold (s)"), ("warm_memory", "warm, memory (ms)"), ("warm_disk", "warm, disk (ms)")):
        vals = [r[key] * (1 if key == "cold" else 1000) for r in ok]
        lines.append(f"| {label} | {pct(vals, 50):.3g} | {pct(vals, 90):.3g} | {pct(vals, 99):.3g} | {max(vals):.3g} |")
    lines += ["", "| subset | compiled | cold p50 (s) | refusals |", "|---|---|---|---|"]
    for subset in SUBSETS:
        rs = [r for r in comp if r["subset"] == subset]
        good = [r["cold"] for r in rs if "error" not in r]
        errs = "; ".join(f"{r['id'].split('---')[-1]}: {r['error']}" for r in rs if "error" in r)
        lines.append(f"| {subset} | {len(good)}/{len(rs)} | {pct(good, 50):.2f} | {errs} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
