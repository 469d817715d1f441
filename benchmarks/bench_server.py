"""toolgate serve against mlx_lm.server: total tokens/s and time to first token at 1, 4 and 16
concurrent clients, on the same model in the same run.

Both servers run as their own processes (`toolgate serve`, `python -m mlx_lm.server`); the clients
stream over HTTP (httpx) and count the tokens each response reports in its usage. Modes: free text
through each server (unconstrained), and through ours a required tool call and a JSON schema
(constrained). The model is a random-weight Qwen3-architecture model with the real Qwen3
vocabulary (written to a temporary folder; `--model` for another).

    python benchmarks/bench_server.py [--clients 1,4,16] [--requests 24] [--max-tokens 64] [--rounds 4]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from common import log, pct  # noqa: E402
from models import write_random_model  # noqa: E402

SHARED = Path(os.environ.get("TOOLGATE_SHARED", ROOT.parent / "shared"))
PROMPT = [{"role": "user", "content": "What's the weather in Paris? Tell me about it at length."}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
                                     "notes": {"type": "string"}}, "required": ["city", "notes"]}}}]
SCHEMA = {"type": "object", "properties": {"items": {"type": "array", "items": {
    "type": "object", "properties": {"name": {"type": "string"}, "qty": {"type": "integer"}}, "required": ["name"]}}},
    "required": ["items"]}
MODES = {
    "unconstrained": {},
    "tools (required)": {"tools": TOOLS, "tool_choice": "required"},
    "schema": {"response_format": {"type": "json_schema", "json_schema": {"name": "list", "schema": SCHEMA}}},
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(command: list[str], port: int) -> subprocess.Popen:
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(1200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=1)
            return proc
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit(f"server did not start: {' '.join(command)}")


async def one(client: httpx.AsyncClient, url: str, body: dict) -> tuple[float | None, int]:
    """Stream one request: (seconds to the first token, completion tokens); (None, 0) when the
    request failed (an HTTP error or a dropped connection)."""
    t = time.perf_counter()
    first, tokens = None, 0
    try:
        async with client.stream("POST", url + "/v1/chat/completions", json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                data = json.loads(line[6:])
                delta = data["choices"][0].get("delta", {}) if data.get("choices") else {}
                if first is None and any(delta.get(k) for k in ("content", "reasoning", "reasoning_content", "tool_calls")):
                    first = time.perf_counter() - t
                if data.get("usage"):
                    tokens = data["usage"]["completion_tokens"]
    except httpx.HTTPError:
        return None, 0
    return (first if first is not None else time.perf_counter() - t), tokens


async def load(url: str, body: dict, clients: int, requests: int, server: psutil.Process) -> dict:
    cpu = server.cpu_times()
    # one pool of ``requests`` requests, at most ``clients`` in flight (vLLM's --max-concurrency): a
    # client whose response ended early takes the next request, so the batch stays full until the pool
    # runs dry whatever the responses' lengths (with a chain of requests per client, a mode whose
    # valid responses end early left slots idle at the end and read as slower generation)
    pool = itertools.count()
    async with httpx.AsyncClient(timeout=600) as client:
        async def worker():
            got = []
            while next(pool) < requests:
                got.append(await one(client, url, body))
            return got
        t = time.perf_counter()
        done = await asyncio.gather(*(worker() for _ in range(clients)))
        wall = time.perf_counter() - t
    used = server.cpu_times()
    ttft = [f for w in done for f, _ in w if f is not None]
    tokens = sum(n for w in done for _, n in w)
    return {"tokens_per_s": tokens / wall, "ttft_p50": pct(ttft, 50), "ttft_p99": pct(ttft, 99), "tokens": tokens,
            "tokens_per_response": tokens / max(1, sum(len(w) for w in done)), "wall": wall,
            "failed": sum(f is None for w in done for f, _ in w),
            "cpu_per_token": (used.user + used.system - cpu.user - cpu.system) / max(tokens, 1)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", help="model folder (default: a random-weight model with the Qwen3 vocabulary)")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--requests", type=int, default=24, help="requests per run, from one pool")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=4, help="rounds; the servers and modes alternate within each")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "RESULTS_SERVER.md"))
    args = ap.parse_args()
    folder = args.model or str(write_random_model(SHARED / "tokenizers" / "qwen3", tempfile.mkdtemp(), vocab_size=151936))
    ours_port, theirs_port = free_port(), free_port()
    env_python = sys.executable
    ours = start([env_python, "-m", "engine", "serve", "--model", folder, "--port", str(ours_port), "--max-batch", "16"],
                 ours_port)
    theirs = start([env_python, "-m", "mlx_lm.server", "--model", folder, "--port", str(theirs_port)], theirs_port)
    urls = {"toolgate": f"http://127.0.0.1:{ours_port}", "mlx_lm.server": f"http://127.0.0.1:{theirs_port}"}
    procs = {"toolgate": psutil.Process(ours.pid), "mlx_lm.server": psutil.Process(theirs.pid)}
    runs = [("toolgate", m) for m in MODES] + [("mlx_lm.server", "unconstrained")]
    rows = {}
    try:
        base = {"model": folder, "messages": PROMPT, "max_tokens": args.max_tokens, "temperature": 1.0,
                "stream": True, "stream_options": {"include_usage": True}}
        for server, mode in runs:  # warm-up: compiles and first visits
            asyncio.run(load(urls[server], {**base, **MODES[mode]}, 1, 1, procs[server]))
        for clients in [int(c) for c in args.clients.split(",")]:
            for r in range(args.rounds):
                order = runs if r % 2 == 0 else runs[::-1]  # neither end of a round always goes first
                for server, mode in order:
                    got = asyncio.run(load(urls[server], {**base, **MODES[mode]}, clients, args.requests, procs[server]))
                    rows.setdefault((clients, server, mode), []).append(got)
                    log(f"  {clients} clients, {server}, {mode}: {got['tokens_per_s']:.1f} tok/s, "
                        f"TTFT p50 {got['ttft_p50'] * 1e3:.0f} ms, {got['cpu_per_token'] * 1e3:.1f} CPU ms/token, "
                        f"{got['tokens_per_response']:.1f} tokens/response, "
                        f"{got['failed']} failed")
    finally:
        ours.kill()
        theirs.kill()
    lines = ["# toolgate serve vs mlx_lm.server", "",
             f"Command: `python benchmarks/bench_server.py {' '.join(sys.argv[1:])}`. Machine: {os.uname().machine}, "
             f"{os.uname().sysname}, {os.cpu_count()} cores, CPU backend. Model: "
             f"{'random-weight Qwen3 architecture (hidden 64, 2 layers) with the real Qwen3 vocabulary (151,936)' if not args.model else args.model}. "
             f"Each run streams {args.requests} requests of up to {args.max_tokens} tokens (temperature 1) from one "
             "pool with at most the given number of clients in flight: a client takes the next request as soon as "
             "its response ends, so a mode whose responses end early keeps the batch as full; "
             f"{args.rounds} rounds, each running every server and mode once (in reverse order every other "
             "round). Ratios are taken within each round (the runs of one round are minutes apart, the rounds "
             "further) and the table gives their median and range over the rounds; "
             "tokens/s, time to first token and the server process's CPU time per token are medians over the rounds. "
             "Tokens are those each response's usage reports; time to first token is to the first chunk with text "
             "or a call.", "",
             "| clients | server | mode | tokens/s | vs our unconstrained (range) | vs mlx_lm.server (range) "
             "| server CPU ms / token | TTFT p50 ms | TTFT p99 ms | tokens / response | failed requests |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for clients in [int(c) for c in args.clients.split(",")]:
        ref, peer = rows[(clients, "toolgate", "unconstrained")], rows[(clients, "mlx_lm.server", "unconstrained")]
        for server, mode in runs:
            got = rows[(clients, server, mode)]
            ours_ratio = [g["tokens_per_s"] / u["tokens_per_s"] for g, u in zip(got, ref)]
            peer_ratio = [g["tokens_per_s"] / u["tokens_per_s"] for g, u in zip(got, peer)]
            med = {k: statistics.median(g[k] for g in got)
                   for k in ("tokens_per_s", "ttft_p50", "ttft_p99", "cpu_per_token", "tokens_per_response")}
            lines.append(
                f"| {clients} | {server} | {mode} | {med['tokens_per_s']:.1f} | {_spread(ours_ratio)} | "
                f"{_spread(peer_ratio)} | {med['cpu_per_token'] * 1e3:.1f} | {med['ttft_p50'] * 1e3:.0f} | "
                f"{med['ttft_p99'] * 1e3:.0f} | {med['tokens_per_response']:.1f} | "
                f"{sum(g['failed'] for g in got)} of {args.rounds * args.requests} |")
    text = "\n".join(lines) + "\n"
    Path(args.out).write_text(text)
    print(text)


def _spread(ratios: list[float]) -> str:
    return f"{statistics.median(ratios):.3f} ({min(ratios):.2f}-{max(ratios):.2f})"


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
