import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

SHARED = Path(os.environ.get("TOOLGATE_SHARED", Path(__file__).resolve().parents[2] / "shared"))
TOKENIZERS = SHARED / "tokenizers"
DATA = SHARED / "data"
FAMILIES = ["qwen3", "llama3", "gpt-oss", "kimi-k2", "glm4", "mistral"]


def need_shared(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent: these tests read the shared tokenizers and data from ../shared")
    return path


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory):
    """Each test session gets its own disk cache, so cache tests start cold."""
    os.environ["TOOLGATE_CACHE_DIR"] = str(tmp_path_factory.mktemp("toolgate-cache"))


_loaded = {}


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    if name not in _loaded:
        _loaded[name] = AutoTokenizer.from_pretrained(str(need_shared(TOKENIZERS / name)))
    return _loaded[name]


@pytest.fixture(scope="session")
def qwen3_tokenizer():
    return load_tokenizer("qwen3")


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A random-weight Qwen3-architecture model with the real Qwen3 vocabulary (151,936 logits)."""
    import mlx_lm

    from models import write_random_model

    folder = write_random_model(need_shared(TOKENIZERS / "qwen3"), tmp_path_factory.mktemp("tiny-qwen3"),
                                vocab_size=151936)
    return mlx_lm.load(str(folder))
