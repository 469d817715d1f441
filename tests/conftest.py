import atexit
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FULL = False  # --full: the long forms of the soak, the sweeps and the property tests


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true",
                     help="run the soak, sweeps and property tests in their long forms (CI runs the light forms)")


def pytest_configure(config):
    global FULL
    FULL = config.getoption("--full")


def scale(light: int, full: int) -> int:
    """How many trials a long check runs: ``light`` by default (CI), ``full`` with --full."""
    return full if FULL else light
DATA = FIXTURES / "data"
FAMILIES = ["qwen3", "llama3", "gpt-oss", "kimi-k2", "glm4", "mistral"]
_UNPACKED = Path(tempfile.mkdtemp(prefix="toolgate-tokenizers-"))
atexit.register(shutil.rmtree, _UNPACKED, ignore_errors=True)


def tokenizer_dir(name: str) -> Path:
    """The folder of a fixture tokenizer (unpacked from tests/fixtures once per process)."""
    out = _UNPACKED / name
    if not out.exists():
        tmp = _UNPACKED / f".{name}.partial"
        with tarfile.open(FIXTURES / "tokenizers" / name / "files.tar.xz") as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(out)
    return out


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Each test session gets its own disk cache, so cache tests start cold."""
    os.environ["TOOLGATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("toolgate-cache"))


_loaded = {}


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    if name not in _loaded:
        _loaded[name] = AutoTokenizer.from_pretrained(str(tokenizer_dir(name)))
    return _loaded[name]


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    return load_tokenizer("qwen3")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A random-weight Qwen3-architecture model with the real Qwen3 vocabulary (151,936 logits)."""
    import mlx_lm

    from models import write_random_model

    folder = write_random_model(tokenizer_dir("qwen3"), tmp_path_factory.mktemp("tiny-qwen3"), vocab_size=151936)
    return mlx_lm.load(str(folder))
