"""The official JSON Schema Test Suite (draft 2020-12, required tests) through toolgate and
llguidance, side by side: each group's schema compiled by each engine (strict/default), each
instance written compactly in the schema's key order, tokenized with the Qwen3 tokenizer and walked
token by token through the engine's matcher (as bench_peers does for JSONSchemaBench).

    pip install -e '.[bench]' && python benchmarks/bench_suite.py    # writes benchmarks/RESULTS_SUITE.md

A test passes when the engine's verdict equals the suite's (valid accepted, invalid rejected; a
refused schema rejects all its instances).
"""

from __future__ import annotations

import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_peers import LLGuidance, Toolgate, run_job, schema_tests  # noqa: E402
from common import log  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "fixtures" / "data" / "json-schema-test-suite"
LIMIT = 30.0


def main() -> int:
    sys.path.insert(0, str(ROOT / "tests"))
    from conftest import tokenizer_dir

    os.environ["TOOLGATE_CACHE_DIR"] = tempfile.mkdtemp(prefix="toolgate-suite-")  # cold: no earlier run's automata
    hf = AutoTokenizer.from_pretrained(str(tokenizer_dir("qwen3")))
    engines = [Toolgate(hf), LLGuidance(hf)]
    tallies = {e.name: {"groups compiled": 0, "groups refused": 0, "tests": 0, "passed": 0,
                        "invalid accepted": 0, "valid rejected": 0} for e in engines}
    per_file: dict[str, dict[str, list[int]]] = {}
    unspellable = 0
    t0 = time.perf_counter()
    files = sorted(SUITE.glob("*.json"))
    for path in files:
        for group in json.loads(path.read_text()):
            tests = schema_tests(hf, {"schema": group["schema"], "tests": [
                {"data": t["data"], "valid": t["valid"]} for t in group["tests"]]})
            # the tokenizer NFC-normalizes text: an instance it rewrites is not one a model can emit
            kept = [x for x in tests if hf.decode(x[2]) == x[1]]
            unspellable += len(tests) - len(kept)
            tests = kept
            for eng in engines:
                rec = run_job(eng, group["schema"], tests, [], LIMIT)
                t = tallies[eng.name]
                row = per_file.setdefault(path.stem, {}).setdefault(eng.name, [0, 0])
                row[1] += len(tests)
                if rec["status"] != "done" and "tests" not in rec:
                    t["groups refused"] += 1
                    t["tests"] += len(tests)
                    passed = sum(not valid for valid, _, _ in tests)
                else:
                    t["groups compiled"] += 1
                    results = rec.get("tests") or []
                    t["tests"] += len(results)
                    passed = sum(valid == ok for valid, ok, _ in results)
                    t["invalid accepted"] += sum(ok and not valid for valid, ok, _ in results)
                    t["valid rejected"] += sum(valid and not ok for valid, ok, _ in results)
                t["passed"] += passed
                row[0] += passed
        log(f"{path.stem}: " + ", ".join(f"{n} {per_file[path.stem][n][0]}/{per_file[path.stem][n][1]}"
                                          for n in per_file.get(path.stem, {})))
    elapsed = time.perf_counter() - t0
    names = [e.name for e in engines]
    lines = ["# JSON Schema Test Suite (draft 2020-12, required tests): toolgate and llguidance", "",
             f"Command: `python benchmarks/bench_suite.py` ({elapsed / 60:.1f} min). Machine: {platform.machine()}, "
             f"{platform.system()}. Qwen3 tokenizer; each instance written compactly in the schema's key order and "
             "walked token by token; strict/default modes; a refused schema rejects all its instances. "
             f"{unspellable} instances the tokenizer rewrites (NFC normalization: no model can emit their text) "
             "are left out.", "",
             "| | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for key in ("tests", "passed", "invalid accepted", "valid rejected", "groups compiled", "groups refused"):
        lines.append(f"| {key} | " + " | ".join(str(tallies[n][key]) for n in names) + " |")
    lines += ["", "Per file (tests passed / tests):", "", "| file | " + " | ".join(names) + " |",
              "|---|" + "---|" * len(names)]
    for stem, row in per_file.items():
        lines.append(f"| {stem} | " + " | ".join(f"{row[n][0]}/{row[n][1]}" for n in names) + " |")
    (ROOT / "benchmarks" / "RESULTS_SUITE.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[:12]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
