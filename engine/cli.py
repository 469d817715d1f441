"""``toolgate``: constrained generation, tool-call formats and tool checks from the command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from .errors import ToolgateError


def _read_json(path: str, what: str):
    try:
        return json.loads(Path(path).read_text())
    except OSError as e:
        raise ToolgateError(f"cannot read the {what} file {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ToolgateError(f"the {what} file {path} is not JSON: {e}") from None


def _tools(args):
    if not args.tools:
        return None
    tools = _read_json(args.tools, "tools")
    tools = tools.get("tools", tools) if isinstance(tools, dict) else tools
    if not isinstance(tools, list):
        raise ToolgateError(f"the tools file {args.tools} must hold a list of tool definitions")
    return tools


def _tool_choice(value: str):
    if value in ("auto", "required", "none"):
        return value
    return {"type": "function", "function": {"name": value}}


def _model(args):
    import mlx_lm

    from .default_model import load_default_model

    if not args.model:
        return load_default_model()
    try:
        return mlx_lm.load(args.model)
    except Exception as e:  # a missing folder, no network for a Hub id, an unknown architecture
        raise ToolgateError(f"cannot load the model {args.model}: {e}") from None


def _tokenizer(args):
    from transformers import AutoTokenizer

    from .default_model import build_default_model

    source = args.model or args.tokenizer or str(build_default_model())
    try:
        return AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise ToolgateError(f"cannot load a tokenizer from {source}: {e}") from None


def cmd_run(args) -> int:
    import mlx.core as mx
    from mlx_lm.sample_utils import make_sampler

    from .default_model import DEMO_TOOLS
    from .generate import Request, generate, stream_generate

    if args.max_tokens < 1:
        raise ToolgateError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    schema = _read_json(args.schema, "schema") if args.schema else None
    tools = _tools(args)
    if tools is None and schema is None and not args.model:
        tools = DEMO_TOOLS
        print("toolgate: no --tools or --schema: offering the default model's demo tools ("
              + ", ".join(t["function"]["name"] for t in tools) + ")", file=sys.stderr)
    model, tokenizer = _model(args)
    mx.random.seed(args.seed)
    request = Request(response_format=schema, tools=tools, tool_choice=_tool_choice(args.tool_choice),
                      parallel_tool_calls=not args.no_parallel, format=args.format, thinking=args.thinking,
                      max_tokens=args.max_tokens, sampler=make_sampler(temp=args.temp))
    messages = [{"role": "user", "content": args.prompt}]
    t = time.perf_counter()
    if args.stream:
        result = None
        for delta in stream_generate(model, tokenizer, messages, request):
            result = delta.pop("result", None) or result
            print(json.dumps(delta, ensure_ascii=False), flush=True)
    else:
        result = generate(model, tokenizer, messages, request)
    out = {"finish_reason": result.finish_reason, "usage": result.usage,
           "seconds": round(time.perf_counter() - t, 3), "errors": result.errors}
    if tools is not None:
        out.update(content=result.content, reasoning=result.reasoning, tool_calls=result.tool_calls)
    else:
        out.update(text=result.text, parsed=result.parsed)
    print(json.dumps(out, ensure_ascii=False, indent=2))
    return 0


def cmd_formats(args) -> int:
    from .tools import FAMILIES, detect_format, load_format
    from .vocabulary import build_vocab

    tokenizer = _tokenizer(args)
    vocab = build_vocab(tokenizer)
    try:
        resolved = detect_format(tokenizer)
    except ToolgateError:
        resolved = None
    rows = []
    for name in FAMILIES:
        texts = load_format(name).special_texts()
        found = {t: vocab.special.get(t) for t in texts}
        rows.append({"format": name, "usable": all(i is not None for i in found.values()),
                     "special_tokens": found, "resolved": name == resolved})
    print(json.dumps({"tokenizer": args.model or args.tokenizer or "embedded default", "resolves_to": resolved, "formats": rows},
                     ensure_ascii=False, indent=2))
    return 0


def cmd_check(args) -> int:
    from tqdm import tqdm

    from .tools import compile_tools

    tokenizer = _tokenizer(args)
    tools = _tools(args)
    if not tools:
        raise ToolgateError("check needs --tools FILE")
    report = []
    for tool in tqdm(tools, desc="compiling tools", unit="tool", file=sys.stderr):
        t = time.perf_counter()
        g = compile_tools(tokenizer, [tool], format=args.format, tool_choice="required", lazy=False)
        seconds = time.perf_counter() - t
        pieces = [g.pieces.piece(0, p, 0) for p in range(len(g.calls[0].pieces))]
        report.append({"tool": g.tools[0].name, "format": g.format.name, "compile_seconds": round(seconds, 3),
                       "automaton_states": sum(a.num_states for a in pieces),
                       "shortest_call_tokens": g.pieces.call_min(0),
                       "unenforced": [f"{where}: {keyword}" for where, keyword in g.unenforced]})
    print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


def cmd_build(args) -> int:
    from .default_model import shipped_model_dir, train_default_model

    out = Path(args.out) if args.out else shipped_model_dir()
    settings = {k: v for k in ("steps", "seed", "dialogues") if (v := getattr(args, k)) is not None}
    manifest = train_default_model(out, **settings)
    print(json.dumps({"folder": str(out), **{k: manifest[k] for k in ("version", "settings", "parameters",
                      "loss_first", "loss_last", "train_seconds")}}, indent=2))
    return 0


def cmd_serve(args) -> int:
    import mlx.core as mx

    from .server import serve, serve_sharded

    options = dict(host=args.host, port=args.port, max_active=args.max_batch, max_waiting=args.max_queue)
    group = mx.distributed.init()  # a group of one unless started by mlx.launch
    if group.size() > 1:
        serve_sharded(group, args.model, pipeline=args.pipeline, **options)
    elif args.pipeline:
        raise ValueError("--pipeline splits the model over the processes mlx.launch starts; this is one process")
    else:
        serve(args.model, **options)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="toolgate", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="generate under a JSON schema or with tools")
    run.add_argument("prompt")
    run.add_argument("--model", help="mlx-lm model path or Hub id (default: the embedded model, built on first use)")
    run.add_argument("--schema", help="JSON schema file for the output")
    run.add_argument("--tools", help="JSON file: a list of OpenAI tool definitions (or {\"tools\": [...]})")
    run.add_argument("--tool-choice", default="auto", help="auto, required, none or a tool's name")
    run.add_argument("--no-parallel", action="store_true", help="at most one call")
    run.add_argument("--thinking", action=argparse.BooleanOptionalAction, default=None)
    run.add_argument("--format", help="tool-call format (default: detected from the tokenizer)")
    run.add_argument("--max-tokens", type=int, default=64)
    run.add_argument("--temp", type=float, default=0.0, help="sampling temperature (default 0: greedy)")
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--stream", action="store_true", help="print OpenAI-style deltas as they come")
    srv = sub.add_parser("serve", help="an OpenAI-compatible server that enforces tools, tool_choice and response_format")
    srv.add_argument("--model", help="mlx-lm model path or Hub id (default: the embedded model)")
    srv.add_argument("--host", default="127.0.0.1")
    srv.add_argument("--port", type=int, default=8080)
    srv.add_argument("--max-batch", type=int, default=16, help="sequences decoded together")
    srv.add_argument("--max-queue", type=int, default=64, help="requests waiting beyond those (then 429)")
    srv.add_argument("--pipeline", action="store_true",
                     help="under mlx.launch: split the model's layers over the processes (default: tensor-parallel)")
    build = sub.add_parser("build-default-model", help="train the embedded default model (what ships in the package)")
    build.add_argument("--out", help="folder to write (default: the package's engine/embedded_model)")
    build.add_argument("--steps", type=int, help="training steps (default: the shipped model's)")
    build.add_argument("--seed", type=int, help="seed (default: the shipped model's)")
    build.add_argument("--dialogues", type=int, help="training dialogues generated (default: the shipped model's)")
    for name, helptext in (("formats", "the tool-call formats and the one a tokenizer resolves to"),
                           ("check", "compile each tool and report its size, shortest call and unenforced keywords")):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("--model", help="model path or id whose tokenizer to use")
        p.add_argument("--tokenizer", help="tokenizer folder (default: the embedded model's)")
        if name == "check":
            p.add_argument("--tools", required=True, help="JSON file of OpenAI tool definitions")
            p.add_argument("--format", help="tool-call format (default: detected)")
    args = parser.parse_args(argv)
    try:
        return {"run": cmd_run, "formats": cmd_formats, "check": cmd_check,
                "build-default-model": cmd_build, "serve": cmd_serve}[args.command](args)
    except (ToolgateError, ValueError) as e:
        print(f"toolgate: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
