"""The command line, end to end on the embedded default model (built once per session, offline)
and on a random-weight model with the real Qwen3 vocabulary."""

import json
from pathlib import Path

import jsonschema
import pytest

from conftest import tokenizer_dir
from engine.cli import main
from engine.default_model import DEMO_TOOLS

ROOT = Path(__file__).resolve().parents[1]
TOOLS = str(ROOT / "examples" / "weather.tools.json")
SCHEMA = str(ROOT / "examples" / "person.schema.json")


@pytest.fixture(scope="session")
def random_qwen3(tmp_path_factory):
    from models import write_random_model

    return str(write_random_model(tokenizer_dir("qwen3"), tmp_path_factory.mktemp("rq"), vocab_size=151936))


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def check_calls(result, tools, *, allowed=None):
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for call in result["tool_calls"]:
        name = call["function"]["name"]
        assert name in (allowed or schemas)
        jsonschema.validate(json.loads(call["function"]["arguments"]), schemas[name])


def test_default_run_offers_the_demo_tools(capsys):
    code, out, err = run(capsys, "run", "What's the weather in Paris?")
    assert code == 0, err
    result = json.loads(out)
    assert "demo tools" in err
    assert result["finish_reason"] in ("tool_calls", "stop")
    check_calls(result, DEMO_TOOLS)


def test_every_tool_choice_and_flag(capsys):
    for choice, extra in (("required", ["--no-parallel"]), ("get_time", ["--thinking"]), ("none", ["--no-thinking"]),
                          ("auto", ["--format", "hermes", "--temp", "1.5", "--seed", "7"])):
        code, out, err = run(capsys, "run", "--tools", TOOLS, "--tool-choice", choice, "--max-tokens", "40",
                             *extra, "What's the weather in Paris?")
        assert code == 0, (choice, err)
        result = json.loads(out)
        check_calls(result, json.loads(Path(TOOLS).read_text()))
        if choice in ("required", "get_time"):
            assert result["finish_reason"] == "tool_calls" and result["tool_calls"]
        if choice == "required":
            assert len(result["tool_calls"]) == 1
        if choice == "get_time":
            assert {c["function"]["name"] for c in result["tool_calls"]} == {"get_time"}
        if choice == "none":
            assert not result["tool_calls"]


def test_tiny_budgets_still_close_the_call(capsys):
    """From the shortest possible turn upward, every budget gives a closed, valid call."""
    shortest = None
    for budget in range(1, 40):
        code, out, err = run(capsys, "run", "--tools", TOOLS, "--tool-choice", "required", "--max-tokens",
                             str(budget), "--seed", str(budget), "Weather in Rome?")
        if code == 2:
            assert shortest is None and "cannot hold the shortest valid turn" in err
            continue
        shortest = shortest or budget
        result = json.loads(out)
        assert result["finish_reason"] == "tool_calls", (budget, result)
        assert result["usage"]["completion_tokens"] <= budget
        check_calls(result, json.loads(Path(TOOLS).read_text()))
    assert shortest is not None and shortest < 30


def test_stream_reassembles_to_the_result(capsys):
    code, out, err = run(capsys, "run", "--stream", "--tool-choice", "required", "--max-tokens", "50", "--temp", "0.8",
                         "--seed", "3", "What's the weather in Lima and in Oslo?")
    assert code == 0, err
    head, tail = out.split("\n{\n", 1)
    deltas = [json.loads(line) for line in head.splitlines()]
    final = json.loads("{\n" + tail)
    calls = {}
    for d in deltas:
        for c in d.get("tool_calls", []):
            slot = calls.setdefault(c["index"], {"name": "", "arguments": ""})
            slot["name"] += c.get("function", {}).get("name") or ""
            slot["arguments"] += c.get("function", {}).get("arguments") or ""
    assert [calls[i] for i in sorted(calls)] == [
        {"name": c["function"]["name"], "arguments": c["function"]["arguments"]} for c in final["tool_calls"]]
    assert deltas[-1]["finish_reason"] == final["finish_reason"] == "tool_calls"


def test_schema_output(capsys):
    for budget in ("12", "30"):
        code, out, err = run(capsys, "run", "--schema", SCHEMA, "--max-tokens", budget, "Who are you?")
        assert code == 0, err
        result = json.loads(out)
        assert result["finish_reason"] == "stop"
        jsonschema.validate(result["parsed"], json.loads(Path(SCHEMA).read_text()))


def test_run_on_a_model_path(capsys, random_qwen3):
    code, out, err = run(capsys, "run", "--model", random_qwen3, "--tools", TOOLS, "--tool-choice", "required",
                         "--max-tokens", "40", "Time in Tokyo?")
    assert code == 0, err
    assert json.loads(out)["finish_reason"] == "tool_calls"


def test_formats_and_check(capsys, random_qwen3):
    code, out, err = run(capsys, "formats")
    assert code == 0, err
    assert json.loads(out)["resolves_to"] == "hermes"
    code, out, err = run(capsys, "formats", "--tokenizer", str(tokenizer_dir("kimi-k2")))
    assert code == 0, err
    report = json.loads(out)
    assert report["resolves_to"] == "kimi_k2"
    assert {r["format"] for r in report["formats"] if r["usable"]} >= {"kimi_k2"}
    code, out, err = run(capsys, "formats", "--model", random_qwen3)
    assert code == 0 and json.loads(out)["resolves_to"] == "hermes", err
    code, out, err = run(capsys, "check", "--tools", TOOLS)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["tool"] for r in rows] == ["get_weather", "get_time"]
    assert all(r["shortest_call_tokens"] > 0 and r["automaton_states"] > 0 for r in rows)
    assert "compiling" in err
    code, out, err = run(capsys, "check", "--model", random_qwen3, "--tools", TOOLS)
    assert code == 0, err


def test_user_mistakes_are_one_line_errors(capsys, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    odd = tmp_path / "odd.json"
    odd.write_text('{"type": "object", "properties": {"a": {"type": "string", "not": {"pattern": "^x"}}}}')
    cases = [
        (["run", "--tools", str(bad), "x"], "not JSON"),
        (["run", "--tools", str(tmp_path / "missing.json"), "x"], "cannot read"),
        (["run", "--tools", TOOLS, "--format", "nope", "x"], "unknown tool-call format"),
        (["run", "--tools", TOOLS, "--tool-choice", "required", "--max-tokens", "2", "x"],
         "cannot hold the shortest valid turn"),
        (["run", "--schema", SCHEMA, "--max-tokens", "3", "x"], "cannot hold the shortest valid output"),
        (["run", "--tools", TOOLS, "--tool-choice", "fly", "x"], "not among the offered"),
        (["run", "--schema", str(odd), "x"], "'not'"),
        (["run", "--max-tokens", "0", "x"], "--max-tokens"),
        (["run", "--model", str(tmp_path / "no-model"), "x"], "cannot load the model"),
        (["check", "--tools", TOOLS, "--format", "kimi_k2"], "special tokens"),
    ]
    for argv, message in cases:
        code, out, err = run(capsys, *argv)
        errors = [line for line in err.splitlines() if line.startswith("toolgate: error:")]
        assert code == 2 and len(errors) == 1 and message in errors[0], (argv, err)
        assert "Traceback" not in err and out == ""
