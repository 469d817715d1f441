"""The wheel ships the grammars, and an installed copy finds them through importlib.resources;
the package imports on every Python the project supports."""

import glob
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from engine.tools import FAMILIES


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(root)],
                   check=True, capture_output=True)
    (path,) = out.glob("mlx_toolgate-*.whl")
    return path


def test_wheel_holds_every_grammar(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {f"engine/grammars/{f}.lark" for f in FAMILIES} <= names
    shipped = json.loads(zipfile.ZipFile(wheel).read("engine/embedded_model/MANIFEST.json"))
    assert {f"engine/embedded_model/{f}" for f in shipped["files"]} <= names  # the default model ships
    assert not any(n.startswith(("tests/", "benchmarks/", "grammars/")) for n in names)


def test_installed_copy_reads_its_grammars(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
                   check=True, capture_output=True)
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); import engine; "
             "assert engine.__file__.startswith(sys.argv[1]), engine.__file__; "
             "from engine.tools import FAMILIES, load_format; "
             "print(sum(len(load_format(f).rules) for f in FAMILIES))")
    got = subprocess.run([sys.executable, "-c", probe, str(target)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert int(got.stdout) >= 2 * len(FAMILIES)


def test_smoke_script_runs_here():
    """The script the other Pythons run (below) passes under this one."""
    root = Path(__file__).resolve().parent
    got = subprocess.run([sys.executable, str(root / "smoke.py")], capture_output=True, text=True, timeout=300)
    assert got.returncode == 0, got.stderr
    assert got.stdout.startswith("smoke ok")


def interpreter(version: str) -> str | None:
    """A working ``python<version>``: on PATH, or installed by pyenv (as on this project's machines)."""
    found = shutil.which(f"python{version}")
    candidates = ([found] if found else []) + sorted(glob.glob(os.path.expanduser(f"~/.pyenv/versions/{version}.*/bin/python")))
    for c in candidates:
        if subprocess.run([c, "-c", "pass"], capture_output=True).returncode == 0:
            return c
    return None


@pytest.mark.full_only  # about two minutes each; by default, Python 3.13's dependencies are resolved (below)
@pytest.mark.parametrize("version", ["3.12", "3.13"])
def test_other_pythons_install_and_run(version, tmp_path):
    """requires-python is >=3.11 (mlx-lm 0.32 needs it; 3.11 runs this suite); 3.12 and 3.13 install
    the package from this checkout into a fresh venv and run the smoke script."""
    python = interpreter(version)
    if python is None:
        pytest.skip(f"no Python {version} on this machine")
    venv = tmp_path / "venv"
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    root = Path(__file__).resolve().parents[1]
    got = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(root)], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    got = subprocess.run([str(venv / "bin" / "python"), str(root / "tests" / "smoke.py")], capture_output=True,
                         text=True, timeout=600)
    assert got.returncode == 0, got.stderr[-2000:]
    assert got.stdout.startswith(f"smoke ok on Python {version}")


def test_the_newest_python_resolves_every_dependency(tmp_path):
    """The default run's stand-in for the installs above: pip resolves the package's dependencies
    for Python 3.13 (the newest supported) to wheels only, without installing them."""
    import tomllib

    root = Path(__file__).resolve().parents[1]
    wanted = tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]
    report = tmp_path / "report.json"
    got = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed",
                          "--python-version", "3.13", "--only-binary=:all:", "--target", str(tmp_path / "target"),
                          "--report", str(report), *wanted], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr[-2000:]
    chosen = {item["metadata"]["name"].lower().replace("_", "-") for item in json.loads(report.read_text())["install"]}
    needed = [Requirement(w) for w in wanted]
    names = {r.name.lower() for r in needed if r.marker is None or r.marker.evaluate({"python_version": "3.13"})}
    assert names <= chosen, sorted(names - chosen)
