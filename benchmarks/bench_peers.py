"""Side by side with the peer engines: coverage, compliance, compile time, mask time, throughput.

    pip install -e .[bench]                       # llguidance, xgrammar, matplotlib (peers stay out of the runtime)
    python benchmarks/bench_peers.py --quick      # a few minutes on 2 cores
    python benchmarks/bench_peers.py              # more schemas, longer runs, the 0.6B shape, all tool families

One run, one machine, one vocabulary (Qwen3), the same JSONSchemaBench dev schemas for every
engine. Each (engine, schema) job runs in a forked child so a compile that exceeds the time
limit is killed without hanging the run; jobs run one at a time (single-threaded engines:
xgrammar with max_threads=1). Writes benchmarks/RESULTS.md and PNG plots beside it.

Engines:
- toolgate: this project, strict mode (the default): keywords the mask cannot enforce are refused.
- llguidance: LLMatcher over ``grammar_from_json_schema`` with its defaults.
- xgrammar: GrammarCompiler.compile_json_schema with its defaults (strict_mode=True).
- outlines-core: used plainly, as the outlines library does: ``build_regex_from_schema``, one
  ``Index`` per schema, ``get_allowed_tokens`` turned into a mask each step.
Lenient rows (toolgate ``strict=False``, llguidance ``lenient`` + ``coerce_one_of``) are run on the
schemas the default mode refused.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # random models, instances
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import mlx.core as mx  # noqa: E402
import mlx_lm  # noqa: E402
import numpy as np  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_tools  # noqa: E402
from common import alternating_rates, log, pct, step_ratio  # noqa: E402

import engine  # noqa: E402
from engine.automata.index import vocabulary_trie  # noqa: E402
from engine.tools.compile import tool_vocab  # noqa: E402
from instances import canonical_text  # noqa: E402
from models import write_random_model  # noqa: E402

try:
    import llguidance
    import llguidance.hf
    import llguidance.numpy
    import outlines_core
    import outlines_core.json_schema
    import xgrammar
    from xgrammar.kernels.apply_token_bitmask_mlx import apply_token_bitmask_mlx
except ImportError as e:  # pragma: no cover - a message, not a traceback
    sys.exit(f"bench_peers needs the bench extra (pip install -e .[bench]): {e}")

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TOOLGATE_SHARED", ROOT.parent / "shared"))
DATA = SHARED / "data" / "jsonschemabench"
WIDTH = 151936  # Qwen3's logits width
BIG = 1 << 30  # a budget that never binds (compliance is about the schema, not max_tokens)
LONG_SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"id": {"type": "integer"}, "label": {"type": "string"}},
    "required": ["id", "label"]}}}, "required": ["items"]}
XGRAMMAR_MODEL = {"hermes": "qwen_3", "qwen3_coder": "qwen_3_coder", "kimi_k2": "kimi", "glm47": "glm_4_7",
                  "harmony": "harmony", "llama3_json": "llama"}


class Refused(Exception):
    """The engine declined the schema (its own error, not a timeout)."""


# ---- engines: compile (to the first mask), match per token, and an mlx-lm processor ----

class Toolgate:
    name = "toolgate"

    def __init__(self, tok, lenient: bool = False, extra_keys: bool = False):
        self.tok, self.strict, self.extra_keys = tok, not lenient, extra_keys
        if lenient:
            self.name = "toolgate (lenient)"
        engine.compile_json_schema(tok, {"type": "integer"})  # vocabulary and byte trie, before any fork

    def compile(self, schema):
        try:
            # in this process: the harness's child already bounds time (the default builder
            # process would cost each fresh job child one fork)
            g = engine.compile_json_schema(self.tok, schema, strict=self.strict, timeout=None,
                                           extra_keys=self.extra_keys)
        except engine.ToolgateError as e:
            raise Refused(f"{type(e).__name__}: {e}") from None
        g.mask(g.initial_state, BIG, WIDTH)
        return g

    def matcher(self, g):
        return [g, g.initial_state]

    def consume(self, m, t) -> bool:
        nxt = m[0].step(m[1], t, BIG)
        if nxt is None:
            return False
        m[1] = nxt
        return True

    def mask(self, m):
        return m[0].mask(m[1], BIG, WIDTH)

    def accepting(self, m) -> bool:
        return m[0].is_final(m[1])

    def post_check(self, g, text: str) -> bool:
        """True when the after-generation check (lenient mode's unenforced keywords) rejects text."""
        return bool(g.validate(text)[1])

    def processor(self, g, max_tokens):
        return g.matcher(max_tokens)

    def warm(self, schema) -> dict:
        """Compile again from memory, then from the disk cache."""
        t = time.perf_counter()
        engine.compile_json_schema(self.tok, schema, strict=self.strict, timeout=None, extra_keys=self.extra_keys)
        memory = time.perf_counter() - t
        engine.automata.store.flush()  # the disk write happens on a writer thread, 0.1 s after the compile
        engine.clear_caches(vocabularies=False)
        t = time.perf_counter()
        g = engine.compile_json_schema(self.tok, schema, strict=self.strict, timeout=None, extra_keys=self.extra_keys)
        g.mask(g.initial_state, BIG, WIDTH)
        return {"warm_memory": memory, "warm_disk": time.perf_counter() - t}


class LLGuidance:
    name = "llguidance"

    def __init__(self, hf, lenient: bool = False):
        self.tok = llguidance.hf.from_tokenizer(hf, n_vocab=WIDTH)
        self.options = {"lenient": True, "coerce_one_of": True} if lenient else None
        if lenient:
            self.name = "llguidance (lenient)"

    def compile(self, schema):
        try:
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=self.options)
        except ValueError as e:
            raise Refused(str(e)) from None
        m = self.matcher(grammar)
        self.mask(m)
        if m[0].is_error():
            raise Refused(m[0].get_error()[:300])
        return grammar

    def matcher(self, grammar):
        return (llguidance.LLMatcher(self.tok, grammar, log_level=0), llguidance.numpy.allocate_token_bitmask(1, WIDTH))

    def consume(self, m, t) -> bool:
        return m[0].consume_token(t) and not m[0].is_error()

    def mask(self, m):
        llguidance.numpy.fill_next_token_bitmask(m[0], m[1])
        return m[1]

    def accepting(self, m) -> bool:
        return m[0].is_accepting() and not m[0].is_error()

    def apply(self, m, logits):
        return apply_token_bitmask_mlx(mx.array(self.mask(m)), logits, WIDTH)


class XGrammar:
    name = "xgrammar"

    def __init__(self, hf):
        self.info = xgrammar.TokenizerInfo.from_huggingface(hf, vocab_size=WIDTH)
        self.compiler = None  # made in the child: a compiler's thread pool must not cross a fork

    def compile(self, schema):
        if self.compiler is None:
            self.compiler = xgrammar.GrammarCompiler(self.info, max_threads=1, cache_enabled=False)
        try:
            cg = self.compiler.compile_json_schema(json.dumps(schema))
        except Exception as e:  # xgrammar raises RuntimeError/ValueError for what it cannot compile
            raise Refused(f"{type(e).__name__}: {str(e)[:300]}") from None
        self.mask(self.matcher(cg))
        return cg

    def matcher(self, cg):
        return (xgrammar.GrammarMatcher(cg), xgrammar.allocate_token_bitmask(1, WIDTH))

    def consume(self, m, t) -> bool:
        return m[0].accept_token(t)

    def mask(self, m):
        m[0].fill_next_token_bitmask(m[1])
        return m[1]

    def accepting(self, m) -> bool:
        return any(m[0].accept_token(e) for e in self.info.stop_token_ids[:1])

    def apply(self, m, logits):
        return apply_token_bitmask_mlx(mx.array(self.mask(m).numpy()), logits, WIDTH)


class OutlinesCore:
    name = "outlines-core"

    def __init__(self, vocab):
        tokens: dict[bytes, list[int]] = {}
        for i, b in enumerate(vocab.token_bytes):
            if b and i not in vocab.eos_ids:
                tokens.setdefault(b, []).append(i)
        self.eos = vocab.eos_ids[0]
        self.vocab = outlines_core.Vocabulary(self.eos, tokens)

    def compile(self, schema):
        try:
            regex = outlines_core.json_schema.build_regex_from_schema(json.dumps(schema))
            index = outlines_core.Index(regex, self.vocab)
        except Exception as e:  # plain ValueError/RuntimeError from the Rust side
            raise Refused(f"{type(e).__name__}: {str(e)[:300]}") from None
        self.mask([index, index.get_initial_state()])
        return index

    def matcher(self, index):
        return [index, index.get_initial_state()]

    def consume(self, m, t) -> bool:
        nxt = m[0].get_next_state(m[1], t)
        if nxt is None:
            return False
        m[1] = nxt
        return True

    def mask(self, m):
        bias = np.full(WIDTH, -np.inf, dtype=np.float32)
        bias[m[0].get_allowed_tokens(m[1])] = 0
        return mx.array(bias)

    def accepting(self, m) -> bool:
        return m[0].is_final_state(m[1])

    def apply(self, m, logits):
        return logits + self.mask(m)


class PeerProcessor:
    """mlx-lm logits processor around a peer's matcher: consume the newest token, apply the mask."""

    def __init__(self, eng, compiled):
        self.eng, self.m, self.started = eng, eng.matcher(compiled), False

    def __call__(self, tokens, logits):
        if self.started:
            self.eng.consume(self.m, int(np.asarray(tokens)[-1]))
        self.started = True
        return self.eng.apply(self.m, logits)


# ---- one (engine, schema) job in a forked child ----

def _job(conn, eng, schema, tests, mask_walks, warm):
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # xgrammar logs a warning per unsupported keyword use
    t = time.perf_counter()
    try:
        compiled = eng.compile(schema)
    except Refused as e:
        conn.send(("refused", time.perf_counter() - t, str(e)[:300]))
        return
    conn.send(("compiled", time.perf_counter() - t, None))
    results = []
    for valid, text, ids in tests:
        m = eng.matcher(compiled)
        ok = all(eng.consume(m, i) for i in ids) and eng.accepting(m)
        caught = ok and not valid and hasattr(eng, "post_check") and eng.post_check(compiled, text)
        results.append((valid, ok, caught))
    times = {"first": [], "again": []}
    for ids in mask_walks:
        for phase in ("first", "again"):
            m = eng.matcher(compiled)
            for i in ids:
                s = time.perf_counter()
                if not eng.consume(m, i):
                    break
                out = eng.mask(m)
                if isinstance(out, mx.array):  # MLX is lazy: the mask must exist, not just be promised
                    mx.eval(out)
                times[phase].append(time.perf_counter() - s)
    extra = eng.warm(schema) if warm and hasattr(eng, "warm") else {}
    conn.send(("done", results, times, extra))


def _warm_process_worker(conn, eng):
    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)
    try:
        eng.compile(LONG_SCHEMA)  # the process has compiled before, as a server's has
    except Refused:
        pass
    while True:
        try:
            schema = conn.recv()
        except EOFError:
            return
        os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="toolgate-warm-")  # nothing of it on disk
        if isinstance(eng, Toolgate):
            engine.clear_caches(vocabularies=False)  # nor in memory: each schema compiles cold
        t = time.perf_counter()
        try:
            eng.compile(schema)
            conn.send(time.perf_counter() - t)
        except Refused:
            conn.send(None)


def warm_process_compiles(eng, schemas: list, limit: float) -> list:
    """Seconds to the first mask of each schema, compiled one after another in one long-lived
    forked worker (a server's cold compile: no fresh process's first-use costs), toolgate's caches
    cleared before each; None where refused, past ``limit`` or where the worker died (the worker is
    then replaced)."""
    ctx = mp.get_context("fork")
    out, worker = [], None
    for schema in schemas:
        if worker is None:
            parent, child = ctx.Pipe()
            worker = (ctx.Process(target=_warm_process_worker, args=(child, eng), daemon=True), parent)
            worker[0].start()
            child.close()
        got = None
        try:
            worker[1].send(schema)
            answered = worker[1].poll(limit)
            if answered:
                got = worker[1].recv()
        except (EOFError, OSError):
            answered = False
        if not answered:
            worker[0].kill()
            worker[0].join()
            worker[1].close()
            worker = None
        out.append(got)
    if worker is not None:
        worker[1].close()
        worker[0].join(5)
        if worker[0].is_alive():
            worker[0].kill()
    return out


def run_job(eng, schema, tests, mask_walks, limit, walk_limit=300.0, warm=False) -> dict:
    ctx = mp.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_job, args=(child, eng, schema, tests, mask_walks, warm), daemon=True)
    t0 = time.perf_counter()
    p.start()
    child.close()
    rec: dict = {}
    try:
        if not parent.poll(limit):
            rec = {"status": "timeout", "compile": time.perf_counter() - t0}
        else:
            kind, secs, why = parent.recv()
            rec = {"status": kind, "compile": secs}
            if kind == "refused":
                rec["why"] = why
            elif parent.poll(walk_limit):
                _, rec["tests"], rec["mask"], extra = parent.recv()
                rec.update(extra)
            else:
                rec["walk_timeout"] = True
    except EOFError:
        rec = {"status": "crash", "compile": time.perf_counter() - t0, "why": f"exit code {p.exitcode}"}
    finally:
        if p.is_alive():
            p.kill()
        p.join()
        parent.close()
    return rec


# ---- 1-3: coverage, compliance, compile and mask times ----

def load_rows(per_subset):
    rows = []
    for path in sorted(DATA.glob("*.jsonl")):
        data = sorted((json.loads(line) for line in open(path)), key=lambda r: r["unique_id"])
        step = max(1, len(data) // per_subset)
        rows += data[::step][:per_subset]
    return rows


def schema_tests(hf, row):
    out = []
    for test in row["tests"]:
        try:
            text = canonical_text(test["data"], row["schema"])
        except (TypeError, ValueError, RecursionError):
            continue
        out.append((test["valid"], text, hf.encode(text, add_special_tokens=False)))
    return out


def schema_bench(engines, lenient, hf, rows, limit, walks_per_schema, max_walk):
    records = []
    for k, row in enumerate(rows):
        tests = schema_tests(hf, row)
        walks = [ids[:max_walk] for valid, _, ids in tests if valid][:walks_per_schema]
        for eng in engines:
            rec = run_job(eng, row["schema"], tests, walks, limit, warm=isinstance(eng, Toolgate))
            rec.update(engine=eng.name, subset=row["subset"], id=row["id"])
            records.append(rec)
            alt = lenient.get(eng.name)
            if alt is not None:  # the lenient mode only differs where the default refused
                lrec = run_job(alt, row["schema"], tests, walks, limit) if rec["status"] == "refused" else dict(rec)
                lrec.update(engine=alt.name, subset=row["subset"], id=row["id"])
                records.append(lrec)
        status = " ".join(f"{r['engine']}={r['status'][:4]}:{r['compile'] * 1000:.0f}ms"
                          for r in records if r["id"] == row["id"] and "lenient" not in r["engine"])
        log(f"[{k + 1}/{len(rows)}] {row['id']}: {status}")
    schema_of = {row["id"]: row["schema"] for row in rows}
    for eng in engines:
        recs = [r for r in records if r["engine"] == eng.name and r["status"] == "compiled"]
        log(f"{eng.name}: {len(recs)} compiles again in one long-lived process ...")
        for r, t in zip(recs, warm_process_compiles(eng, [schema_of[r["id"]] for r in recs], limit)):
            r["compile_warm_process"] = t
    return records


def tally(recs):
    """Coverage and compliance of one engine over some records."""
    out = {"schemas": len(recs), "compiled": 0, "timeouts": 0, "valid": 0, "valid_ok": 0, "invalid": 0,
           "invalid_ok": 0, "caught": 0}
    for r in recs:
        out["timeouts"] += r["status"] == "timeout"
        if r["status"] != "compiled":
            continue
        out["compiled"] += 1
        for valid, ok, caught in r.get("tests", []):
            if valid:
                out["valid"] += 1
                out["valid_ok"] += ok
            else:
                out["invalid"] += 1
                out["invalid_ok"] += ok
                out["caught"] += caught
    return out


# ---- 4: throughput ----

def throughput(model, tok, engines, runs, max_tokens):
    """Unconstrained (twice: the second run shows the noise floor) vs each engine, alternating, same seeds."""
    prompt = mx.array(tok.encode("Write a long JSON list of items:"))
    modes = {"unconstrained": lambda: [], "unconstrained again": lambda: []}
    for eng in engines:
        compiled = eng.compile(LONG_SCHEMA)
        modes[eng.name] = ((lambda c=compiled: [c.matcher(max_tokens)]) if isinstance(eng, Toolgate)
                           else (lambda e=eng, c=compiled: [PeerProcessor(e, c)]))
    return alternating_rates(model, tok, prompt, max_tokens, runs, modes, progress=True)


# ---- 5: tool-call compile time ----

def tool_bench(families, sizes, limit):
    pool = bench_tools.tool_pool(max(sizes) + 1)
    rows = []
    for family in families:
        hf = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / bench_tools.TOKENIZER_OF[family]))
        tools, _ = bench_tools.usable(hf, family, pool, max(sizes))
        vocab = tool_vocab(engine.vocabulary.build_vocab(hf), engine.tools.load_format(family))
        vocabulary_trie(vocab)
        info = None
        if family in XGRAMMAR_MODEL:
            try:
                info = xgrammar.TokenizerInfo.from_huggingface(hf)
            except Exception as e:
                log(f"  xgrammar cannot read the {family} tokenizer: {e}")
        for n in sizes:
            chosen = tools[:n]
            row = {"family": family, "n": n}
            for mode in ("lazy", "eager"):
                bench_tools.fresh_disk()
                bench_tools.forget()
                row[mode] = _timed(lambda: _ours_tools(hf, chosen, family, mode == "lazy"), limit)
            if info is not None:
                row["xgrammar"] = _timed(lambda: _xgrammar_tools(info, chosen, XGRAMMAR_MODEL[family]), limit)
            rows.append(row)
            log(f"  tools {family} {n}: " + ", ".join(f"{k}={v}" for k, v in row.items() if k not in ("family", "n")))
    return rows


def _ours_tools(hf, tools, family, lazy):
    g = engine.compile_tools(hf, tools, format=family, lazy=lazy, timeout=None)
    g.mask(g.initial_state, BIG, g.vocab.size)


def _xgrammar_tools(info, tools, model):
    tag = xgrammar.get_model_structural_tag(model, tools=tools)
    cg = xgrammar.GrammarCompiler(info, max_threads=1, cache_enabled=False).compile_structural_tag(tag)
    xgrammar.GrammarMatcher(cg).fill_next_token_bitmask(xgrammar.allocate_token_bitmask(1, info.vocab_size))


class _Call:
    name = "call"

    def __init__(self, fn):
        self.fn = fn

    def compile(self, _):
        try:
            self.fn()
        except Exception as e:
            raise Refused(f"{type(e).__name__}: {str(e)[:200]}") from None

    def matcher(self, _):
        return None


def _timed(fn, limit):
    rec = run_job(_Call(fn), None, [], [], limit)
    return rec["compile"] if rec["status"] == "compiled" else rec["status"] + (f" ({rec['why'][:80]})" if rec.get("why") else "")


# ---- report ----

def plots(records, engines, rates, out_dir) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in engines:
        recs = [r for r in records if r["engine"] == name]
        times = sorted(r["compile"] for r in recs if r["status"] == "compiled")
        if times:
            ax.step(np.array(times) * 1000, np.arange(1, len(times) + 1) / len(recs), where="post", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("time to first mask, ms (log)")
    ax.set_ylabel("share of all schemas compiled")
    ax.set_title("Compile time CDF (JSONSchemaBench dev sample, Qwen3 vocabulary)")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(out_dir / "compile_cdf.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name in engines:
        for phase, style in (("first", "-"), ("again", ":")):
            times = sorted(t for r in records if r["engine"] == name and "mask" in r for t in r["mask"][phase])
            if times:
                ax.plot(np.array(times) * 1e6, np.arange(1, len(times) + 1) / len(times), style,
                        label=f"{name} ({'first walk' if phase == 'first' else 'same walk again'})")
    ax.set_xscale("log")
    ax.set_xlabel("consume one token + next mask, µs (log)")
    ax.set_ylabel("share of steps")
    ax.set_title("Mask time CDF along valid instances")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.savefig(out_dir / "mask_cdf.png", dpi=110, bbox_inches="tight")
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels, values = [], []
    for model_name, r in rates.items():
        for name in r:
            if name != "unconstrained" and r[name]["steps"]:
                labels.append(f"{name}\n{model_name.split(' (')[0].replace('Qwen3-', '')}")
                values.append(step_ratio(r, name))
    ax.bar(range(len(values)), values, color=["C0" if "toolgate" in x else "C7" for x in labels])
    for i, v in enumerate(values):
        ax.text(i, v + 0.003, f"{v:.3f}", ha="center", fontsize=8)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(0.97, color="r", lw=0.8, ls="--", label="target 0.97")
    ax.set_ylim(0.8, 1.03)
    ax.set_xticks(range(len(values)))
    ax.set_xticklabels(labels, fontsize=7)
    ax.set_ylabel("median time per token, unconstrained / constrained (axis from 0.8)")
    ax.set_title("Throughput ratio with mlx-lm (random-weight Qwen3-shaped models, CPU)")
    ax.legend(loc="lower right")
    fig.savefig(out_dir / "throughput_ratio.png", dpi=110, bbox_inches="tight")
    plt.close(fig)


def version(dist):
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def fmt_ms(x):
    return f"{x * 1000:.3g}" if x == x else "–"


def tool_table(tool_rows) -> list[str]:
    lines = ["toolgate lazy is the default (each tool's arguments compile at its first call); eager compiles "
             "everything up front, like xgrammar's structural tag (`get_model_structural_tag`, families it "
             "covers; mistral and glm45 have no builtin tag). Each cell is one compile in a fresh forked child "
             "with an empty disk cache.", "",
             "| family | tools | toolgate lazy | toolgate eager | xgrammar structural tag |", "|---|---|---|---|---|"]
    for row in tool_rows:
        cells = [row.get(k, "–") for k in ("lazy", "eager", "xgrammar")]
        lines.append(f"| {row['family']} | {row['n']} | " + " | ".join(f"{c:.3f}" if isinstance(c, float) else str(c)
                                                                   for c in cells) + " |")
    return lines


def tools_report(argv: str, tool_rows, elapsed: float) -> str:
    """Section 5 alone (``--tools-only``)."""
    return "\n".join([
        "# Tool-call grammars beside xgrammar: compile to the first mask, s", "",
        f"Command: `python benchmarks/bench_peers.py {argv}` ({elapsed / 60:.0f} min), bench_peers' section 5 alone.  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}, Python {platform.python_version()}; "
        f"mlx {version('mlx')}, mlx-lm {version('mlx-lm')}, xgrammar {version('xgrammar')}. Tools: BFCL then MCP tools, "
        "in file order.", "", *tool_table(tool_rows)]) + "\n"


def report(args, records, names, rates, tool_rows, elapsed):
    subsets = sorted({r["subset"] for r in records})
    lines = [
        "# Benchmarks: mlx-toolgate beside llguidance, xgrammar and outlines-core", "",
        f"Command: `python benchmarks/bench_peers.py {args.argv}` ({elapsed / 60:.0f} min)  ",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, {platform.system()}, Python {platform.python_version()}; "
        f"mlx {version('mlx')}, mlx-lm {version('mlx-lm')}, mlx-toolgate {version('mlx-toolgate')}, "
        f"llguidance {version('llguidance')}, xgrammar {version('xgrammar')}, outlines-core {version('outlines-core')}.  ",
        f"Schemas: JSONSchemaBench dev split (../shared/data/jsonschemabench), every subset, {args.per_subset} per "
        f"subset (every k-th by id), {len({r['id'] for r in records})} in all; Qwen3 vocabulary (151,936 logits). "
        f"Each (engine, schema) job ran alone in a forked child with a {args.limit:g} s limit on the time to the "
        "first mask; one engine at a time, single-threaded.", "",
        "Instances are written compactly in the schema's key order (`tests/instances.py`, the same "
        "text for every engine), tokenized by the Qwen3 tokenizer and walked token by token; an instance counts as "
        "accepted when every token is allowed and the engine accepts the end. Under-constrained: an `invalid` "
        "instance accepted. Over-constrained: a `valid` instance rejected.", "",
        "Plots: [compile-time CDF](compile_cdf.png), [mask-time CDF](mask_cdf.png), "
        "[throughput ratios](throughput_ratio.png).", "",
        "## 1. Coverage and compliance, overall", "",
        "| engine | compiled | timeouts | valid accepted | over-constrained | invalid rejected | under-constrained |",
        "|---|---|---|---|---|---|---|",
    ]
    stats = {}
    for name in names:
        s = stats[name] = tally([r for r in records if r["engine"] == name])
        caught = f" ({s['caught']} caught by the after-generation check)" if "toolgate" in name and s["caught"] else ""
        lines.append(f"| {name} | {s['compiled']}/{s['schemas']} | {s['timeouts']} | {s['valid_ok']}/{s['valid']} | "
                     f"{s['valid'] - s['valid_ok']} | {s['invalid'] - s['invalid_ok']}/{s['invalid']} | "
                     f"**{s['invalid_ok']}**{caught} |")
    common = [i for i in {r["id"] for r in records}
              if all(r["status"] == "compiled" for r in records if r["id"] == i and "lenient" not in r["engine"])]
    lines += ["", f"On the {len(common)} schemas every default-mode engine compiled:", "",
              "| engine | valid accepted | invalid rejected | under-constrained |", "|---|---|---|---|"]
    for name in names:
        if "lenient" in name:
            continue
        s = tally([r for r in records if r["engine"] == name and r["id"] in common])
        lines.append(f"| {name} | {s['valid_ok']}/{s['valid']} | {s['invalid'] - s['invalid_ok']}/{s['invalid']} | {s['invalid_ok']} |")
    per = {(name, sub): tally([r for r in records if r["engine"] == name and r["subset"] == sub])
           for name in names for sub in subsets}

    def subset_table(title, cell, mark=lambda sub: ""):
        rows = ["", title, "", "| subset | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
        return rows + [f"| {sub}{mark(sub)} | " + " | ".join(cell(per[name, sub]) for name in names) + " |"
                       for sub in subsets]

    lines += subset_table("## Coverage per subset (schemas compiled within the limit)",
                          lambda s: f"{s['compiled']}/{s['schemas']}",
                          lambda sub: " (ours < llguidance)"
                          if per["toolgate", sub]["compiled"] < per["llguidance", sub]["compiled"] else "")
    lines += subset_table("## Compliance per subset (valid accepted · invalid accepted)",
                          lambda s: f"{s['valid_ok']}/{s['valid']} · {s['invalid_ok']}/{s['invalid']}")
    lines += ["", "## 2. Time to first mask (compile), ms, compiled schemas", "",
              "Each engine's first rows: the schema compiled in a freshly forked child (what every goal here is "
              "measured on); a fresh child pays first-use costs a long-lived process has behind it (page faults on "
              "memory it shares with its parent, ~2.6 µs each on this machine). 'process warm': the same schemas "
              "compiled one after another in one long-lived forked worker per engine (after the list of {id, label} "
              "objects of section 4), as a server compiles a schema it has not seen; toolgate's memory and disk "
              "caches cleared before each.", "",
              "| engine | compiled | p50 | p90 | p99 | max | timeouts |", "|---|---|---|---|---|---|---|"]
    for name in names:
        if "lenient" in name:
            continue
        t = [r["compile"] for r in records if r["engine"] == name and r["status"] == "compiled"]
        lines.append(f"| {name} | {len(t)} | {fmt_ms(pct(t, 50))} | {fmt_ms(pct(t, 90))} | {fmt_ms(pct(t, 99))} | "
                     f"{fmt_ms(max(t) if t else float('nan'))} | {stats[name]['timeouts']} |")
    for name in names:
        t = [r["compile_warm_process"] for r in records
             if r["engine"] == name and r["status"] == "compiled" and r.get("compile_warm_process") is not None]
        if t and "lenient" not in name:
            lines.append(f"| {name}, process warm | {len(t)} | {fmt_ms(pct(t, 50))} | {fmt_ms(pct(t, 90))} | "
                         f"{fmt_ms(pct(t, 99))} | {fmt_ms(max(t))} | |")
    for key, label in (("warm_memory", "toolgate warm, memory cache"), ("warm_disk", "toolgate warm, disk cache (to the first mask)")):
        t = [r[key] for r in records if r["engine"] == "toolgate" and key in r]
        lines.append(f"| {label} | {len(t)} | {fmt_ms(pct(t, 50))} | {fmt_ms(pct(t, 90))} | {fmt_ms(pct(t, 99))} | "
                     f"{fmt_ms(max(t) if t else float('nan'))} | |")
    lines += ["", "## 3. Time per token along valid instances (consume the token, then the next mask), µs", "",
              f"Up to {args.walks} valid instances per compiled schema, each walked twice in a fresh matcher: "
              "'first walk' includes the first visit of each state; 'again' is the same walk once those states have "
              "been seen (toolgate keeps each state's mask; the peers compute every mask anew). Masks in each "
              "engine's own form: toolgate an MLX array (the allowed ids where few are allowed, the banned ids where "
              "few are banned, else an additive row), llguidance and xgrammar a packed bitmask, "
              "outlines-core the allowed-token list written into an MLX additive mask.", "",
              "| engine | walk | steps | p50 | p99 | p99.9 | max |", "|---|---|---|---|---|---|---|"]
    for name in names:
        if "lenient" in name:
            continue
        for phase in ("first", "again"):
            t = [x * 1e6 for r in records if r["engine"] == name and "mask" in r for x in r["mask"][phase]]
            if t:
                lines.append(f"| {name} | {phase} | {len(t)} | {pct(t, 50):.1f} | {pct(t, 99):.1f} | "
                             f"{pct(t, 99.9):.0f} | {max(t):.0f} |")
    lines += ["", "## 4. End-to-end throughput with mlx-lm (alternating runs, same prompts and seeds)", "",
              "Tokens/s after the first token, one figure per run, drifts by up to 20 % between runs here, so the "
              "ratio is taken on the median time per token, every run's steps pooled (unconstrained over the "
              "engine's); the ratio of the tokens/s medians is beside it. `unconstrained again` is mlx-lm alone "
              "a second time: how far from 1 noise alone puts a ratio.", "",
              "The peers run through a processor of ours around their matcher (consume the newest token, fill the "
              "bitmask, apply it with xgrammar's MLX kernel `apply_token_bitmask_mlx`; llguidance's own `mlx` module "
              "uses a Metal kernel, which the CPU backend lacks; xgrammar's contrib processor feeds the prompt's last "
              "token to the matcher, so it cannot be used as shipped). outlines-core: allowed-token list to an "
              "additive mask. Schema: a list of {id, label} objects (long outputs).", "",
              "| model | engine | tokens/s (median) | ratio, time per token | ratio, tokens/s | median ms per token "
              "| tokens/s, all runs |", "|---|---|---|---|---|---|---|"]
    for model_name, r in rates.items():
        base = statistics.median(r["unconstrained"]["rates"])
        for name, v in r.items():
            if v["rates"]:
                med = statistics.median(v["rates"])
                lines.append(f"| {model_name} | {name} | {med:.1f} | {step_ratio(r, name):.3f} | {med / base:.3f} | "
                             f"{statistics.median(v['steps']) * 1000:.2f} | {', '.join(f'{x:.1f}' for x in v['rates'])} |")
    lines += ["", "## 5. Tool-call grammars: compile to the first mask, s (BFCL then MCP tools, in file order)", ""]
    lines += tool_table(tool_rows)
    refusals: dict[str, list[str]] = {}
    for r in records:
        if r["engine"] == "toolgate" and r["status"] != "compiled":
            why = r.get("why") or r["status"]
            if " at #" in why:  # 'SchemaError: 'oneOf' at #/pointer: reason' grouped by keyword and reason
                head, rest = why.split(" at #", 1)
                why = f"{head}: {rest.split(': ', 1)[-1]}"
            refusals.setdefault(why[:90], []).append(r["id"])
    lines += ["", "## Why toolgate refused (strict mode)", "", "| reason | schemas |", "|---|---|"]
    for why, ids in sorted(refusals.items(), key=lambda kv: -len(kv[1])):
        lines.append(f"| {why} | {len(ids)} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="a few minutes: 1 schema per subset, short runs")
    ap.add_argument("--per-subset", type=int, help="schemas per JSONSchemaBench subset")
    ap.add_argument("--limit", type=float, help="seconds allowed to reach the first mask")
    ap.add_argument("--extra-keys", action="store_true", help="toolgate writes undeclared object keys where allowed")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS.md"))
    ap.add_argument("--from-json", help="re-render the report and plots from a saved results_peers.json")
    ap.add_argument("--tools-only", action="store_true",
                    help="only the tool-call compile section, written to --out (default RESULTS_TOOLS_PEERS.md)")
    args = ap.parse_args()
    if args.tools_only:
        started = time.perf_counter()
        os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="toolgate-bench-")
        rows = tool_bench(list(bench_tools.TOKENIZER_OF), [1, 10, 50, 150], 120.0)
        out = Path(args.out) if args.out != ap.get_default("out") else ROOT / "benchmarks" / "RESULTS_TOOLS_PEERS.md"
        out.write_text(tools_report(" ".join(sys.argv[1:]), rows, time.perf_counter() - started))
        return
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        vars(args).update(saved["args"])
        out_dir = Path(args.out).parent
        seen = list(dict.fromkeys(r["engine"] for r in saved["records"]))
        names = [n for n in seen if "lenient" not in n] + [n for n in seen if "lenient" in n]
        plots(saved["records"], [n for n in names if "lenient" not in n], saved["rates"], out_dir)
        Path(args.out).write_text(report(args, saved["records"], names, saved["rates"], saved["tools"], saved["elapsed"]))
        return
    if not DATA.is_dir():
        sys.exit(f"JSONSchemaBench data not found at {DATA} (set TOOLGATE_SHARED)")
    args.per_subset = args.per_subset or (1 if args.quick else 6)
    args.limit = args.limit or (10.0 if args.quick else 30.0)
    args.walks = 2 if args.quick else 3
    args.argv = " ".join(sys.argv[1:])
    started = time.perf_counter()
    os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="toolgate-bench-")
    out_dir = Path(args.out).parent

    folder = write_random_model(SHARED / "tokenizers" / "qwen3", tempfile.mkdtemp(), vocab_size=WIDTH)
    model, tok = mlx_lm.load(str(folder))
    hf = AutoTokenizer.from_pretrained(str(SHARED / "tokenizers" / "qwen3"))
    log("setting up the engines (tokenizer conversions) ...")
    ours = Toolgate(tok, extra_keys=args.extra_keys)
    peers = [LLGuidance(hf), XGrammar(hf), OutlinesCore(engine.vocabulary.build_vocab(tok))]
    engines = [ours] + peers
    lenient = {"toolgate": Toolgate(tok, lenient=True), "llguidance": LLGuidance(hf, lenient=True)}
    names = [e.name for e in engines] + [e.name for e in lenient.values()]

    rates = {}
    log("throughput, tiny model ...")
    runs, max_tokens = (3, 64) if args.quick else (8, 200)
    rates["tiny (hidden 64, 2 layers)"] = throughput(model, tok, engines, runs, max_tokens)
    if not args.quick:
        log("throughput, Qwen3-0.6B shape (short) ...")
        big = write_random_model(SHARED / "tokenizers" / "qwen3", tempfile.mkdtemp(), vocab_size=WIDTH,
                                 hidden=1024, layers=28, heads=16)
        bmodel, btok = mlx_lm.load(str(big))
        rates["Qwen3-0.6B shape (hidden 1024, 28 layers)"] = throughput(bmodel, btok, engines, 2, 12)
        del bmodel

    rows = load_rows(args.per_subset)
    log(f"coverage, compliance, compile and mask times: {len(rows)} schemas x {len(engines)} engines ...")
    records = schema_bench(engines, lenient, hf, rows, args.limit, args.walks, 400 if args.quick else 1000)

    log("tool-call compile ...")
    families = ["hermes", "mistral"] if args.quick else list(bench_tools.TOKENIZER_OF)
    sizes = [1, 10] if args.quick else [1, 10, 50, 150]
    tool_rows = tool_bench(families, sizes, 60.0 if args.quick else 120.0)

    plots(records, [n for n in names if "lenient" not in n], rates, out_dir)
    text = report(args, records, names, rates, tool_rows, time.perf_counter() - started)
    Path(args.out).write_text(text)
    (out_dir / "results_peers.json").write_text(json.dumps({
        "args": {k: getattr(args, k) for k in ("quick", "per_subset", "limit", "walks", "argv")},
        "elapsed": time.perf_counter() - started, "records": records, "rates": rates, "tools": tool_rows}))
    print(text)


if __name__ == "__main__":
    main()
