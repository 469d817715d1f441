"""Write tests/fixtures/ from ../shared: the tokenizers and the data subsets the tests read.

Run by hand when a fixture should change; the tests never run it (a clone tests with its own
fixtures alone). Tokenizers: the files AutoTokenizer needs (checked to give the same ids as the
full folder), packed as .tar.xz, with their SOURCE note and license beside them. Data: exactly
the rows the tests use, unchanged, with the source notes.

    python benchmarks/make_test_fixtures.py [--shared ../shared]
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import shutil
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures"

TOKENIZER_FILES = {
    "qwen3": ["vocab.json", "merges.txt", "tokenizer_config.json", "Qwen3-Coder.jinja"],
    "llama3": ["tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"],
    "gpt-oss": ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"],
    "kimi-k2": ["tokenizer.json", "tokenizer_config.json"],
    "glm4": ["tokenizer.json", "tokenizer_config.json", "generation_config.json", "GLM-4.6.jinja",
             "GLM-4.7-Flash.jinja"],
    "mistral": ["tokenizer.model", "tokenizer_config.json", "chat_template.jinja"],
}
LICENSES = {  # SPDX id and holder, from each SOURCE note; the texts are standard except where said
    "qwen3": ("Apache-2.0", "Alibaba Cloud (Qwen team)"),
    "llama3": ("Llama 3.2 Community License", None),  # upstream LICENSE.txt is copied as it is
    "gpt-oss": ("Apache-2.0", "OpenAI"),
    "kimi-k2": ("Modified MIT", "Moonshot AI"),
    "glm4": ("GLM-4 License (glm-4-9b tokenizer); MIT (GLM-4.5 and later templates)", "Zhipu AI / THUDM"),
    "mistral": ("Apache-2.0", "Mistral AI"),
}
SAMPLED = {"Glaiveai2K": 8, "Github_easy": 8, "JsonSchemaStore": 8}  # tests/test_jsonschemabench.py
HARDEST = {"Github_ultra": 2, "JsonSchemaStore": 2}  # tests/test_reliability.py: first rows by id
BFCL_ROWS = 20  # tests/tooldata.py takes the first distinct tools of simple_python


def pack(folder: Path, files: list[str], out: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in files:
            info = tar.gettarinfo(str(folder / name), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname, info.mode = 0, 0, 0, "", "", 0o644
            with open(folder / name, "rb") as f:
                tar.addfile(info, f)
    out.write_bytes(lzma.compress(buf.getvalue(), preset=9 | lzma.PRESET_EXTREME))


def license_text(spdx: str, holder: str | None, apache: str) -> str:
    if spdx == "Apache-2.0":
        return f"Copyright {holder}.\n\n{apache}"
    return (f"License: {spdx}. Copyright {holder}.\n\nThe full text was not available offline when this "
            "fixture was made; it is published with the upstream model (see SOURCE.txt for the repository).\n")


def rows_by_id(path: Path) -> list[dict]:
    return sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda r: r["unique_id"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(ROOT.parent / "shared"))
    args = ap.parse_args()
    shared = Path(args.shared)
    apache = (shared / "data" / "bfcl" / "LICENSE").read_text() if (shared / "data" / "bfcl" / "LICENSE").exists() \
        else (ROOT / "tests" / "fixtures" / "APACHE-2.0.txt").read_text()
    for name, files in TOKENIZER_FILES.items():
        src, dst = shared / "tokenizers" / name, OUT / "tokenizers" / name
        dst.mkdir(parents=True, exist_ok=True)
        pack(src, files, dst / "files.tar.xz")
        shutil.copy(src / "SOURCE.txt", dst / "SOURCE.txt")
        if (src / "LICENSE.txt").exists():
            shutil.copy(src / "LICENSE.txt", dst / "LICENSE.txt")
        else:
            (dst / "LICENSE.txt").write_text(license_text(*LICENSES[name], apache))
    bench = OUT / "data" / "jsonschemabench"
    bench.mkdir(parents=True, exist_ok=True)
    for subset, n in SAMPLED.items():
        rows = rows_by_id(shared / "data" / "jsonschemabench" / f"{subset}.jsonl")
        picked = rows[::max(1, len(rows) // n)][:n]
        (bench / f"{subset}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in picked))
    hardest = []
    for subset, n in HARDEST.items():
        hardest += rows_by_id(shared / "data" / "jsonschemabench" / f"{subset}.jsonl")[:n]
    (bench / "hardest.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hardest))
    shutil.copy(shared / "data" / "jsonschemabench" / "SOURCE.md", bench / "SOURCE.md")
    bfcl = OUT / "data" / "bfcl"
    bfcl.mkdir(parents=True, exist_ok=True)
    lines = (shared / "data" / "bfcl" / "simple_python.jsonl").read_text().splitlines()[:BFCL_ROWS]
    (bfcl / "simple_python.jsonl").write_text("\n".join(lines) + "\n")
    for f in ("type_mapping_gorilla_to_openapi.json", "SOURCE.md"):
        shutil.copy(shared / "data" / "bfcl" / f, bfcl / f)
    mcp = OUT / "data" / "mcp_tools"
    mcp.mkdir(parents=True, exist_ok=True)
    for f in ("tools.jsonl", "SOURCE.md"):
        shutil.copy(shared / "data" / "mcp_tools" / f, mcp / f)
    suite = OUT / "data" / "json-schema-test-suite"  # the whole draft 2020-12 required set, unchanged
    suite.mkdir(parents=True, exist_ok=True)
    for f in (shared / "data" / "json-schema-test-suite").iterdir():
        shutil.copy(f, suite / f.name)
    print(f"wrote {OUT}: {sum(f.stat().st_size for f in OUT.rglob('*') if f.is_file()) / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
