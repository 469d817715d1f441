"""Generation with mlx-lm under a Grammar: the one call most users need."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator

import mlx.core as mx
from mlx_lm import stream_generate as mlx_stream_generate

from .errors import RequestError
from .formats import Format, detect_format, load_format
from .grammar import Grammar, compile_json_schema
from .toolcalls import ToolGrammar, compile_tools


@dataclass
class Result:
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


def _setup(tokenizer: Any, prompt: Any, response_format: Any, tools: Any, tool_choice: Any,
           parallel_tool_calls: bool, format: str | None, thinking: Any) -> tuple[Any, list[int]]:
    """The compiled constraint (or None) and the prompt's token ids."""
    if response_format is not None and tools is not None:
        raise RequestError("pass either response_format or tools, not both")
    grammar = None
    if response_format is not None:
        grammar = response_format if isinstance(response_format, Grammar) else compile_json_schema(tokenizer, _schema_of(response_format))
    tool_defs = tools
    if isinstance(tools, ToolGrammar):  # the chat template still describes the offered tools
        tool_defs = [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                       "parameters": t.parameters}} for t in tools.offered]
    ids = _prompt_ids(tokenizer, prompt, tool_defs, thinking)
    if isinstance(tools, ToolGrammar):
        grammar = tools
    elif tools is not None:
        if thinking is None and _opened_thinking(tokenizer, ids, load_format(format or detect_format(tokenizer))):
            thinking = "open"
        grammar = compile_tools(tokenizer, tools, tool_choice=tool_choice, parallel_tool_calls=parallel_tool_calls,
                                format=format, thinking=thinking)
    return grammar, ids


def _run(model: Any, tokenizer: Any, grammar: Any, ids: list[int], max_tokens: int, sampler: Any,
         kwargs: dict, out: list[int], flags: dict) -> Iterator[Any]:
    """Generate under ``grammar``, appending token ids to ``out``; yields mlx-lm's responses."""
    if max_tokens < 1:
        raise RequestError(f"max_tokens must be at least 1, got {max_tokens}")
    processors = list(kwargs.pop("logits_processors", None) or [])
    proc = grammar.processor(max_tokens) if grammar is not None else None
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


def _result(tokenizer: Any, grammar: Any, ids: list[int], out: list[int], flags: dict, max_tokens: int) -> Result:
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
            result.parsed = parsed
            result.finish_reason = "tool_calls" if parsed.tool_calls else "stop" if ended else "length"
        else:
            result.finish_reason = "length"
            result.content = text
    elif grammar is not None:
        state = grammar.automaton.walk(out)
        result.finish_reason = "stop" if state >= 0 and grammar.automaton.final[state] else "length"
        result.parsed, result.errors = grammar.validate(text)
    else:
        result.finish_reason = "stop" if ended else "length"
        result.content = text
    return result


def generate(
    model: Any,
    tokenizer: Any,
    prompt: Any,
    *,
    response_format: Any = None,
    tools: Any = None,
    tool_choice: Any = "auto",
    parallel_tool_calls: bool = True,
    format: str | None = None,
    thinking: Any = None,
    max_tokens: int = 256,
    sampler: Any = None,
    **kwargs: Any,
) -> Result:
    """Generate with mlx-lm under a constraint; ``prompt`` is text, token ids or chat messages
    (rendered with the tokenizer's chat template, tools included).

    With ``response_format`` (a JSON schema, OpenAI's ``{"type": "json_schema", ...}`` or a
    compiled Grammar) the text is complete, valid JSON within ``max_tokens``. With ``tools``
    (OpenAI tool definitions, or a compiled ToolGrammar) every call names an offered tool, has
    valid arguments and is closed within ``max_tokens``; see ``compile_tools`` for the modes.
    """
    grammar, ids = _setup(tokenizer, prompt, response_format, tools, tool_choice, parallel_tool_calls, format, thinking)
    out: list[int] = []
    flags: dict = {}
    for _ in _run(model, tokenizer, grammar, ids, max_tokens, sampler, kwargs, out, flags):
        pass
    return _result(tokenizer, grammar, ids, out, flags, max_tokens)


def stream_generate(
    model: Any,
    tokenizer: Any,
    prompt: Any,
    *,
    response_format: Any = None,
    tools: Any = None,
    tool_choice: Any = "auto",
    parallel_tool_calls: bool = True,
    format: str | None = None,
    thinking: Any = None,
    max_tokens: int = 256,
    sampler: Any = None,
    **kwargs: Any,
) -> Iterator[dict]:
    """``generate``, streamed as OpenAI-style deltas: ``{"reasoning_content": s}``, ``{"content": s}``,
    for each call a header ``{"tool_calls": [{"index", "id", "type", "function": {"name", "arguments": ""}}]}``
    then argument fragments ``{"tool_calls": [{"index", "function": {"arguments": s}}]}``, and last
    ``{"finish_reason": ..., "usage": ..., "result": Result}``. ``accumulate_deltas`` puts them together."""
    grammar, ids = _setup(tokenizer, prompt, response_format, tools, tool_choice, parallel_tool_calls, format, thinking)
    out: list[int] = []
    flags: dict = {}
    stream = grammar.stream_parser() if isinstance(grammar, ToolGrammar) else None
    for response in _run(model, tokenizer, grammar, ids, max_tokens, sampler, kwargs, out, flags):
        if stream is not None:
            yield from stream.feed([response.token])
        elif response.text:
            yield {"content": response.text}
    result = _result(tokenizer, grammar, ids, out, flags, max_tokens)
    if stream is not None:  # the ids the client already received
        for call, sent in zip(result.tool_calls, stream.calls):
            call["id"] = sent["id"]
    yield {"finish_reason": result.finish_reason, "usage": result.usage, "result": result}


_REQUEST_KEYS = {"prompt", "response_format", "tools", "tool_choice", "parallel_tool_calls", "format", "thinking",
                 "max_tokens", "sampler"}


def batch_generate(model: Any, tokenizer: Any, requests: list[dict], *, max_tokens: int = 256,
                   sampler: Any = None, **kwargs: Any) -> list[Result]:
    """Several requests in one mlx-lm ``BatchGenerator``, each under its own constraint.

    Each request is a dict with ``prompt`` and any of ``generate``'s options (response_format,
    tools, tool_choice, parallel_tool_calls, format, thinking, max_tokens, sampler). Every
    sequence gets its own processor and its own end tokens; nothing is shared between them.
    Other keyword arguments go to ``BatchGenerator``.
    """
    from mlx_lm.generate import BatchGenerator, StopSequences

    setups = []
    for i, request in enumerate(requests):
        unknown = set(request) - _REQUEST_KEYS
        if unknown or "prompt" not in request:
            raise RequestError(f"request {i}: needs 'prompt'; unknown keys {sorted(unknown)}")
        grammar, ids = _setup(tokenizer, request["prompt"], request.get("response_format"), request.get("tools"),
                              request.get("tool_choice", "auto"), request.get("parallel_tool_calls", True),
                              request.get("format"), request.get("thinking"))
        budget = request.get("max_tokens", max_tokens)
        processor = grammar.processor(budget) if grammar is not None else None
        eos = grammar.vocab.eos_ids if grammar is not None else sorted(tokenizer.eos_token_ids)
        setups.append((grammar, ids, budget, processor, eos))
    gen = BatchGenerator(model, sampler=sampler, **kwargs)
    try:
        uids = gen.insert([ids for _, ids, _, _, _ in setups], max_tokens=[b for _, _, b, _, _ in setups],
                          samplers=[r.get("sampler") for r in requests],
                          logits_processors=[[p] if p is not None else [] for _, _, _, p, _ in setups],
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
    return [_result(tokenizer, g, ids, outs[uid], flags[uid], budget)
            for uid, (g, ids, budget, _, _) in zip(uids, setups)]
