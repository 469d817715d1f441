"""Generation with mlx-lm under a Grammar: the one call most users need."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm import stream_generate

from .grammar import Grammar, compile_json_schema


@dataclass
class Result:
    text: str
    parsed: Any = None
    finish_reason: str = "stop"  # "stop": complete output; "length": the budget ended free text
    usage: dict = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # schema violations (only possible when lenient)
    token_ids: list[int] = field(default_factory=list)


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


def _prompt_ids(tokenizer: Any, prompt: Any) -> list[int]:
    if isinstance(prompt, str):
        return tokenizer.encode(prompt, add_special_tokens=False)
    if prompt and isinstance(prompt[0], dict):
        return tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
    return list(prompt)


def generate(
    model: Any,
    tokenizer: Any,
    prompt: Any,
    *,
    response_format: Any = None,
    max_tokens: int = 256,
    sampler: Any = None,
    **kwargs: Any,
) -> Result:
    """Generate with mlx-lm; with ``response_format`` (a JSON schema, OpenAI's
    ``{"type": "json_schema", ...}``, or a compiled Grammar) the text is always complete,
    valid JSON within ``max_tokens``. ``prompt`` is text, token ids or chat messages."""
    grammar = None
    if response_format is not None:
        grammar = response_format if isinstance(response_format, Grammar) else compile_json_schema(tokenizer, _schema_of(response_format))
    ids = _prompt_ids(tokenizer, prompt)
    processors = list(kwargs.pop("logits_processors", None) or [])
    proc = grammar.processor(max_tokens) if grammar is not None else None
    if proc is not None:
        processors.append(proc)
    eos = set(grammar.vocab.eos_ids) if grammar else set(tokenizer.eos_token_ids)
    out: list[int] = []
    ended = False
    for response in stream_generate(model, tokenizer, mx.array(ids), max_tokens=max_tokens,
                                    sampler=sampler, logits_processors=processors, **kwargs):
        if response.token in eos:
            ended = True
            break
        out.append(response.token)
    text = tokenizer.decode(out)
    result = Result(text=text, token_ids=out, usage={
        "prompt_tokens": len(ids), "completion_tokens": len(out) + int(ended),
        "total_tokens": len(ids) + len(out) + int(ended)})
    if grammar is not None:
        state = grammar.automaton.walk(out)
        result.finish_reason = "stop" if state >= 0 and grammar.automaton.final[state] else "length"
        result.parsed, result.errors = grammar.validate(text)
    else:
        result.finish_reason = "stop" if ended else "length"
    return result
