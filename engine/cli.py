"""``toolgate``: run constrained generation from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from .errors import ToolgateError

DEFAULT_TOKENIZER = Path(__file__).resolve().parents[2] / "shared" / "tokenizers" / "qwen3"


def _model(args):
    import mlx_lm

    from .models import write_random_model

    if args.model:
        return mlx_lm.load(args.model)
    tokenizer_dir = Path(args.tokenizer)
    if not tokenizer_dir.exists():
        raise ToolgateError(f"no --model given and tokenizer folder {tokenizer_dir} is absent")
    folder = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mlx-toolgate" / "random-qwen3"
    if not (folder / "model.safetensors").exists():
        print(f"building a random-weight Qwen3-shaped model in {folder} ...", file=sys.stderr)
        write_random_model(tokenizer_dir, folder, vocab_size=151936)
    return mlx_lm.load(str(folder))


def cmd_run(args) -> int:
    import mlx.core as mx
    from mlx_lm.sample_utils import make_sampler

    from .generate import generate

    schema = json.loads(Path(args.schema).read_text()) if args.schema else None
    model, tokenizer = _model(args)
    mx.random.seed(args.seed)
    t = time.perf_counter()
    result = generate(model, tokenizer, [{"role": "user", "content": args.prompt}], response_format=schema,
                      max_tokens=args.max_tokens, sampler=make_sampler(temp=args.temp))
    out = {"text": result.text, "parsed": result.parsed, "finish_reason": result.finish_reason,
           "usage": result.usage, "errors": result.errors, "seconds": round(time.perf_counter() - t, 3)}
    print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="generate under a JSON schema")
    run.add_argument("prompt")
    run.add_argument("--model", help="mlx-lm model path or id (default: a local random-weight Qwen3-shaped model)")
    run.add_argument("--tokenizer", default=str(DEFAULT_TOKENIZER), help="tokenizer folder for the random model")
    run.add_argument("--schema", help="JSON schema file for the output")
    run.add_argument("--max-tokens", type=int, default=64)
    run.add_argument("--temp", type=float, default=1.0)
    run.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        return cmd_run(args)
    except (ToolgateError, OSError, json.JSONDecodeError) as e:
        print(f"toolgate: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
