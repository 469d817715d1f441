"""Digests of compiled automata, to check that a change leaves them identical state for state.

Compiles a JSONSchemaBench sample (3 schemas from each subset) and every family's tool grammar
(BFCL and MCP tools; auto and required; thinking as the model likes and off; every argument piece
compiled) on the real tokenizers, and hashes each materialised automaton's arrays (offsets, tokens,
targets, final, distances). JSON grammars and tool arguments compile lazily now; their regexes are
materialised here, and tests/test_lazy.py checks the lazy automata against the materialised ones. Schemas from ../shared (or TOOLGATE_SHARED); tokenizers from tests/fixtures.

    python benchmarks/automata_digests.py --write benchmarks/automata_digests.json   # record
    python benchmarks/automata_digests.py --check benchmarks/automata_digests.json   # compare
    python benchmarks/automata_digests.py --equal HEAD   # changed schema regexes: same language?
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

os.environ["TOOLGATE_CACHE_DIR"] = "off"  # build every automaton, never read one back
os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
SHARED = Path(os.environ.get("TOOLGATE_SHARED", Path(__file__).resolve().parents[2] / "shared"))

import numpy as np  # noqa: E402

import engine  # noqa: E402
from conftest import load_tokenizer  # noqa: E402
from engine.automata import compile_regex  # noqa: E402
from engine.json_schema import schema_to_regex  # noqa: E402
from engine.tools import FAMILIES  # noqa: E402
from engine.vocabulary import build_vocab  # noqa: E402
from test_toolcalls import offered_tools, tokenizer_for  # noqa: E402


def digest(a) -> str:
    h = hashlib.sha256()
    for arr in (a.offsets, a.tokens, a.targets, a.final, a.dist):
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:16]


def piece_digest(g, vocab, ti: int, p: int, piece) -> str:
    """A call piece's digest: its materialised automaton, or for linked arguments (whose automaton
    is not materialised) its regexes."""
    if piece.literal:
        return digest(g.pieces.piece(ti, p, 0))
    if piece.definitions:
        return "linked " + hashlib.sha256("\0".join([piece.text, *piece.definitions]).encode()).hexdigest()[:16]
    return digest(compile_regex(piece.text, vocab, timeout=20))


def digests() -> dict[str, str]:
    out = {}
    tok = load_tokenizer("qwen3")
    for f in sorted((SHARED / "data" / "jsonschemabench").glob("*.jsonl")):
        rows = sorted((json.loads(line) for line in open(f)), key=lambda r: r["unique_id"])
        for row in rows[:: max(1, len(rows) // 3)][:3]:
            key = f"schema {f.stem} {row['unique_id']}"
            try:
                regex = schema_to_regex(row["schema"]).regex
                out[key] = digest(compile_regex(regex, build_vocab(tok), timeout=20))
            except engine.ToolgateError as e:
                out[key] = "refused " + type(e).__name__
            print(key, out[key], file=sys.stderr, flush=True)
    for family in FAMILIES:
        tok = tokenizer_for(family)
        for choice in ("auto", "required"):
            for thinking in (None, False):
                key = f"tools {family} {choice} {thinking}"
                try:
                    g = engine.compile_tools(tok, offered_tools(family), format=family, tool_choice=choice,
                                             thinking=thinking, lazy=False)
                except engine.ToolgateError as e:
                    out[key] = "refused " + type(e).__name__
                    continue
                vocab = g.vocab
                parts = [digest(g.outer)] + [piece_digest(g, vocab, ti, p, piece)
                                             for ti in range(len(g.calls)) for p, piece in enumerate(g.calls[ti].pieces)]
                out[key] = " ".join(parts) + f" min={g.min_tokens}"
                print(key, out[key], file=sys.stderr, flush=True)
    return out


def same_language(a, b) -> bool:
    """A product walk of two materialised token automata from their initial states: every pair
    reached has the same tokens, the same acceptance and the same distance to acceptance."""
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        x, y = todo.pop()
        (ta, ga), (tb, gb) = a.row(x), b.row(y)
        if bool(a.final[x]) != bool(b.final[y]) or a.dist[x] != b.dist[y] or not np.array_equal(ta, tb):
            return False
        for pair in set(zip(ga.tolist(), gb.tolist())) - seen:
            seen.add(pair)
            todo.append(pair)
    return True


def old_translator(ref: str):
    """schema_to_regex as it was at git ``ref`` (loaded beside the current one for the run)."""
    root = Path(__file__).resolve().parents[1]
    text = subprocess.run(["git", "show", f"{ref}:engine/json_schema/translate.py"], cwd=root, check=True,
                          capture_output=True, text=True).stdout
    path = root / "engine" / "json_schema" / "_translate_at_ref.py"
    path.write_text(text)
    try:
        return importlib.import_module("engine.json_schema._translate_at_ref").schema_to_regex
    finally:
        path.unlink()


def equal_to(ref: str) -> int:
    """Schema cases whose regex changed since ``ref``: compile both and walk them in product."""
    old = old_translator(ref)
    tok = load_tokenizer("qwen3")
    vocab = build_vocab(tok)
    changed = differ = 0
    for f in sorted((SHARED / "data" / "jsonschemabench").glob("*.jsonl")):
        rows = sorted((json.loads(line) for line in open(f)), key=lambda r: r["unique_id"])
        for row in rows[:: max(1, len(rows) // 3)][:3]:
            try:
                a, b = old(row["schema"]).regex, schema_to_regex(row["schema"]).regex
                if a == b:
                    continue
                changed += 1
                same = same_language(compile_regex(a, vocab, timeout=20), compile_regex(b, vocab, timeout=20))
            except engine.ToolgateError as e:
                print(f"{f.stem} {row['unique_id']}: {type(e).__name__}: {str(e)[:80]} (not compared)")
                continue
            differ += not same
            print(f"{f.stem} {row['unique_id']}: regex changed, language {'equal' if same else 'DIFFERS'}")
    print(f"{changed} regexes changed since {ref}; {differ} accept a different language")
    return 1 if differ else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", metavar="FILE")
    mode.add_argument("--check", metavar="FILE")
    mode.add_argument("--equal", metavar="REF", help="product-check schema automata against the translator at git REF")
    args = ap.parse_args()
    if args.equal:
        return equal_to(args.equal)
    now = digests()
    if args.write:
        Path(args.write).write_text(json.dumps(now, indent=1, sort_keys=True) + "\n")
        return 0
    before = json.loads(Path(args.check).read_text())
    differ = sorted(k for k in before.keys() | now.keys() if before.get(k) != now.get(k))
    for k in differ:
        print(f"DIFFERS {k}\n  before: {before.get(k)}\n  now:    {now.get(k)}")
    print(f"{len(before)} recorded, {len(now)} now, {len(differ)} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
