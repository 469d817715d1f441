import hashlib
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
    config.addinivalue_line("markers", "full_only: a long check run only with --full, where a lighter one stands "
                                       "in by default (reported as deselected, not skipped)")


def pytest_collection_modifyitems(config, items):
    if not FULL:
        long = [item for item in items if "full_only" in item.keywords]
        config.hook.pytest_deselected(items=long)
        items[:] = [item for item in items if "full_only" not in item.keywords]


def scale(light: int, full: int) -> int:
    """How many trials a long check runs: ``light`` by default (CI), ``full`` with --full."""
    return full if FULL else light
DATA = FIXTURES / "data"
FAMILIES = ["qwen3", "llama3", "gpt-oss", "kimi-k2", "glm4", "mistral"]
# Unpacked once per machine (by archive and transformers version), shared by the test processes; a cache as the
# Hugging Face one is. Llama 3's tokenizer ships as tiktoken's file, which transformers converts on
# every load (4 s); its converted tokenizer.json is written beside it once (the same vocabulary,
# encodings and chat template), so later loads, models' included, read that instead.
_UNPACKED = Path(tempfile.gettempdir()) / "toolgate-test-tokenizers"
CONVERTED = {"llama3"}


def tokenizer_dir(name: str) -> Path:
    """The folder of a fixture tokenizer (unpacked from tests/fixtures on first use)."""
    import transformers

    archive = FIXTURES / "tokenizers" / name / "files.tar.xz"
    digest = hashlib.sha256(archive.read_bytes() + transformers.__version__.encode()).hexdigest()[:16]
    out = _UNPACKED / f"{name}-{digest}"
    if not out.exists():
        _UNPACKED.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=_UNPACKED, prefix=f".{name}-"))
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        if name in CONVERTED:
            from transformers import AutoTokenizer

            AutoTokenizer.from_pretrained(str(tmp)).backend_tokenizer.save(str(tmp / "tokenizer.json"))
        tmp.chmod(0o755)
        try:
            tmp.rename(out)
        except OSError:  # another test process unpacked it first
            shutil.rmtree(tmp, ignore_errors=True)
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
