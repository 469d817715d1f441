"""Two MLX processes over loopback (``mlx.launch --backend ring``), as on two Macs: the engine's
greedy and seeded sampled outputs under a schema and under tools equal the single-process ones,
with the model sharded tensor-parallel (Qwen3) or as a pipeline of layers (Qwen2: mlx-lm's Qwen3
has no pipeline mode)."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import mlx_lm
import pytest

from conftest import tokenizer_dir
from distributed_worker import outputs
from models import write_random_model

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    return write_random_model(tokenizer_dir("qwen3"), tmp_path_factory.mktemp("sharded"), vocab_size=151936,
                              layers=4)


@pytest.fixture(scope="module")
def pipeline_folder(tmp_path_factory):
    return write_random_model(tokenizer_dir("qwen3"), tmp_path_factory.mktemp("pipeline"), vocab_size=151936,
                              layers=4, model_type="qwen2")


def launcher() -> str:
    found = shutil.which("mlx.launch") or str(Path(sys.executable).parent / "mlx.launch")
    assert Path(found).exists(), "mlx.launch comes with mlx"
    return found


@pytest.mark.parametrize("kind", ["tensor", "pipeline"])
def test_two_processes_give_the_single_process_outputs(request, kind, tmp_path):
    model_folder = request.getfixturevalue("model_folder" if kind == "tensor" else "pipeline_folder")
    out = tmp_path / "out.json"
    got = subprocess.run([launcher(), "--backend", "ring", "-n", "2", "--hosts", "127.0.0.1", "--python",
                          sys.executable, str(WORKER), str(model_folder), str(out), kind],
                         capture_output=True, text=True, timeout=600, cwd=str(WORKER.parent))
    # mlx.launch exits 0 even when a rank fails: the file rank 0 writes at the end is the proof
    assert got.returncode == 0 and out.exists(), got.stdout[-3000:] + got.stderr[-3000:]
    sharded = json.loads(out.read_text())
    assert sharded["size"] == 2
    model, tokenizer = mlx_lm.load(str(model_folder))
    single = outputs(model, tokenizer)
    assert sharded["outputs"] == json.loads(json.dumps(single))
    assert any(o[0] == "required" and o[4] for o in single)  # calls were made, not only empty turns


def test_a_rank_killed_mid_generation_ends_the_run(model_folder, tmp_path):
    """Rank 1 dies at its fifth token: the launcher reports it and stops rank 0 within seconds (no
    hang waiting on the dead peer), and rank 0 writes nothing."""
    import time

    out = tmp_path / "out.json"
    t = time.perf_counter()
    got = subprocess.run([launcher(), "--backend", "ring", "-n", "2", "--hosts", "127.0.0.1", "--python",
                          sys.executable, str(WORKER), str(model_folder), str(out), "kill"],
                         capture_output=True, text=True, timeout=120, cwd=str(WORKER.parent))
    seconds = time.perf_counter() - t
    assert "rank 1 exited with code 3" in got.stdout + got.stderr, got.stdout[-2000:] + got.stderr[-2000:]
    assert not out.exists()
    assert seconds < 60, seconds
