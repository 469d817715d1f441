"""The README's quick start, exactly as written: the install-and-run command in a fresh copy of the
repository, and every `$ toolgate ...` example, whose shown output must be what the command prints
(ids and timings aside)."""

import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.cli import main

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def bash_blocks() -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", README, re.S)]


def console_examples() -> list[tuple[str, list[str], list[str]]]:
    """(command, stderr lines, stdout lines) for every `$ toolgate` line of the console blocks."""
    out = []
    for block in re.findall(r"```console\n(.*?)```", README, re.S):
        for chunk in re.split(r"^\$ ", block, flags=re.M)[1:]:
            command, *rest = chunk.rstrip("\n").split("\n")
            err = [line for line in rest if line.startswith("toolgate:")]
            out.append((command, err, [line for line in rest if not line.startswith("toolgate:")]))
    return out


def comparable(value):
    """The CLI's JSON without what differs from run to run (timings, fresh call ids)."""
    value.pop("seconds", None)
    for call in value.get("tool_calls") or []:
        call.pop("id", None)
    return value


def last_json(text: str):
    """The JSON document that ends ``text`` (pip's own output comes before it)."""
    start = 0 if text.startswith("{") else text.rindex("\n{\n") + 1
    return json.loads(text[start:])


def test_the_readme_opens_with_the_two_commands():
    install_run, install_test = bash_blocks()[:2]
    assert "pip install -e ." in install_run and "toolgate run" in install_run
    assert install_test.splitlines()[-1].endswith("pip install -e '.[test]' && python -m pytest -q")
    assert "python -m pytest -q" in (ROOT / ".ci" / "run").read_text()


def test_every_console_example_prints_what_the_readme_shows(capsys):
    examples = console_examples()
    assert len(examples) >= 3
    for command, err_lines, out_lines in examples:
        argv = shlex.split(command)
        assert argv[0] == "toolgate"
        code = main(argv[1:])
        got = capsys.readouterr()
        assert code == (2 if any(line.startswith("toolgate: error:") for line in err_lines) else 0), got.err
        assert got.err.strip().splitlines() == err_lines, command
        if out_lines:
            assert comparable(json.loads(got.out)) == comparable(json.loads("\n".join(out_lines))), command


def fresh_copy(tmp_path: Path) -> Path:
    """A copy of the repository's tracked files, nothing else."""
    copy = tmp_path / "repo"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            (copy / name).write_bytes((ROOT / name).read_bytes())
    return copy


def test_the_run_command_answers_from_a_fresh_copy(tmp_path):
    """The default run's stand-in for the test below (CI's own first step is the same install,
    `python3 -m venv .venv && . .venv/bin/activate && pip install -e`, from nothing): the first
    command's run part, exactly as written, answers from a copy of the tracked files alone, its
    package imported from the copy."""
    command = bash_blocks()[0].splitlines()[-1]
    install, run = command.rsplit(" && ", 1)
    assert install == "python3 -m venv .venv && . .venv/bin/activate && pip install -e ."
    assert "pip install -q -e '.[test]'" in (ROOT / ".ci" / "run").read_text()
    copy = fresh_copy(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(copy), "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    where = subprocess.run([sys.executable, "-c", "import engine; print(engine.__file__)"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, check=True).stdout.strip()
    assert Path(where).is_relative_to(copy), where
    got = subprocess.run(["bash", "-c", run], cwd=copy, env=env, capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr[-3000:]
    call = last_json(got.stdout)["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Paris"})


@pytest.mark.full_only  # two minutes: a fresh venv installs everything; by default, the stand-in above
def test_the_install_and_run_command_in_a_fresh_copy(tmp_path):
    """The first command, exactly as written, in a copy of the tracked files (its own .venv)."""
    copy = fresh_copy(tmp_path)
    command = bash_blocks()[0].splitlines()[-1]
    t = time.perf_counter()
    got = subprocess.run(["bash", "-c", command], cwd=copy, capture_output=True, text=True, timeout=900)
    seconds = time.perf_counter() - t
    assert got.returncode == 0, got.stderr[-3000:]
    result = last_json(got.stdout)
    call = result["tool_calls"][0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("get_weather", {"city": "Paris"})
    t = time.perf_counter()
    again = subprocess.run(["bash", "-c", ". .venv/bin/activate && " + command.split("&& ")[-1]], cwd=copy,
                           capture_output=True, text=True, timeout=120)
    again_seconds = time.perf_counter() - t
    assert again.returncode == 0, again.stderr[-3000:]
    assert comparable(last_json(again.stdout)) == comparable(result)  # greedy: the same answer
    print(f"install and first answer: {seconds:.0f} s; run again: {again_seconds:.1f} s")
