"""Streaming parser cost per token as the output grows: incremental against re-reading everything.

A Qwen3 (Hermes) turn of N reasoning tokens and then a call, fed one token at a time; we time the
feeds of the last 200 reasoning tokens at each length (the cost a reasoning model pays per token
late in a long turn), and check that both parsers send the same deltas. Then a call whose JSON
arguments hold N tokens of code in a string (a coding agent writing a file): the feeds of the
last 200 argument tokens. Then the same call in qwen3_coder's XML parameters, the code as the
text parameter's value, streamed as it grows.

    python benchmarks/bench_stream.py     # writes benchmarks/RESULTS_STREAM.md
"""

from __future__ import annotations

import json
import platform
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from conftest import load_tokenizer  # noqa: E402
from engine import compile_tools  # noqa: E402
from engine.tools import StreamParser  # noqa: E402

LENGTHS = (1_000, 4_000, 16_000)
WINDOW = 200
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "write_file", "parameters": {
        "type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
        "required": ["path", "text"]}}}]


def turn(tok, n: int) -> list[int]:
    words = "The user asks about the weather , so I think about cities , seasons and units . "
    filler = tok.encode(words * (n // 10 + 1), add_special_tokens=False)[:n]
    head = tok.encode("<think>", add_special_tokens=False)
    tail = tok.encode('</think>\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
                      add_special_tokens=False)
    return head + filler + tail


def call_turn(tok, n: int) -> tuple[list[int], int]:
    """A turn that is one write_file call whose text argument holds about n tokens; (ids, where
    the argument's tokens end)."""
    code = "def f(x):\\n    return {\\\"a\\\": [x, 2]}\\n"
    head = tok.encode('<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "text": "',
                      add_special_tokens=False)
    body = tok.encode(code * (n // 8 + 1), add_special_tokens=False)[:n]
    while tok.decode(body).endswith("\\"):
        body = body[:-1]
    tail = tok.encode('"}}\n</tool_call>', add_special_tokens=False)
    return head + body + tail, len(head) + len(body)


def xml_call_turn(tok, n: int) -> tuple[list[int], int]:
    """``call_turn`` in qwen3_coder's format: the code is the text parameter's raw value."""
    code = "def f(x):\n    return {'a': [x, 2]}\n"
    head = tok.encode("<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n"
                      "<parameter=text>\n", add_special_tokens=False)
    body = tok.encode(code * (n // 8 + 1), add_special_tokens=False)[:n]
    tail = tok.encode("\n</parameter>\n</function>\n</tool_call>", add_special_tokens=False)
    return head + body + tail, len(head) + len(body)


def per_token(parser: StreamParser, ids: list[int], n: int) -> tuple[list[float], list[dict]]:
    times, deltas = [], []
    for i, t in enumerate(ids):
        start = time.perf_counter()
        deltas += parser.feed([t])
        if n - WINDOW <= i < n:
            times.append(time.perf_counter() - start)
    return times, deltas


def measure(g, make) -> list[tuple]:
    """Per length n: ``make(n)`` gives (ids, where the timed tokens end), fed to both parsers,
    which must send the same deltas; (n, incremental p50, max, re-read p50, max)."""
    rows = []
    for n in LENGTHS:
        ids, end = make(n)
        fast_t, fast_d = per_token(g.stream_parser(), ids, end)
        slow_t, slow_d = per_token(StreamParser(g.parser(), incremental=False), ids, end)
        assert masked(fast_d) == masked(slow_d), "the two parsers disagree"
        rows.append((n, statistics.median(fast_t), max(fast_t), statistics.median(slow_t), max(slow_t)))
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def table(what: str, rows: list[tuple]) -> list[str]:
    lines = [f"| {what} | incremental p50 | incremental max | re-read everything p50 | re-read max |",
             "|---|---|---|---|---|"]
    for n, fm, fx, sm, sx in rows:
        lines.append(f"| {n:,} | {fm * 1e6:.1f} µs | {fx * 1e6:.0f} µs | {sm * 1e6:.0f} µs | {sx * 1e6:.0f} µs |")
    return lines


def masked(deltas):
    return [re.sub(r'"call_[0-9a-f]+"', '"call_"', json.dumps(d)) for d in deltas]


def main() -> int:
    tok = load_tokenizer("qwen3")
    g = compile_tools(tok, TOOLS, format="hermes")
    rows = measure(g, lambda n: (turn(tok, n), n))
    call_rows = measure(g, lambda n: call_turn(tok, n))
    xml_rows = measure(compile_tools(tok, TOOLS, format="qwen3_coder"), lambda n: xml_call_turn(tok, n))
    lines = ["# Streaming parser: cost per token as the turn grows", "",
             f"Command: `python benchmarks/bench_stream.py`. Machine: {platform.machine()}, {platform.system()}. "
             f"A Hermes (Qwen3 vocabulary) turn of N reasoning tokens then one call, fed one token at a time; "
             f"times are of the feeds of the last {WINDOW} reasoning tokens. Both parsers sent the same deltas.", ""]
    lines += table("reasoning tokens", rows)
    lines += ["", "One call whose JSON arguments hold N tokens of code in a string; times of the feeds of the "
              f"last {WINDOW} argument tokens.", ""]
    lines += table("argument tokens", call_rows)
    lines += ["", "The same call in qwen3_coder's XML parameters: N tokens of code as the text parameter's value "
              f"(sent as it grows: each token a JSON string fragment); times of the feeds of the last {WINDOW} value tokens.", ""]
    lines += table("value tokens", xml_rows)
    (ROOT / "benchmarks" / "RESULTS_STREAM.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
