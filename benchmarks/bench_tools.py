"""Tool-call benchmark: compile time for 1/10/50/150 real tools per family (cold, warm from memory,
warm from disk, one tool added to a warm set) and the per-token cost inside a tool-call generation.

    python benchmarks/bench_tools.py --quick     # hermes only, 1/10/50 tools (a few minutes)
    python benchmarks/bench_tools.py             # every family, 1/10/50/150 tools

Tools come from ../shared/data (BFCL with its types mapped to JSON Schema, then MCP server tools),
in file order; tools our strict compiler refuses are counted and skipped. Everything is measured
side by side in one run and written to benchmarks/RESULTS_TOOLS.md with the command line.
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
from transformers import AutoTokenizer  # noqa: E402

import engine  # noqa: E402
from common import alternating_rates, log, pct, step_ratio  # noqa: E402
from engine.automata.index import vocabulary_trie  # noqa: E402
from engine.json_schema import schema_to_regex  # noqa: E402
from engine.tools.calls import normalize_tools  # noqa: E402
from engine.tools.compile import tool_vocab  # noqa: E402
from models import write_random_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TOOLGATE_SHARED", ROOT.parent / "shared"))
TOKENIZER_OF = {"hermes": "qwen3", "qwen3_coder": "qwen3", "kimi_k2": "kimi-k2", "glm47": "glm4",
                "glm45": "glm4", "harmony": "gpt-oss", "llama3_json": "llama3", "mistral": "mistral"}
BFCL_FILES = ["simple_python", "multiple", "parallel_multiple", "live_simple", "live_multiple"]
# a parameter of any shape (an object without properties): its arguments are linked (one small
# recursive definition); also timed alone, per family
FREE_FORM = {"puppeteer_navigate"}


def tool_pool(limit: int) -> list[dict]:
    types = json.loads((SHARED / "data/bfcl/type_mapping_gorilla_to_openapi.json").read_text())

    def conv(node):
        if isinstance(node, list):
            return [conv(n) for n in node]
        if not isinstance(node, dict):
            return node
        out = {}
        for k, v in node.items():
            if k == "type" and isinstance(v, str):
                out[k] = types.get(v, v)
            elif k == "properties" and isinstance(v, dict):
                out[k] = {p: conv(s) for p, s in v.items()}
            elif k in ("items", "additionalProperties", "anyOf", "oneOf", "allOf"):
                out[k] = conv(v)
            elif k != "optional":
                out[k] = v
        return out

    tools, seen = [], set()
    for name in BFCL_FILES:
        for line in (SHARED / f"data/bfcl/{name}.jsonl").read_text().splitlines():
            for f in json.loads(line).get("function", []):
                if f["name"] not in seen and engine.tools.calls.NAME_RE.fullmatch(f["name"]):
                    seen.add(f["name"])
                    tools.append({"type": "function", "function": {"name": f["name"], "parameters": conv(f["parameters"])}})
    for line in (SHARED / "data/mcp_tools/tools.jsonl").read_text().splitlines():
        t = json.loads(line)["tool"]
        if t["name"] not in seen:
            seen.add(t["name"])
            tools.append({"type": "function", "function": {"name": t["name"], "parameters": t["inputSchema"]}})
    return tools[:limit * 2]


def forget() -> None:
    """Drop every in-memory cache once the disk cache (what TOOLGATE_CACHE_DIR points at) holds
    every automaton compiled so far (its writes happen on a writer thread)."""
    engine.automata.store.flush()
    engine.clear_caches(vocabularies=False)


def fresh_disk() -> None:
    os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="toolgate-bench-")


def usable(tok, family, pool, n):
    """The first n tools of the pool that compile strictly (refusals counted)."""
    good, refused = [], []
    for t in pool:
        if len(good) == n:
            break
        try:
            normalize_tools([t])
            schema_to_regex(t["function"]["parameters"])
            good.append(t)
        except engine.ToolgateError as e:
            refused.append((t["function"]["name"], str(e)[:80]))
    return good, refused


def compile_series(family, sizes, pool, eager_limit):
    tok = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / TOKENIZER_OF[family]))
    tools, refused = usable(tok, family, pool, max(sizes) + 1)
    vocabulary_trie(tool_vocab(engine.vocabulary.build_vocab(tok), engine.tools.load_format(family)))
    rows = []  # the vocabulary itself (built once per tokenizer and process) is left out of the timings
    for n in sizes:
        chosen, extra = tools[:n], tools[n]
        fresh_disk()
        forget()
        t = time.perf_counter()
        engine.compile_tools(tok, chosen, format=family)
        cold_lazy = time.perf_counter() - t
        warm_memory = []
        for _ in range(20):
            t = time.perf_counter()
            engine.compile_tools(tok, chosen, format=family)
            warm_memory.append(time.perf_counter() - t)
        if n > eager_limit:  # eager compiles of 150 tools take minutes per family: measured for hermes only
            rows.append({"family": family, "n": n, "cold_lazy": cold_lazy, "cold_eager": float("nan"),
                         "warm_memory": statistics.median(warm_memory), "warm_disk": float("nan"),
                         "add_one": float("nan"), "one_tool": float("nan")})
            log(f"{family} {n}: {rows[-1]}")
            continue
        fresh_disk()
        forget()
        t = time.perf_counter()
        engine.compile_tools(tok, chosen, format=family, lazy=False)
        cold_eager = time.perf_counter() - t
        forget()
        t = time.perf_counter()
        engine.compile_tools(tok, chosen, format=family, lazy=False)
        warm_disk = time.perf_counter() - t
        t = time.perf_counter()
        engine.compile_tools(tok, chosen + [extra], format=family, lazy=False)
        add_one = time.perf_counter() - t
        fresh_disk()
        forget()
        engine.compile_tools(tok, chosen[:1], format=family, lazy=False)  # outer automaton, so only the tool counts
        t = time.perf_counter()
        engine.compile_tools(tok, chosen[:1] + [extra], format=family, lazy=False)
        one_tool = time.perf_counter() - t
        rows.append({"family": family, "n": n, "cold_lazy": cold_lazy, "cold_eager": cold_eager,
                     "warm_memory": statistics.median(warm_memory), "warm_disk": warm_disk,
                     "add_one": add_one, "one_tool": one_tool})
        log(f"{family} {n}: {rows[-1]}")
    return rows, refused


def free_form_tools(family):
    """Each FREE_FORM tool alone, cold (empty caches), eager: seconds."""
    tok = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / TOKENIZER_OF[family]))
    vocabulary_trie(tool_vocab(engine.vocabulary.build_vocab(tok), engine.tools.load_format(family)))  # as in the series
    out = []
    for line in (SHARED / "data/mcp_tools/tools.jsonl").read_text().splitlines():
        t = json.loads(line)["tool"]
        if t["name"] in FREE_FORM:
            fresh_disk()
            forget()
            tool = {"type": "function", "function": {"name": t["name"], "parameters": t["inputSchema"]}}
            s = time.perf_counter()
            engine.compile_tools(tok, [tool], format=family, lazy=False)
            out.append((t["name"], time.perf_counter() - s))
    return out


LONG_TOOL = {"type": "function", "function": {"name": "write_note", "parameters": {
    "type": "object", "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
    "required": ["title", "body"]}}}


def throughput(model, tok, runs, max_tokens):
    """tokens/s inside a required tool call (long string arguments) vs unconstrained, alternating."""
    fresh_disk()
    g = engine.compile_tools(tok, [LONG_TOOL], format="hermes", tool_choice="required", thinking=False)
    prompt = mx.array(tok.encode("Write a note:"))
    zero = mx.zeros((1, 151936))

    def zero_mask(tokens, logits):  # adding a mask that changes nothing, and reading nothing
        return logits + zero

    rates = alternating_rates(model, tok, prompt, max_tokens, runs, {
        "unconstrained": lambda: [], "floor: adding a zero mask": lambda: [zero_mask],
        "tool call": lambda: [g.matcher(max_tokens)]})
    calls = []
    logits = mx.zeros((1, 151936))
    mx.eval(logits)
    for seed in range(3):
        mx.random.seed(seed)
        res = engine.generate(model, tok, "Write a note:", tools=g, max_tokens=max_tokens, sampler=make_sampler(temp=1.0))
        for _ in range(2):  # the second pass has every mask built
            p = g.matcher(max_tokens)
            arrays = [mx.array([1, 2, 3] + res.token_ids[:i]) for i in range(len(res.token_ids) + 1)]
            mx.eval(arrays)
            times = []
            for arr in arrays:
                t = time.perf_counter()
                mx.eval(p(arr, logits))
                times.append((time.perf_counter() - t) * 1e6)
        calls += times
    floor = []
    for _ in range(300):
        t = time.perf_counter()
        mx.eval(logits + 0)
        floor.append((time.perf_counter() - t) * 1e6)
    return rates, calls, floor


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS_TOOLS.md"))
    args = ap.parse_args()
    families = ["hermes"] if args.quick else list(TOKENIZER_OF)
    sizes = [1, 10, 50] if args.quick else [1, 10, 50, 150]
    runs, max_tokens = (4, 128) if args.quick else (8, 200)
    pool = tool_pool(max(sizes) + 1)
    folder = write_random_model(SHARED / "tokenizers" / "qwen3", tempfile.mkdtemp(), vocab_size=151936)
    model, tok = mlx_lm.load(str(folder))
    log("throughput ...")
    rates, calls, floor = throughput(model, tok, runs, max_tokens)
    rows, refusals = [], {}
    for family in families:
        got, refused = compile_series(family, sizes, pool, max(sizes) if family == "hermes" else 50)
        rows += got
        refusals[family] = refused
    free = {family: free_form_tools(family) for family in families}
    lines = [
        "# Tool-call benchmark results", "",
        f"Command: `python benchmarks/bench_tools.py{' --quick' if args.quick else ''}`  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}; mlx {mx.__version__}, "
        f"mlx-lm {mlx_lm.__version__}. Tools: BFCL ({', '.join(BFCL_FILES)}; types mapped to JSON Schema) then "
        "MCP server tools, in file order, strict compile.", "",
        "## Throughput inside a tool call (hermes, required call with long string arguments; tiny random "
        "Qwen3-shaped model, 151,936 logits; alternating runs, same seeds)", "",
        "Ratio: the median time per token, every run's steps pooled, unconstrained over the run's (tokens/s per "
        "run drifts by up to 20 % here).", "",
        "| run | ratio, time per token | median ms per token | tokens/s, all runs |", "|---|---|---|---|",
    ]
    for k, v in rates.items():
        lines.append(f"| {k} | {step_ratio(rates, k):.3f} | {statistics.median(v['steps']) * 1000:.2f} | "
                     f"{', '.join(f'{x:.1f}' for x in v['rates'])} |")
    lines += ["", f"**Ratio tool call / unconstrained: {step_ratio(rates, 'tool call'):.3f}** (target 0.97); "
              f"adding a zero mask alone: {step_ratio(rates, 'floor: adding a zero mask'):.3f}; tool call / that "
              f"floor: {step_ratio(rates, 'tool call', 'floor: adding a zero mask'):.3f}.", "",
              "Processor time per call (advance + mask + add, evaluated, masks built): "
              f"p50 {pct(calls, 50):.0f} µs, p99 {pct(calls, 99):.0f} µs over {len(calls)} calls; "
              f"floor `logits + 0` p50 {pct(floor, 50):.0f} µs.", "",
              "## Compile time per family and tool count", "",
              "cold lazy: empty memory and disk caches, the default (each tool's arguments compile at its first "
              "call); cold eager: the same with `lazy=False` (everything compiled now); warm memory: the same "
              "request again (median of 20); warm disk: memory caches dropped, disk cache kept (eager); add one: "
              "the warm set plus one new tool (eager); one tool alone: that new tool's own compile, which is "
              "also what its first call costs in lazy mode.", "",
              "| family | tools | cold lazy (s) | cold eager (s) | warm memory (ms) | warm disk (s) | add one (s) | one tool alone (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['family']} | {r['n']} | {r['cold_lazy']:.3f} | {r['cold_eager']:.2f} | "
                     f"{r['warm_memory'] * 1000:.3f} | {r['warm_disk']:.3f} | {r['add_one']:.2f} | {r['one_tool']:.2f} |")
    lines += ["", "Targets: 50 tools cold under 2 s, warm under 5 ms; adding one tool costs about one tool's compile.", ""]
    for family, got in free.items():
        for name, secs in got:
            lines.append(f"MCP `{name}` (an object parameter of any shape, arguments linked) alone, cold eager "
                         f"({family}): {secs * 1000:.0f} ms.  ")
    for family, refused in refusals.items():
        if refused:
            lines.append(f"Refused by the strict compiler ({family}): " + "; ".join(f"`{n}`: {e}" for n, e in refused[:5])
                         + (f" (+{len(refused) - 5} more)" if len(refused) > 5 else ""))
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


if __name__ == "__main__":
    main()
