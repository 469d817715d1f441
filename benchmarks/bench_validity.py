"""What the constraint buys: the embedded default model with and without it, side by side.

Prompts come from the model's own task families (weather, time, currency, web search, two-city
weather, small talk), drawn with a seed the training corpus did not use. For each temperature,
every prompt is answered twice with the demo tools offered (tool_choice auto): unconstrained
(mlx-lm's ``stream_generate``, calls read by mlx-lm's own Hermes parser, as ``mlx_lm.server``
does) and under the engine (``engine.generate``). Per turn we record whether every call it
attempted parses, validates against its tool's schema and names an offered tool; whether it picks
the fitting tool (or none for small talk); whether the budget cut it; and tokens per second.

    python benchmarks/bench_validity.py [--prompts 200] [--max-tokens 64]

Writes benchmarks/RESULTS_VALIDITY.md and benchmarks/validity.png.
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import sys
import time
from pathlib import Path

import jsonschema
import mlx.core as mx
from mlx_lm import stream_generate
from mlx_lm.sample_utils import make_sampler
from mlx_lm.tool_parsers import json_tools

import engine
from engine.default_model import DEMO_TOOLS, probe_prompts

ROOT = Path(__file__).resolve().parents[1]
TEMPERATURES = (0.0, 0.7, 1.0, 1.5)
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in DEMO_TOOLS}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def judge_calls(calls: list[tuple[str, object]]) -> bool:
    """Every call names an offered tool and its arguments validate."""
    for name, args in calls:
        if name not in SCHEMAS or not isinstance(args, dict):
            return False
        try:
            jsonschema.validate(args, SCHEMAS[name])
        except jsonschema.ValidationError:
            return False
    return True


def unconstrained(model, tok, prompt_ids, sampler, max_tokens):
    """mlx-lm alone: generate, then read calls the way mlx_lm.server does (Hermes JSON parser)."""
    text, n, t = "", 0, time.perf_counter()
    finish = "length"
    for r in stream_generate(model, tok, prompt_ids, max_tokens=max_tokens, sampler=sampler):
        text += r.text
        n += 1
        if r.finish_reason:
            finish = r.finish_reason
    seconds = time.perf_counter() - t
    opened = text.count(json_tools.tool_call_start)
    segments = re.findall(re.escape(json_tools.tool_call_start) + "(.*?)" + re.escape(json_tools.tool_call_end),
                          text, re.S)
    calls, ok = [], opened == len(segments)  # a call opened and never closed is a broken call
    for seg in segments:
        try:
            c = json_tools.parse_tool_call(seg, DEMO_TOOLS)
            calls.append((c["name"], c["arguments"]))
        except (ValueError, KeyError, TypeError):
            ok = False
    ok = ok and judge_calls(calls)
    return {"valid": ok, "names": [c[0] for c in calls], "cut": finish == "length", "open": opened > len(segments),
            "tokens": n, "seconds": seconds, "attempted": opened > 0}


def constrained(model, tok, prompt_ids, sampler, max_tokens):
    t = time.perf_counter()
    r = engine.generate(model, tok, prompt_ids, tools=DEMO_TOOLS, max_tokens=max_tokens, sampler=sampler)
    seconds = time.perf_counter() - t
    calls = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in r.tool_calls]
    return {"valid": judge_calls(calls) and not r.errors, "names": [c[0] for c in calls],
            "cut": r.finish_reason == "length", "open": False,  # a call that opened is closed before the budget
            "tokens": r.usage["completion_tokens"], "seconds": seconds, "attempted": bool(calls)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS_VALIDITY.md"))
    args = ap.parse_args()
    t0 = time.perf_counter()
    model, tok = engine.load_default_model()
    prompts = probe_prompts(args.prompts, seed=12345)
    ids = [tok.apply_chat_template([{"role": "user", "content": p}], tools=DEMO_TOOLS, add_generation_prompt=True,
                                   tokenize=True) for p, _ in prompts]
    ids = [list(x["input_ids"] if hasattr(x, "keys") else x) for x in ids]
    engine.generate(model, tok, ids[0], tools=DEMO_TOOLS, max_tokens=4)  # compile once, outside the timings
    rows = []
    for temp in TEMPERATURES:
        for mode, run in (("mlx-lm alone", unconstrained), ("toolgate", constrained)):
            tally = {"valid": 0, "fitting": 0, "cut": 0, "open": 0, "attempted": 0, "tokens": 0, "seconds": 0.0}
            for i, ((_, want), prompt_ids) in enumerate(zip(prompts, ids)):
                mx.random.seed(i)
                got = run(model, tok, mx.array(prompt_ids), make_sampler(temp=temp), args.max_tokens)
                tally["valid"] += got["valid"]
                tally["fitting"] += bool(got["valid"] and got["names"][:len(want)] == want and (want or not got["names"]))
                tally["cut"] += got["cut"]
                tally["open"] += got["open"]
                tally["attempted"] += got["attempted"]
                tally["tokens"] += got["tokens"]
                tally["seconds"] += got["seconds"]
            n = len(prompts)
            rows.append({"temperature": temp, "mode": mode, "valid": tally["valid"] / n,
                         "fitting": tally["fitting"] / n, "cut": tally["cut"] / n, "open": tally["open"] / n,
                         "attempted": tally["attempted"] / n, "tokens_per_s": tally["tokens"] / tally["seconds"]})
            log(f"{temp} {mode}: {rows[-1]}")
    write(rows, args, time.perf_counter() - t0)
    return 0


def write(rows: list[dict], args, seconds: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(args.out)
    lines = [
        "# Validity: the embedded model with and without the constraint",
        "",
        f"Command: `python benchmarks/bench_validity.py --prompts {args.prompts} --max-tokens {args.max_tokens}` "
        f"({seconds / 60:.1f} min). Machine: {platform.machine()}, {platform.system()}, MLX CPU backend; "
        f"mlx {mx.__version__}.",
        "",
        f"{args.prompts} prompts from the model's task families (seed 12345, not the training seed), the four demo "
        "tools offered, tool_choice auto, the same seed per prompt in both modes. *valid*: every call the turn "
        "attempted parses, validates against its tool's schema and names an offered tool (a turn with no call "
        "counts as valid); *fitting*: valid and calls the tools the prompt asks for, in order (none for small "
        "talk); *cut*: the budget ended the turn; *call left open*: a call began and the budget ended it; "
        "*attempted*: the turn has a call. tokens/s is over whole requests (prompt included), so it is "
        "dominated by per-request work on these short turns; bench_core and bench_tools measure throughput.",
        "",
        "| temperature | mode | valid | fitting | cut at max_tokens | call left open | attempted a call | tokens/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['temperature']} | {r['mode']} | {r['valid']:.1%} | {r['fitting']:.1%} | {r['cut']:.1%} "
                     f"| {r['open']:.1%} | {r['attempted']:.1%} | {r['tokens_per_s']:.0f} |")
    out.write_text("\n".join(lines) + "\n")
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.4))
    for ax, key, title in ((axes[0], "valid", "turns whose calls are all valid"),
                           (axes[1], "fitting", "turns that call the fitting tool")):
        for mode, style in (("mlx-lm alone", "o--"), ("toolgate", "s-")):
            pts = [(r["temperature"], r[key]) for r in rows if r["mode"] == mode]
            ax.plot([p[0] for p in pts], [100 * p[1] for p in pts], style, label=mode)
        ax.set_xlabel("temperature")
        ax.set_ylabel("% of turns")
        ax.set_ylim(0, 105)
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(out.parent / "validity.png", dpi=110)
    log(f"wrote {out} and {out.parent / 'validity.png'}")


if __name__ == "__main__":
    sys.exit(main())
