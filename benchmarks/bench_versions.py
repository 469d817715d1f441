"""toolgate at an earlier commit beside the working tree, on bench_peers' schemas, in one run.

    python benchmarks/bench_versions.py --base cf51c59          # writes benchmarks/RESULTS_VERSIONS.md

The base commit is checked out into a temporary git worktree. Two worker processes load the
engine, one from each tree (the harness is this tree's bench_peers for both); the schemas go to
them alternately, base first on even schemas, and each job runs in a forked child of its worker
with a fresh disk cache, as bench_peers runs its jobs: compile to the first mask, every test
instance walked for its verdict, up to 3 valid instances walked twice for per-token times. The
machine's speed drifts between minutes, so the per-schema ratio is the figure to trust, and for
first visits the ratio of the slow first-walk steps paired step by step (the walks are the same in
both versions). ``--raw`` keeps every record for a closer look.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SLOW_STEP = 0.3e-3  # s: a first-walk step this slow is a first visit's work, not a seen state's lookup
ROOT = HERE.parent


def worker(tree: str, per_subset: int, limit: float, extra_keys: bool) -> None:
    """Answer schema indices read from stdin with one JSON record each."""
    sys.path[:0] = [tree, str(HERE)]
    import engine
    if not engine.__file__.startswith(tree):
        sys.exit(f"engine imported from {engine.__file__}, not from {tree}")
    import bench_peers as bp
    import mlx_lm
    from transformers import AutoTokenizer
    folder = bp.write_random_model(bp.SHARED / "tokenizers" / "qwen3", tempfile.mkdtemp(), vocab_size=bp.WIDTH)
    _, tok = mlx_lm.load(str(folder))
    hf = AutoTokenizer.from_pretrained(str(bp.SHARED / "tokenizers" / "qwen3"))
    os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp()
    eng = bp.Toolgate(tok, extra_keys=extra_keys)
    rows = bp.load_rows(per_subset)
    print(json.dumps({"schemas": len(rows)}), flush=True)
    for line in sys.stdin:
        row = rows[int(line)]
        tests = bp.schema_tests(hf, row)
        walks = [ids[:1000] for valid, _, ids in tests if valid][:3]
        os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp()  # cold: nothing from an earlier job
        rec = bp.run_job(eng, row["schema"], tests, walks, limit)
        rec["id"] = row["id"]
        print(json.dumps(rec), flush=True)


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True).stdout.strip()


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def summary(recs: list[dict]) -> dict:
    comp = [r["compile"] for r in recs if r["status"] == "compiled"]
    first = [t for r in recs for t in r.get("mask", {}).get("first", [])]
    again = [t for r in recs for t in r.get("mask", {}).get("again", [])]
    return {
        "compiled": f"{len(comp)}/{len(recs)}",
        "p50": statistics.median(comp) * 1e3, "p90": pct(comp, .9) * 1e3, "p99": pct(comp, .99) * 1e3,
        "max": max(comp) * 1e3, "over_1s": sum(c > 1 for c in comp),
        "valid_rejected": sum(1 for r in recs for v, ok, _ in r.get("tests", []) if v and not ok),
        "invalid_accepted": sum(1 for r in recs for v, ok, _ in r.get("tests", []) if not v and ok),
        "first": (len(first), pct(first, .5) * 1e6, pct(first, .99) * 1e6, max(first) * 1e6, sum(t > 1e-3 for t in first)),
        "again": (pct(again, .5) * 1e6, pct(again, .99) * 1e6),
    }


def report(args, labels: dict[str, str], res: dict[str, list[dict]], minutes: float) -> str:
    lines = ["# toolgate, two versions side by side", "",
             f"Command: `python benchmarks/bench_versions.py {args.argv}` ({minutes:.0f} min)  ",
             f"Versions: base {labels['base']}, head {labels['head']}.  ",
             f"Schemas: bench_peers' JSONSchemaBench dev sample ({args.per_subset} per subset), Qwen3 vocabulary, "
             f"{args.limit:.0f} s limit; jobs alternate between the versions schema by schema, each in a forked "
             "child with a fresh disk cache.", "",
             "| version | compiled | compile p50 ms | p90 | p99 | max | over 1 s | valid rejected | invalid accepted "
             "| first walk: steps, p50 µs, p99, max, over 1 ms | again: p50 µs, p99 |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, recs in res.items():
        s = summary(recs)
        f, a = s["first"], s["again"]
        lines.append(f"| {name} | {s['compiled']} | {s['p50']:.1f} | {s['p90']:.0f} | {s['p99']:.0f} | {s['max']:.0f} | "
                     f"{s['over_1s']} | {s['valid_rejected']} | {s['invalid_accepted']} | "
                     f"{f[0]}, {f[1]:.1f}, {f[2]:.0f}, {f[3]:.0f}, {f[4]} | {a[0]:.1f}, {a[1]:.0f} |")
    base, head = ({r["id"]: r for r in res[k]} for k in ("base", "head"))
    both = [i for i in base if base[i]["status"] == head[i]["status"] == "compiled"]
    ratios = sorted((head[i]["compile"] / base[i]["compile"], i) for i in both)
    lines += ["", f"Compile time head / base, per schema compiled by both ({len(both)}): median "
              f"{statistics.median(r for r, _ in ratios):.2f}; the timings move by up to 2x between runs on this "
              "machine, so single schemas below 0.5 or above 2 are the ones to read.", "",
              "| schema | base ms | head ms | head / base |", "|---|---|---|---|"]
    for r, i in ratios:
        if r < 0.5 or r > 2:
            lines.append(f"| {i} | {base[i]['compile'] * 1e3:.0f} | {head[i]['compile'] * 1e3:.0f} | {r:.2f} |")
    # the same walks in both versions, step by step: first visits paired, where either was slow
    pairs = [(b, h) for i in both for b, h in zip(base[i].get("mask", {}).get("first", []),
                                                   head[i].get("mask", {}).get("first", [])) if max(b, h) > SLOW_STEP]
    if pairs:
        lines += ["", f"First-walk steps over {SLOW_STEP * 1e3:g} ms in either version, paired step by step "
                  f"({len(pairs)}): head / base median {statistics.median(h / b for b, h in pairs):.2f}, "
                  f"of their sums {sum(h for _, h in pairs) / sum(b for b, _ in pairs):.2f}."]
    verdicts = [(a[1], b[1]) for i in both for a, b in zip(base[i].get("tests", []), head[i].get("tests", []))]
    lines += ["", f"Instance verdicts on the schemas both compiled: {sum(a != b for a, b in verdicts)} of "
              f"{len(verdicts)} differ between the versions."]
    changed = [i for i in base if base[i]["status"] != head[i]["status"]]
    if changed:
        lines += ["", "Status changed: " + ", ".join(f"{i} ({base[i]['status']} -> {head[i]['status']})" for i in changed)]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--base", help="the earlier commit")
    ap.add_argument("--per-subset", type=int, default=5)
    ap.add_argument("--limit", type=float, default=30.0)
    ap.add_argument("--out", default=str(HERE / "RESULTS_VERSIONS.md"))
    ap.add_argument("--head-extra-keys", action="store_true",
                    help="the head compiles with extra_keys=True (with --base HEAD: that option's cost alone)")
    ap.add_argument("--extra-keys", action="store_true", help="both versions compile with extra_keys=True")
    ap.add_argument("--raw", help="also write every record (compile and per-step times) to this JSON file")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args.worker, args.per_subset, args.limit, args.head_extra_keys or args.extra_keys)
    if not args.base:
        ap.error("--base is required")
    args.argv = " ".join(sys.argv[1:])
    started = time.perf_counter()
    tree = tempfile.mkdtemp(prefix="toolgate-base-")
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", tree, args.base], check=True)
    dirty = " with uncommitted changes" if git("status", "--porcelain", "--", "engine") else ""
    labels = {"base": git("rev-parse", "--short", args.base), "head": git("rev-parse", "--short", "HEAD") + dirty
              + (" with extra_keys=True" if args.head_extra_keys else "")}
    if args.extra_keys:
        labels = {k: f"{v} with extra_keys=True" for k, v in labels.items()}
    try:
        cmd = [sys.executable, __file__, "--per-subset", str(args.per_subset), "--limit", str(args.limit)]
        both = ["--extra-keys"] if args.extra_keys else []
        extra = {"base": both, "head": both + (["--head-extra-keys"] if args.head_extra_keys else [])}
        procs = {k: subprocess.Popen(cmd + extra[k] + ["--worker", t], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True) for k, t in (("base", tree), ("head", str(ROOT)))}
        count = [json.loads(p.stdout.readline())["schemas"] for p in procs.values()][0]
        res: dict[str, list[dict]] = {"base": [], "head": []}
        for i in range(count):
            for k in (("base", "head") if i % 2 == 0 else ("head", "base")):
                procs[k].stdin.write(f"{i}\n")
                procs[k].stdin.flush()
                res[k].append(json.loads(procs[k].stdout.readline()))
            print(f"[{i + 1}/{count}] {res['base'][-1]['id']}: "
                  + " ".join(f"{k}={res[k][-1]['status'][:4]}:{res[k][-1]['compile'] * 1e3:.0f}ms" for k in res),
                  file=sys.stderr, flush=True)
        for p in procs.values():
            p.stdin.close()
            p.wait()
    finally:
        git("worktree", "remove", "--force", tree)
    if args.raw:
        Path(args.raw).write_text(json.dumps({"labels": labels, "records": res}))
    Path(args.out).write_text(report(args, labels, res, (time.perf_counter() - started) / 60))
    print(Path(args.out).read_text())


if __name__ == "__main__":
    main()
