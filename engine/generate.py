"""Generation with mlx-lm under a constraint: the one call most users need.

``generate``, ``stream_generate`` and ``batch_generate`` share one options object, ``Request``:
pass it, or its fields as keyword arguments (any other keyword goes to mlx-lm).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import Any, Callable, Iterator, Union

import mlx.core as mx
from mlx_lm import stream_generate as mlx_stream_generate

from .errors import RequestError
from .grammar import Grammar, compile_json_schema
from .tools import ToolGrammar, compile_tools, detect_format, load_format
from .tools.tree import Format

Prompt = Union[str, list, mx.array]  # text, token ids (a list or an array), or chat messages


@dataclass(frozen=True)
class Request:
    """What one generation asks for. ``response_format``: a JSON schema, OpenAI's
    ``{"type": "json_schema", ...}``/``{"type": "json_object"}``, or a compiled Grammar. ``tools``:
    OpenAI tool definitions or a compiled ToolGrammar, with ``tool_choice`` ("auto", "required",
    "none" or ``{"type": "function", "function": {"name": ...}}``), ``parallel_tool_calls``,
    ``format`` (the family; detected from the tokenizer when None), ``thinking`` (None, True,
    False or "open") and ``lazy_tools`` (a tool's arguments compiled at its first call, or all up
    front when False, as a server wants: nothing then compiles mid-generation).
    ``sampler``: mlx-lm's sampler (greedy when None)."""

    response_format: Any = None
    tools: Any = None
    tool_choice: str | dict = "auto"
    parallel_tool_calls: bool = True
    format: str | None = None
    thinking: bool | str | None = None
    lazy_tools: bool = True
    max_tokens: int = 256
    sampler: Callable | None = None

    @classmethod
    def split(cls, request: "Request | None", options: dict) -> tuple["Request", dict]:
        """``request`` updated by the Request fields among ``options``, and the other options."""
        names = {f.name for f in fields(cls)}
        mine = {k: v for k, v in options.items() if k in names}
        return replace(request or cls(), **mine), {k: v for k, v in options.items() if k not in names}


@dataclass
class Result:
    """One generation's outcome. ``parsed`` is the JSON value under ``response_format``; with tools
    the turn is read into ``content``, ``reasoning`` and ``tool_calls``."""

    text: str
    parsed: Any = None
    finish_reason: str = "stop"  # "stop" | "tool_calls" | "length" (only when the budget ended free text)
    usage: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # schema violations (only possible when lenient)
    token_ids: list[int] = field(default_factory=list)
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict] = field(default_factory=list)


def _schema_of(response_format: Any) -> Any:
    """Accept OpenAI's response_format shapes or a bare JSON schema."""
    if not isinstance(response_format, dict):
        return response_format
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema", {})
        return spec.get("schema", spec)
    if kind == "json_object":
        return {"type": "object"}
    return response_format


def _prompt_ids(tokenizer: Any, prompt: Any, tools: Any = None, thinking: Any = None) -> list[int]:
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special_tokens=False)
    if hasattr(prompt, "tolist"):  # an mx.array or numpy array of token ids
        return [int(t) for t in prompt.tolist()]
    if prompt and isinstance(prompt[0], dict):
        extra = {} if thinking is None else {"enable_thinking": bool(thinking)}
        ids = tokenizer.apply_chat_template(prompt, tools=tools, add_generation_prompt=True, tokenize=True, **extra)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)  # transformers 5 returns a BatchEncoding
    return list(prompt)


def _opened_thinking(tokenizer: Any, ids: list[int], fmt: Format) -> bool:
    """True when the prompt ends inside an opened thinking section (Qwen3.5-style templates)."""
    reasoning = fmt.rules.get("reasoning")
    if reasoning is None or reasoning[0] != "seq" or reasoning[1][0][0] != "sym":
        return False
    opener = fmt.specials[reasoning[1][0][1]]
    return tokenizer.decode(ids[-4:]).rstrip().endswith(opener)


def prepare(tokenizer: Any, prompt: Prompt, request: Request) -> tuple[Any, list[int]]:
    """The compiled constraint (a Grammar, a ToolGrammar or None) and the prompt's token ids;
    raises the engine's errors (schema, tools, budget-independent) before anything is generated."""
    if request.response_format is not None and request.tools is not None:
        raise RequestError("pass either response_format or tools, not both")
    grammar = None
    if request.response_format is not None:
        rf = request.response_format
        grammar = rf if isinstance(rf, Grammar) else compile_json_schema(tokenizer, _schema_of(rf))
    tools, thinking = request.tools, request.thinking
    tool_defs = [t.openai() for t in tools.offered] if isinstance(tools, ToolGrammar) else tools
    ids = _prompt_ids(tokenizer, prompt, tool_defs, thinking)  # the chat template describes the tools
    if isinstance(tools, ToolGrammar):
        grammar = tools
    elif tools is not None:
        fmt = load_format(request.format or detect_format(tokenizer))
        if thinking is None and _opened_thinking(tokenizer, ids, fmt):
            thinking = "open"
        grammar = compile_tools(tokenizer, tools, tool_choice=request.tool_choice,
                                parallel_tool_calls=request.parallel_tool_calls, format=request.format,
                                thinking=thinking, lazy=request.lazy_tools)
    return grammar, ids


def _run(model: Any, tokenizer: Any, grammar: Any, ids: list[int], max_tokens: int, sampler: Any,
         kwargs: dict, out: list[int], flags: dict) -> Iterator[Any]:
    """Generate under ``grammar``, appending token ids to ``out``; yields mlx-lm's responses."""
    if max_tokens < 1:
        raise RequestError(f"max_tokens must be at least 1, got {max_tokens}")
    processors = list(kwargs.pop("logits_processors", None) or [])
    proc = grammar.matcher(max_tokens) if grammar is not None else None
    if proc is not None:
        processors.append(proc)
    eos = set(grammar.vocab.eos_ids) if grammar else set(tokenizer.eos_token_ids)
    for response in mlx_stream_generate(model, tokenizer, mx.array(ids), max_tokens=max_tokens,
                                        sampler=sampler, logits_processors=processors, **kwargs):
        if response.token in eos:
            flags["ended"] = flags["eos"] = True
            return
        out.append(response.token)
        yield response
        if proc is not None and proc.complete_at(len(out)):
            flags["ended"] = True  # e.g. Harmony's <|call|>: nothing but the end can follow
            return


def finish(tokenizer: Any, grammar: Any, ids: list[int], out: list[int], flags: dict, max_tokens: int) -> Result:
    """The Result of generating ``out`` (token ids, end-of-sequence left out) after prompt ``ids``
    under ``grammar``; ``flags``: ``ended`` (the output stopped by itself), ``eos`` (by an EOS token)."""
    text = tokenizer.decode(out)
    ended = flags.get("ended", False)
    used = len(out) + int(flags.get("eos", False))
    result = Result(text=text, token_ids=out, usage={
        "prompt_tokens": len(ids), "completion_tokens": used, "total_tokens": len(ids) + used})
    if isinstance(grammar, ToolGrammar):
        state = grammar.walk(out, max_tokens)
        if state is not None and grammar.is_final(state):
            parsed = grammar.parse(out)
            result.content, result.reasoning, result.tool_calls = parsed.content, parsed.reasoning, parsed.tool_calls
            result.errors = parsed.errors
            result.finish_reason = "tool_calls" if parsed.tool_calls else "stop" if ended else "length"
        else:
            result.finish_reason = "length"
            result.content = text
    elif grammar is not None:
        state = grammar.walk(out)
        result.finish_reason = "stop" if state is not None and grammar.is_final(state) else "length"
        result.parsed, result.errors = grammar.validate(text)
    else:
        result.finish_reason = "stop" if ended else "length"
        result.content = text
    return result


def generate(model: Any, tokenizer: Any, prompt: Prompt, request: Request | None = None, **options: Any) -> Result:
    """Generate with mlx-lm under a constraint; ``prompt`` is text, token ids or chat messages
    (rendered with the tokenizer's chat template, tools included).

    ``request`` (or its fields as keyword arguments) says what to enforce: with ``response_format``
    the text is complete, valid JSON within ``max_tokens``; with ``tools`` every call names an
    offered tool, has valid arguments and is closed within ``max_tokens`` (see ``compile_tools``
    for the modes). Other keyword arguments go to mlx-lm's ``stream_generate``.
    """
    request, kwargs = Request.split(request, options)
    grammar, ids = prepare(tokenizer, prompt, request)
    out: list[int] = []
    flags: dict = {}
    for _ in _run(model, tokenizer, grammar, ids, request.max_tokens, request.sampler, kwargs, out, flags):
        pass
    return finish(tokenizer, grammar, ids, out, flags, request.max_tokens)


def stream_generate(model: Any, tokenizer: Any, prompt: Prompt, request: Request | None = None,
                    **options: Any) -> Iterator[dict]:
    """``generate``, streamed as OpenAI-style deltas: ``{"reasoning_content": s}``, ``{"content": s}``,
    for each call a header ``{"tool_calls": [{"index", "id", "type", "function": {"name", "arguments": ""}}]}``
    then argument fragments ``{"tool_calls": [{"index", "function": {"arguments": s}}]}``, and last
    ``{"finish_reason": ..., "usage": ..., "result": Result}``. ``accumulate_deltas`` puts them together."""
    request, kwargs = Request.split(request, options)
    grammar, ids = prepare(tokenizer, prompt, request)
    out: list[int] = []
    flags: dict = {}
    stream = grammar.stream_parser() if isinstance(grammar, ToolGrammar) else None
    for response in _run(model, tokenizer, grammar, ids, request.max_tokens, request.sampler, kwargs, out, flags):
        if stream is not None:
            yield from stream.feed([response.token])
        elif response.text:
            yield {"content": response.text}
    result = finish(tokenizer, grammar, ids, out, flags, request.max_tokens)
    if stream is not None:  # the ids the client already received
        for call, sent in zip(result.tool_calls, stream.calls):
            call["id"] = sent["id"]
    yield {"finish_reason": result.finish_reason, "usage": result.usage, "result": result}


def batch_generate(model: Any, tokenizer: Any, requests: list, *, max_tokens: int = 256,
                   sampler: Any = None, **kwargs: Any) -> list[Result]:
    """Several requests in one mlx-lm ``BatchGenerator``, each under its own constraint.

    Each item is ``(prompt, Request)`` or a dict with ``prompt`` and any Request fields (for a
    dict, ``max_tokens`` and ``sampler`` here are the defaults it may leave out). Every
    sequence gets its own matcher and its own end tokens; nothing is shared between them.
    Other keyword arguments go to ``BatchGenerator``.
    """
    from mlx_lm.generate import BatchGenerator, StopSequences

    setups = []
    for i, item in enumerate(requests):
        if isinstance(item, dict):
            if "prompt" not in item:
                raise RequestError(f"request {i}: needs 'prompt'")
            options = {k: v for k, v in item.items() if k != "prompt"}
            request, unknown = Request.split(Request(max_tokens=max_tokens, sampler=sampler), options)
            if unknown:
                raise RequestError(f"request {i}: unknown keys {sorted(unknown)}")
            prompt = item["prompt"]
        else:
            prompt, request = item
        grammar, ids = prepare(tokenizer, prompt, request)
        matcher = grammar.matcher(request.max_tokens) if grammar is not None else None
        eos = grammar.vocab.eos_ids if grammar is not None else sorted(tokenizer.eos_token_ids)
        setups.append((request, grammar, ids, matcher, eos))
    gen = BatchGenerator(model, sampler=sampler, **kwargs)
    try:
        uids = gen.insert([ids for _, _, ids, _, _ in setups], max_tokens=[r.max_tokens for r, *_ in setups],
                          samplers=[r.sampler for r, *_ in setups],
                          logits_processors=[[m] if m is not None else [] for _, _, _, m, _ in setups],
                          stop_sequences=[StopSequences([[t] for t in eos]) for *_, eos in setups])
        outs: dict[int, list[int]] = {uid: [] for uid in uids}
        flags: dict[int, dict] = {uid: {} for uid in uids}
        while responses := gen.next_generated():
            for r in responses:
                if r.finish_reason == "stop":
                    flags[r.uid] = {"ended": True, "eos": True}
                else:
                    outs[r.uid].append(r.token)
    finally:
        gen.close()
    return [finish(tokenizer, g, ids, outs[uid], flags[uid], request.max_tokens)
            for uid, (request, g, ids, _, _) in zip(uids, setups)]
