"""toolgate serve, through the official openai client and raw HTTP, on a real socket: every
tool_choice mode, streaming reassembled, structured outputs parsed, concurrent requests in one
batch, a client that goes away mid-stream, and bad requests answered with a 4xx naming the field."""

import asyncio
import contextlib
import json
import socket
import threading
import time

import httpx
import jsonschema
import openai
import pytest
import uvicorn
from pydantic import BaseModel

from engine import load_default_model
from engine.server import create_app

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "Local time in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "format": {"enum": ["12h", "24h"]}}, "required": ["city"]}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running(app):
    """``app`` served by uvicorn on a free port in a thread: yields its base URL."""
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    for _ in range(400):
        if srv.started:
            break
        time.sleep(0.05)
    assert srv.started
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(timeout=20)


@pytest.fixture(scope="module")
def server():
    model, tokenizer = load_default_model()
    app = create_app(model, tokenizer, "toolgate-default", max_active=8, max_waiting=8)
    with running(app) as url:
        yield url, app


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)


def check_calls(calls, tools=TOOLS):
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for call in calls:
        assert call.type == "function" and call.id
        assert call.function.name in schemas
        jsonschema.validate(json.loads(call.function.arguments), schemas[call.function.name])


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list()] == ["toolgate-default"]
    assert httpx.get(server[0] + "/health").json()["status"] == "ok"


@pytest.mark.parametrize("choice", ["auto", "required", "none", "named", "allowed"])
def test_every_tool_choice(client, choice):
    tool_choice = {"named": {"type": "function", "function": {"name": "get_time"}},
                   "allowed": {"type": "allowed_tools", "allowed_tools": {"mode": "required", "tools": [
                       {"type": "function", "function": {"name": "get_time"}}]}}}.get(choice, choice)
    for seed in range(3):
        r = client.chat.completions.create(model="toolgate-default", messages=ASK, tools=TOOLS, tool_choice=tool_choice,
                                           temperature=1.0, seed=seed, max_tokens=60)
        msg, reason = r.choices[0].message, r.choices[0].finish_reason
        calls = msg.tool_calls or []
        check_calls(calls)
        assert r.usage.completion_tokens <= 60
        if choice == "none":
            assert not calls and reason in ("stop", "length")
        elif choice in ("required", "named", "allowed"):
            assert calls and reason == "tool_calls"
            if choice != "required":
                assert {c.function.name for c in calls} == {"get_time"}
        else:
            assert reason == ("tool_calls" if calls else reason)


def test_greedy_answer_and_one_call_only(client):
    r = client.chat.completions.create(model="toolgate-default", messages=ASK, tools=TOOLS, temperature=0,
                                       parallel_tool_calls=False, tool_choice="required", max_tokens=60)
    calls = r.choices[0].message.tool_calls
    assert len(calls) == 1
    assert (calls[0].function.name, json.loads(calls[0].function.arguments)) == ("get_weather", {"city": "Paris"})


def test_streaming_reassembles_to_the_same_call(client):
    kwargs = dict(model="toolgate-default", messages=ASK, tools=TOOLS, tool_choice="required", temperature=0,
                  max_tokens=60)
    whole = client.chat.completions.create(**kwargs).choices[0].message.tool_calls
    chunks = list(client.chat.completions.create(stream=True, stream_options={"include_usage": True}, **kwargs))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-2].choices[0].finish_reason == "tool_calls" and chunks[-1].usage.completion_tokens > 0
    calls: dict = {}
    for c in chunks[:-1]:
        for d in c.choices[0].delta.tool_calls or []:
            got = calls.setdefault(d.index, {"id": d.id, "name": d.function.name, "arguments": ""})
            got["arguments"] += d.function.arguments or ""
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in whole]


FREE = {"type": "function", "function": {"name": "store", "description": "Store any JSON value.", "parameters": {
    "type": "object", "properties": {"payload": {}, "meta": {"type": "object"}}, "required": ["payload"]}}}


@pytest.mark.parametrize("stream", [False, True])
def test_untyped_parameters_through_the_server(client, stream):
    """A tool whose parameters take any value (linked arguments): sampled calls, whole and
    streamed, carry arguments valid for its schema."""
    for seed in range(3):
        kwargs = dict(model="toolgate-default", messages=ASK, tools=[FREE], tool_choice="required", temperature=1.0,
                      seed=seed, max_tokens=48)
        if not stream:
            calls = [(c.function.name, c.function.arguments)
                     for c in client.chat.completions.create(**kwargs).choices[0].message.tool_calls]
        else:
            got: dict = {}
            for c in client.chat.completions.create(stream=True, **kwargs):
                for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
                    slot = got.setdefault(d.index, [d.function.name, ""])
                    slot[1] += d.function.arguments or ""
            calls = [tuple(v) for v in got.values()]
        assert calls
        for name, arguments in calls:
            assert name == "store"
            jsonschema.validate(json.loads(arguments), FREE["function"]["parameters"])


class Weather(BaseModel):
    city: str
    celsius: int


def test_structured_output_parses_every_time(client):
    for seed in range(4):
        r = client.chat.completions.parse(model="toolgate-default", messages=ASK, response_format=Weather,
                                          temperature=1.0, seed=seed, max_tokens=40)
        assert isinstance(r.choices[0].message.parsed, Weather)


def test_multi_turn_with_tool_results(client):
    first = client.chat.completions.create(model="toolgate-default", messages=ASK, tools=TOOLS, temperature=0,
                                           tool_choice="required", max_tokens=60).choices[0].message
    messages = ASK + [first.model_dump(exclude_none=True)] + [
        {"role": "tool", "tool_call_id": c.id, "content": json.dumps({"celsius": 21})} for c in first.tool_calls]
    r = client.chat.completions.create(model="toolgate-default", messages=messages, tools=TOOLS, temperature=0,
                                       max_tokens=60)
    check_calls(r.choices[0].message.tool_calls or [])
    assert r.choices[0].finish_reason in ("stop", "tool_calls", "length")


def test_concurrent_requests_share_the_batch(server):
    """Sixteen mixed requests at once through AsyncOpenAI: each valid for its own request."""
    aclient = openai.AsyncOpenAI(base_url=server[0] + "/v1", api_key="unused", max_retries=0)

    async def one(i):
        kind = i % 4
        if kind == 3:
            r = await aclient.chat.completions.parse(model="toolgate-default", messages=ASK, response_format=Weather,
                                                     temperature=1.0, seed=i, max_tokens=40)
            return kind, r.choices[0].message.parsed
        choice = ["required", "auto", {"type": "function", "function": {"name": "get_time"}}][kind]
        if i % 2:
            chunks = [c async for c in await aclient.chat.completions.create(
                model="toolgate-default", messages=ASK, tools=TOOLS, tool_choice=choice, temperature=1.0, seed=i,
                max_tokens=50, stream=True)]
            return kind, chunks[-1].choices[0].finish_reason
        r = await aclient.chat.completions.create(model="toolgate-default", messages=ASK, tools=TOOLS,
                                                  tool_choice=choice, temperature=1.0, seed=i, max_tokens=50)
        return kind, r.choices[0]

    async def main():
        return await asyncio.gather(*(one(i) for i in range(16)))
    results = asyncio.run(main())
    for kind, got in results:
        if kind == 3:
            assert isinstance(got, Weather)
        elif isinstance(got, str):
            assert got in ("tool_calls", "stop", "length")
        else:
            check_calls(got.message.tool_calls or [])
            if kind in (0, 2):
                assert got.message.tool_calls
            if kind == 2:
                assert {c.function.name for c in got.message.tool_calls} == {"get_time"}
    assert httpx.get(server[0] + "/health").json()["requests"] == 0


def test_a_client_that_leaves_frees_its_slot(server):
    body = {"model": "toolgate-default", "messages": ASK, "stream": True, "max_tokens": 4000, "temperature": 1.0}
    with httpx.Client(timeout=30) as h:
        with h.stream("POST", server[0] + "/v1/chat/completions", json=body) as r:
            lines = r.iter_lines()
            assert next(lines).startswith("data: ")
            assert server[1].state.scheduler.load == 1
    for _ in range(100):
        if server[1].state.scheduler.load == 0:
            break
        time.sleep(0.05)
    assert server[1].state.scheduler.load == 0


BAD = [
    (b"{not json", 400, None),
    (b"[1, 2]", 400, None),
    ({"messages": ASK, "n": 3}, 400, "n"),
    ({"messages": ASK, "frobnicate": 1}, 400, "frobnicate"),
    ({"messages": ASK, "tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}}, 400,
     "tool_choice.function.name"),
    ({"messages": ASK, "response_format": {"type": "json_schema", "json_schema": {
        "name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}}}}, 400,
     "response_format.json_schema.schema"),
    ({"messages": ASK, "max_tokens": 0}, 400, "max_tokens"),
    ({"messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 3}, 400, "max_tokens"),
    ({"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages[0].role"),
    ({"messages": ASK, "model": "gpt-9"}, 404, "model"),
    ({"messages": ASK, "stop": "x", "tools": TOOLS}, 400, "stop"),
]


@pytest.mark.parametrize("body,status,param", BAD)
def test_bad_requests_get_a_4xx_naming_the_field(server, body, status, param):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    r = httpx.post(server[0] + "/v1/chat/completions", content=data, headers={"content-type": "application/json"})
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["message"] and err["param"] == param
    if param == "max_tokens" and body.get("max_tokens") == 3:
        assert "needs" in err["message"]  # how many tokens the shortest valid turn takes
    good = httpx.post(server[0] + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 5})
    assert good.status_code == 200


def test_oversized_body_is_413(server):
    r = httpx.post(server[0] + "/v1/chat/completions", content=b"{" + b" " * (9 << 20) + b"}",
                   headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["message"]


def test_stop_strings_cut_free_text(client):
    kwargs = dict(model="toolgate-default", messages=ASK, temperature=0, max_tokens=60, reasoning_effort="none")
    text = client.chat.completions.create(**kwargs).choices[0].message.content
    assert len(text) > 10
    stop = text[len(text) // 2:][:3]
    cut = client.chat.completions.create(stop=[stop], **kwargs)
    assert cut.choices[0].message.content == text[:text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(stop=[stop], stream=True, **kwargs)
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == text[:text.index(stop)]


def test_free_text_reasoning_is_split_out(client):
    """The family's thinking markers split free text into reasoning and content, streamed or not."""
    kwargs = dict(model="toolgate-default", messages=[{"role": "user", "content": "Hello there, how are you?"}],
                  temperature=0, max_tokens=60)
    msg = client.chat.completions.create(**kwargs).choices[0].message.model_dump()
    assert msg["reasoning_content"] and "<think>" not in msg["reasoning_content"] + (msg["content"] or "")
    parts = {"reasoning_content": "", "content": ""}
    for c in client.chat.completions.create(stream=True, **kwargs):
        delta = c.choices[0].delta.model_dump() if c.choices else {}
        for k in parts:
            parts[k] += delta.get(k) or ""
    assert parts == {"reasoning_content": msg["reasoning_content"], "content": msg["content"] or ""}


def key_paths(value, prefix=""):
    """Every key path in a JSON value, list positions as []."""
    out = set()
    if isinstance(value, dict):
        for k, v in value.items():
            out |= {prefix + "." + k} | key_paths(v, prefix + "." + k)
    elif isinstance(value, list):
        for v in value:
            out |= key_paths(v, prefix + "[]")
    return out


def sse_paths(text):
    paths = set()
    for line in text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            paths |= key_paths(json.loads(line[6:]))
    return paths


def test_answers_every_field_mlx_lm_server_does(server, tmp_path):
    """The same requests through mlx_lm.server and ours, on the same model: every key path in
    theirs (responses and stream chunks) is in ours."""
    import subprocess
    import sys

    from engine.default_model import build_default_model

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "mlx_lm.server", "--model", str(build_default_model()),
                             "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        theirs = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                httpx.get(theirs + "/v1/models", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        missing = set()
        for body in ({"messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 40},
                     {"messages": ASK, "temperature": 0, "max_tokens": 20},
                     {"messages": ASK, "tools": TOOLS, "temperature": 0, "max_tokens": 40, "stream": True,
                      "stream_options": {"include_usage": True}}):
            a = httpx.post(theirs + "/v1/chat/completions", json=body, timeout=60)
            b = httpx.post(server[0] + "/v1/chat/completions", json=body, timeout=60)
            assert a.status_code == b.status_code == 200
            if body.get("stream"):
                missing |= sse_paths(a.text) - sse_paths(b.text)
            else:
                missing |= key_paths(a.json()) - key_paths(b.json())
        assert not missing, f"fields mlx_lm.server answers and we do not: {sorted(missing)}"
    finally:
        proc.kill()
        proc.wait()


HARD = {"type": "object", "properties": {f"k{i}": {"type": "string", "minLength": 20, "maxLength": 150}
                                         for i in range(40)}, "required": [f"k{i}" for i in range(40)]}


def test_a_slow_compile_does_not_stall_running_streams(server):
    """A schema that takes a while to compile, sent while another stream runs: the stream's
    tokens keep coming (compiles run off the event loop and off the batch's thread)."""
    arrivals = []
    opened = threading.Event()

    def stream():  # 256 strings of 8 characters: over two thousand tokens, seconds of output
        body = {"messages": ASK, "stream": True, "max_tokens": 4000, "temperature": 1.0, "seed": 0,
                "response_format": {"type": "json_schema", "json_schema": {"name": "long", "schema": {
                    "type": "array", "items": {"type": "string", "minLength": 8, "maxLength": 8}, "minItems": 256}}}}
        with httpx.Client(timeout=60) as h, h.stream("POST", server[0] + "/v1/chat/completions", json=body) as r:
            assert r.status_code == 200
            for line in r.iter_lines():
                arrivals.append(time.perf_counter())
                opened.set()
                if len(arrivals) > 5 and done.is_set():
                    return

    done = threading.Event()
    reader = threading.Thread(target=stream, daemon=True)
    reader.start()
    assert opened.wait(30)
    time.sleep(0.2)
    t = time.perf_counter()
    body = {"messages": ASK, "max_tokens": 2000, "temperature": 0, "stream": True,
            "response_format": {"type": "json_schema", "json_schema": {"name": "hard", "schema": HARD}}}
    with httpx.Client(timeout=120) as h, h.stream("POST", server[0] + "/v1/chat/completions", json=body) as r:
        assert r.status_code == 200
        next(r.iter_lines())  # the first event goes out once the schema is compiled
        compile_end = time.perf_counter()
    done.set()
    reader.join(30)
    during = [a for a in arrivals if t <= a <= compile_end]
    gaps = [b - a for a, b in zip([t] + during, during + [compile_end])]
    assert compile_end - t > 0.5, "the schema should take a while, or this test shows nothing"
    assert len(during) > 20 and max(gaps) < 0.5, (compile_end - t, len(during), max(gaps))


def test_unknown_routes_and_methods_answer_in_openai_shape(server):
    r = httpx.get(server[0] + "/v1/nothing")
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.get(server[0] + "/v1/chat/completions")
    assert r.status_code == 405 and r.json()["error"]["message"]


def test_a_failing_processor_ends_only_its_own_request():
    """A job whose processor raises ends with an error; the sequences beside it in the batch finish."""
    from engine.server.scheduler import Job, Scheduler
    from engine.server.protocol import sampler

    model, tokenizer = load_default_model()
    ids = tokenizer.encode("Hello")
    ends: dict = {}
    done = threading.Event()

    def job(name, processors):
        def on_end(reason, error):
            ends[name] = (reason, error)
            if len(ends) == 3:
                done.set()
        return Job(ids, 30, sampler(1.0, 1.0, 0), processors, [], lambda t: False, on_end)

    def bad(tokens, logits):
        if tokens.size > len(ids) + 2:
            raise RuntimeError("this processor broke")
        return logits

    scheduler = Scheduler(model)
    try:
        for name, procs in (("a", []), ("bad", [bad]), ("b", [])):
            scheduler.submit(job(name, procs))
        assert done.wait(60)
    finally:
        scheduler.close()
    assert ends["bad"][0] == "error" and "broke" in str(ends["bad"][1])
    assert ends["a"][0] == ends["b"][0] == "length"


def test_unseeded_requests_share_a_sampler_and_seeded_ones_keep_their_draws():
    """Requests without a seed at one temperature share one sampler (mlx-lm then samples their
    rows in one call); a seeded request draws the same tokens alone or beside them."""
    import mlx.core as mx

    from engine.server.scheduler import Job, Scheduler
    from engine.server.protocol import sampler

    assert sampler(0.7, 0.9, None) is sampler(0.7, 0.9, None)
    assert sampler(0.7, 0.9, None) is not sampler(0.7, 1.0, None)
    assert sampler(0.7, 0.9, 1) is not sampler(0.7, 0.9, 1)
    assert sampler(0.7, 0.9, None)(mx.zeros((3, 10))).shape == (3,)
    model, tokenizer = load_default_model()
    ids = tokenizer.encode("Hello")

    def seeded_tokens(neighbours: int) -> list[int]:
        tokens: dict[str, list[int]] = {}
        ended = threading.Semaphore(0)

        def job(name, seed):
            out = tokens.setdefault(name, [])
            return Job(ids, 20, sampler(1.0, 1.0, seed), [], [], lambda t: out.append(t) or False,
                       lambda reason, error: ended.release())

        scheduler = Scheduler(model)
        try:
            scheduler.submit(job("seeded", 11))
            for k in range(neighbours):
                scheduler.submit(job(f"free{k}", None))
            for _ in range(neighbours + 1):
                assert ended.acquire(timeout=60)
        finally:
            scheduler.close()
        return tokens["seeded"]

    alone = seeded_tokens(0)
    assert len(alone) == 20 and seeded_tokens(2) == alone
