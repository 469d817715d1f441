"""The command line, end to end on the local random-weight model (offline)."""

import json

import pytest

from conftest import TOKENIZERS, need_shared
from engine.cli import main

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
TOOLS = str(ROOT / "examples" / "weather.tools.json")
SCHEMA = str(ROOT / "examples" / "person.schema.json")


@pytest.fixture(autouse=True)
def _model_cache(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg"))


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_run_with_tools_every_choice(capsys):
    tok = str(need_shared(TOKENIZERS / "qwen3"))
    for choice, extra in (("required", []), ("get_time", ["--no-parallel"]), ("none", ["--no-thinking"]),
                          ("auto", ["--thinking"])):
        code, out, err = run(capsys, "run", "--tokenizer", tok, "--tools", TOOLS, "--tool-choice", choice,
                             "--max-tokens", "40", "--seed", "1", *extra, "What's the weather in Paris?")
        assert code == 0, err
        result = json.loads(out)
        if choice in ("required", "get_time"):
            assert result["finish_reason"] == "tool_calls" and result["tool_calls"]
        if choice == "get_time":
            assert [c["function"]["name"] for c in result["tool_calls"]] == ["get_time"]
        if choice == "none":
            assert not result["tool_calls"]


def test_run_stream_and_schema(capsys):
    tok = str(need_shared(TOKENIZERS / "qwen3"))
    code, out, err = run(capsys, "run", "--tokenizer", tok, "--tools", TOOLS, "--tool-choice", "required",
                         "--max-tokens", "30", "--stream", "--temp", "0.7", "Time in Tokyo?")
    assert code == 0, err
    lines = out.split("\n{\n", 1)
    deltas = [json.loads(line) for line in lines[0].splitlines()]
    final = json.loads("{\n" + lines[1])
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert [c["function"] for c in calls] == [c["function"] for c in final["tool_calls"]]
    assert deltas[-1]["finish_reason"] == final["finish_reason"] == "tool_calls"
    code, out, err = run(capsys, "run", "--tokenizer", tok, "--schema", SCHEMA, "--max-tokens", "20", "Who?")
    assert code == 0, err
    assert json.loads(out)["finish_reason"] == "stop"


def test_formats_and_check(capsys):
    tok = str(need_shared(TOKENIZERS / "qwen3"))
    code, out, err = run(capsys, "formats", "--tokenizer", tok)
    assert code == 0, err
    report = json.loads(out)
    assert report["resolves_to"] == "hermes"
    usable = {r["format"] for r in report["formats"] if r["usable"]}
    assert {"hermes", "qwen3_coder"} <= usable and "kimi_k2" not in usable
    code, out, err = run(capsys, "check", "--tokenizer", tok, "--tools", TOOLS)
    assert code == 0, err
    rows = json.loads(out)
    assert [r["tool"] for r in rows] == ["get_weather", "get_time"]
    assert all(r["shortest_call_tokens"] > 0 and r["automaton_states"] > 0 for r in rows)
    assert "compiling" in err


def test_user_mistakes_are_one_line_errors(capsys, tmp_path):
    tok = str(need_shared(TOKENIZERS / "qwen3"))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    cases = [
        (["run", "--tokenizer", tok, "--tools", str(bad), "x"], "not JSON"),
        (["run", "--tokenizer", tok, "--tools", str(tmp_path / "missing.json"), "x"], "cannot read"),
        (["run", "--tokenizer", tok, "--tools", TOOLS, "--format", "nope", "x"], "unknown tool-call format"),
        (["run", "--tokenizer", tok, "--tools", TOOLS, "--tool-choice", "required", "--max-tokens", "2", "x"],
         "cannot hold the shortest valid turn"),
        (["run", "--tokenizer", tok, "--tools", TOOLS, "--tool-choice", "fly", "x"], "not among the offered"),
        (["check", "--tokenizer", tok, "--tools", TOOLS, "--format", "kimi_k2"], "special tokens"),
    ]
    for argv, message in cases:
        code, out, err = run(capsys, *argv)
        errors = [line for line in err.splitlines() if line.startswith("toolgate: error:")]
        assert code == 2 and len(errors) == 1 and message in errors[0], (argv, err)
        assert "Traceback" not in err and out == ""
