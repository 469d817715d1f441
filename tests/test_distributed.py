"""Two MLX processes over loopback (``mlx.launch --backend ring``), as on two Macs: the engine's
greedy and seeded sampled outputs under a schema and under tools equal the single-process ones,
with the model sharded tensor-parallel (Qwen3) or as a pipeline of layers (Qwen2: mlx-lm's Qwen3
has no pipeline mode); and ``toolgate serve`` so launched answers as one process does."""

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import mlx_lm
import pytest

from conftest import scale, tokenizer_dir
from distributed_worker import outputs
from engine.server import create_app
from models import write_random_model
from test_server import free_port, running

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"
# greedy by default (the server's checks add one seeded sampled stream); two seeds more with
# --full (two processes on loopback run about ten tokens a second on this two-core machine)
SAMPLINGS = scale(1, 3)
# by default the pipeline server is checked for equal answers (the tensor-parallel split is, through
# engine.generate) and refusals, batching and a killed rank run on the tensor-parallel one; every
# check on both with --full
OTHER_KINDS = ["tensor", "pipeline"][:scale(1, 2)]
EQUAL_KINDS = ["pipeline", "tensor"][:scale(1, 2)]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return write_random_model(tokenizer_dir("qwen3"), tmp_path_factory.mktemp("sharded"), vocab_size=151936,
                              layers=2)


@pytest.fixture(scope="module")
def pipeline_folder(tmp_path_factory):
    return write_random_model(tokenizer_dir("qwen3"), tmp_path_factory.mktemp("pipeline"), vocab_size=151936,
                              layers=2, model_type="qwen2")


def launcher() -> str:
    found = shutil.which("mlx.launch") or str(Path(sys.executable).parent / "mlx.launch")
    assert Path(found).exists(), "mlx.launch comes with mlx"
    return found


# the pipeline through engine.generate with --full; by default through the server (below)
@pytest.mark.parametrize("kind", ["tensor", "pipeline"][:scale(1, 2)])
def test_two_processes_give_the_single_process_outputs(request, kind, tmp_path):
    model_folder = request.getfixturevalue("model_folder" if kind == "tensor" else "pipeline_folder")
    out = tmp_path / "out.json"
    got = subprocess.run([launcher(), "--backend", "ring", "-n", "2", "--hosts", "127.0.0.1", "--python",
                          sys.executable, str(WORKER), str(model_folder), str(out), kind, str(SAMPLINGS)],
                         capture_output=True, text=True, timeout=600, cwd=str(WORKER.parent))
    # mlx.launch exits 0 even when a rank fails: the file rank 0 writes at the end is the proof
    assert got.returncode == 0 and out.exists(), got.stdout[-3000:] + got.stderr[-3000:]
    sharded = json.loads(out.read_text())
    assert sharded["size"] == 2
    model, tokenizer = mlx_lm.load(str(model_folder))
    single = outputs(model, tokenizer, SAMPLINGS)
    assert sharded["outputs"] == json.loads(json.dumps(single))
    assert any(o[0] == "required" and o[4] for o in single)  # calls were made, not only empty turns


# toolgate serve under mlx.launch: rank 0 serves HTTP and leads the batch, rank 1 follows it

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"]}}}]
SCHEMA = {"type": "object", "properties": {"id": {"type": "integer"}, "tags": {"type": "array", "items": {
    "type": "string", "maxLength": 6}, "maxItems": 3}}, "required": ["id", "tags"]}
ASK = [{"role": "user", "content": "Weather in Oslo?"}]


def bodies() -> list[dict]:
    """Greedy and seeded sampled requests: a schema, tools required and auto, one streamed."""
    out = []
    for sampling in ({"temperature": 0}, {"temperature": 1.0, "seed": 1}, {"temperature": 1.0, "seed": 2})[:SAMPLINGS]:
        out.append({"messages": ASK, "max_tokens": 24, **sampling,
                    "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": SCHEMA}}})
        for choice, budget in (("required", 36), ("auto", 24)):
            out.append({"messages": ASK, "tools": TOOLS, "tool_choice": choice, "max_tokens": budget, **sampling})
    out.append({"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 36, "temperature": 1.0,
                "seed": 3, "stream": True})
    return out


def answer(url: str, body: dict) -> dict:
    """The response reduced to what the model chose: text, calls (names, arguments), finish."""
    if not body.get("stream"):
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        choice = r.json()["choices"][0]
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in choice["message"].get("tool_calls", [])]
        return {"content": choice["message"]["content"], "calls": calls, "finish": choice["finish_reason"],
                "usage": r.json()["usage"]}
    content, calls, finish = "", {}, None
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            choice = json.loads(line[6:])["choices"][0]
            content += choice["delta"].get("content") or ""
            for c in choice["delta"].get("tool_calls", []):
                name, args = calls.get(c["index"], ("", ""))
                calls[c["index"]] = (name + (c["function"].get("name") or ""), args + (c["function"].get("arguments") or ""))
            finish = choice["finish_reason"] or finish
    return {"content": content, "calls": [calls[i] for i in sorted(calls)], "finish": finish}


def rank_pid(rank: int, port: int) -> int:
    """The process of ``rank`` among those mlx.launch started for the server on ``port`` (Linux),
    not one of the builder processes it forked (they share its command line and environment)."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError):
            continue
        if f"MLX_RANK={rank}".encode() in env and str(port).encode() in cmd and b"serve" in cmd:
            found[int(pid)] = parent
    ranks = [pid for pid, parent in found.items() if parent not in found]
    assert len(ranks) == 1, f"rank {rank} on port {port}: processes {found}"
    return ranks[0]


@pytest.fixture(scope="module", params=["tensor", "pipeline"])
def sharded(request, tmp_path_factory):
    """(kind, model folder, URL, launcher process): Qwen3's tokenizer (hermes calls) on a model
    split tensor-parallel, Llama 3's (its JSON calls) on one split into a pipeline."""
    kind = request.param
    if kind == "tensor":
        folder = request.getfixturevalue("model_folder")
    else:
        folder = write_random_model(tokenizer_dir("llama3"), tmp_path_factory.mktemp("pipe-llama3"),
                                    vocab_size=128256, layers=2, model_type="qwen2")
    port = free_port()
    log = open(tmp_path_factory.mktemp("log") / "serve.log", "w+")
    proc = subprocess.Popen([launcher(), "--backend", "ring", "-n", "2", "--hosts", "127.0.0.1", "--python",
                             sys.executable, str(Path(sys.executable).parent / "toolgate"), "serve", "--model",
                             str(folder), "--port", str(port), "--max-batch", "4"]
                            + (["--pipeline"] if kind == "pipeline" else []),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            assert proc.poll() is None, log.seek(0) or log.read()[-3000:]
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url + "/health", timeout=2).status_code == 200:
                    break
            time.sleep(0.5)
        else:
            raise AssertionError("the sharded server did not start in 300 s")
        yield kind, folder, url, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@pytest.mark.parametrize("sharded", OTHER_KINDS, indirect=True)
def test_sharded_server_refuses_bad_requests_before_any_rank_starts(sharded):
    """Refusals (the request, the schema, the tools, the budget) come before rank 1 is asked to
    run anything, so neither rank is left waiting: the next request is served as usual."""
    _, _, url, _ = sharded
    bad = [({"messages": ASK, "n": 3}, "n"),
           ({"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
               "name": "x", "schema": {"type": "nope"}}}}, "response_format.json_schema.schema"),
           ({"messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name"),
           ({"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 3}, "max_tokens")]
    for body, param in bad:
        r = httpx.post(url + "/v1/chat/completions", json=body, timeout=60)
        assert r.status_code == 400 and r.json()["error"]["param"] == param, r.text
    assert answer(url, bodies()[0])["finish"] == "stop"
    assert httpx.get(url + "/health").json()["requests"] == 0


@pytest.mark.parametrize("sharded", EQUAL_KINDS, indirect=True)
def test_sharded_server_answers_as_one_process_does(sharded):
    """Greedy and seeded sampled answers, under a schema and under tools, streamed or whole, equal
    the single-process server's on the same model, request by request."""
    kind, folder, url, _ = sharded
    model, tokenizer = mlx_lm.load(str(folder))
    with running(create_app(model, tokenizer, str(folder), max_active=4)) as single:
        expected = [answer(single, b) for b in bodies()]
    got = [answer(url, b) for b in bodies()]
    assert got == expected
    assert any(a["calls"] for a in got) and any(a["finish"] == "tool_calls" for a in got)


@pytest.mark.parametrize("sharded", OTHER_KINDS, indirect=True)
def test_sharded_server_batches_concurrent_requests(sharded):
    """Six requests at once, each with a tool only it offers: each gets its own calls, valid."""
    _, _, url, _ = sharded

    def own(i):
        return {"type": "function", "function": {"name": f"tool_{i}", "parameters": {
            "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}

    def call(i):
        body = {"messages": ASK, "tools": [own(i)], "tool_choice": "required", "max_tokens": 30,
                "temperature": 1.0}
        return answer(url, body)
    with ThreadPoolExecutor(6) as pool:
        got = list(pool.map(call, range(6)))
    for i, a in enumerate(got):
        assert a["finish"] == "tool_calls" and a["calls"], a
        for name, args in a["calls"]:
            assert name == f"tool_{i}"
            jsonschema.validate(json.loads(args), own(i)["function"]["parameters"])
    assert httpx.get(url + "/health").json()["requests"] == 0


@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds rank 1's process through /proc")
@pytest.mark.parametrize("sharded", OTHER_KINDS, indirect=True)
def test_a_killed_rank_is_answered_to_in_flight_clients(sharded):
    """Rank 1 killed mid-stream: the client's stream ends within seconds with an error event that
    says a rank was lost (rank 0 sees the ring fail, or mlx.launch stops it first), and the launch
    ends: mlx.launch stops rank 0, which does not wait on the dead rank."""
    _, _, url, proc = sharded
    port = int(url.rsplit(":", 1)[1])
    body = {"messages": ASK, "max_tokens": 3000, "temperature": 1.0, "stream": True}
    events = []
    with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(line[6:])
                if len(events) == 5:
                    os.kill(rank_pid(1, port), signal.SIGKILL)
                    killed = time.perf_counter()
    seconds = time.perf_counter() - killed
    message = json.loads(events[-1])["error"]["message"]
    assert len(events) > 5 and ("connection to a peer was lost" in message or "another rank ended" in message), message
    assert seconds < 15, seconds
    proc.wait(30)
