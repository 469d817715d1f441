"""Load on toolgate serve: 32 concurrent mixed requests (tools in every mode, schemas, free text,
streams) on a random-weight model (Hermes on Qwen3's vocabulary; Llama 3's too with --full) and
on the embedded model. Each request offers a tool, or asks for a constant, that only it knows, so
a response that went to the wrong request shows; every response must parse and validate, none
may be lost, no slot may stay busy, and memory must stay flat over a few hundred requests."""

import asyncio
import gc
import json

import jsonschema
import mlx.core as mx
import openai
import pytest

import engine
from conftest import scale
from engine import load_default_model
from engine.server import create_app
from test_server import WEATHER, running
from test_soak import rss_mb
from test_tool_models import model_for

ASK = [{"role": "user", "content": "Call a tool or answer."}]


def own_tool(i):
    return {"type": "function", "function": {"name": f"tool_{i}", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}, "tag": {"type": "string", "maxLength": 6}},
        "required": ["n"]}}}


async def one(client, i, max_tokens):
    """Request i, checked against what it asked for; returns its kind."""
    kind = i % 4
    tools = [own_tool(i), WEATHER]
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    if kind == 2:
        schema = {"type": "object", "properties": {"req": {"const": i}, "x": {"type": "integer"}}, "required": ["req"]}
        r = await client.chat.completions.create(
            model="m", messages=ASK, max_tokens=max_tokens, temperature=1.0, seed=i,
            response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema, "strict": True}})
        value = json.loads(r.choices[0].message.content)
        jsonschema.validate(value, schema)
        assert value["req"] == i
        return kind
    if kind == 3:
        chunks = [c async for c in await client.chat.completions.create(
            model="m", messages=ASK, max_tokens=20, temperature=1.0, seed=i, stream=True,
            stream_options={"include_usage": True})]
        assert chunks[-1].usage.completion_tokens <= 20
        assert chunks[-2].choices[0].finish_reason in ("stop", "length")
        return kind
    choice = "required" if kind == 0 else {"type": "function", "function": {"name": f"tool_{i}"}}
    if kind == 0:
        r = await client.chat.completions.create(model="m", messages=ASK, tools=tools, tool_choice=choice,
                                                 max_tokens=max_tokens, temperature=1.0, seed=i)
        calls = [(c.function.name, c.function.arguments) for c in r.choices[0].message.tool_calls]
        assert r.choices[0].finish_reason == "tool_calls"
    else:
        calls = {}
        async for c in await client.chat.completions.create(model="m", messages=ASK, tools=tools, tool_choice=choice,
                                                            max_tokens=max_tokens, temperature=1.0, seed=i, stream=True):
            for d in (c.choices[0].delta.tool_calls or []) if c.choices else []:
                got = calls.setdefault(d.index, [d.function.name, ""])
                got[1] += d.function.arguments or ""
        calls = [tuple(v) for v in calls.values()]
        assert calls and {n for n, _ in calls} == {f"tool_{i}"}
    assert calls
    for name, arguments in calls:
        assert name in schemas, f"request {i} got a call to {name}"
        jsonschema.validate(json.loads(arguments), schemas[name])
    return kind


def load(url, n, max_tokens):
    async def main():
        client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=600)
        return await asyncio.gather(*(one(client, i, max_tokens) for i in range(n)))
    kinds = asyncio.run(main())
    assert sorted(kinds) == sorted(i % 4 for i in range(n))  # none lost


# one family by default: the scheduler under load is the same for every family (each family's
# generation runs through engine.generate in test_tool_models)
@pytest.mark.parametrize("family", ["hermes", "llama3_json"][:scale(1, 2)])
def test_32_concurrent_on_random_models(family, tmp_path_factory):
    model, tok = model_for(family, tmp_path_factory)
    app = create_app(model, tok, "m", max_active=16, max_waiting=32)
    with running(app) as url:
        load(url, 32, scale(36, 160))
    assert app.state.scheduler.load == 0


def test_memory_flat_over_hundreds_of_requests():
    model, tok = load_default_model()
    app = create_app(model, tok, "m", max_active=16, max_waiting=64)
    memory = []
    with running(app) as url:
        for _ in range(3):
            load(url, scale(48, 160), 60)
            engine.clear_caches(vocabularies=False)
            gc.collect()
            mx.clear_cache()
            memory.append(rss_mb())
    assert app.state.scheduler.load == 0
    print(f"\nserver memory after each round: {[round(m) for m in memory]} MB")
    assert memory[2] - memory[1] < 24, f"memory grew by {memory[2] - memory[1]:.0f} MB over a round of requests"
