"""compile_tools: a request's tools and modes, checked, compiled once and cached."""

from __future__ import annotations

import json
import re
from typing import Any

from ..automata.builders import DEFAULT_TIMEOUT
from ..caches import Cache
from ..errors import CompileError, RequestError, SchemaError, TokenizerError
from ..json_schema import WHITESPACE
from ..vocabulary import Vocab, build_vocab
from .calls import normalize_tools
from .formats import FAMILIES, detect_format, load_format
from .grammar import ToolGrammar
from .tree import Format

DEFAULT_RESERVE = 32
# compiled tool grammars, bounded by the bytes of their automata when they were cached (argument
# automata compiled later, in lazy mode, live in the automata cache, which is bounded by bytes too)
TOOL_GRAMMARS = Cache("tool grammars", 1 << 30, lambda g: g.nbytes)
TOOL_VOCABS = Cache("tool vocabularies", 16, per_vocabulary=True)  # by (vocabulary, end-of-sequence ids)


def tool_vocab(vocab: Vocab, fmt: Format) -> Vocab:
    """The vocabulary with the format's own special tokens removed from the end-of-sequence ids."""
    named = {vocab.special.get(t) for t in fmt.special_texts()}
    eos = tuple(i for i in vocab.eos_ids if i not in named)
    if eos == vocab.eos_ids:
        return vocab
    if not eos:
        raise CompileError(f"format {fmt.name}: every end-of-sequence token of the tokenizer is also a format token")
    return TOOL_VOCABS.get_or_build((vocab.fingerprint, eos), lambda: vocab.with_eos(eos))


def check_tool_choice(tool_choice: Any, names: set[str]) -> None:
    """Raise RequestError unless ``tool_choice`` is a mode or names one of ``names``."""
    if tool_choice in ("auto", "required", "none"):
        return
    wanted = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    if not isinstance(wanted, str):
        raise RequestError(f"tool_choice must be 'auto', 'required', 'none' or "
                           f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")
    if wanted not in names:
        raise RequestError(f"tool_choice names {wanted!r}, which is not among the offered tools")


def compile_tools(
    tokenizer: Any,
    tools: Any,
    *,
    tool_choice: Any = "auto",
    parallel_tool_calls: bool = True,
    format: str | None = None,
    thinking: bool | str | None = None,
    reserve: int = DEFAULT_RESERVE,
    strict: bool = True,
    whitespace: str = WHITESPACE,
    lazy: bool = True,
    workers: int = 2,
    timeout: float | None = DEFAULT_TIMEOUT,
) -> ToolGrammar:
    """Compile ``tools`` in the model family's tool-call format; cached by tokenizer and request.

    ``tool_choice``: "auto", "required", "none" or ``{"type": "function", "function": {"name": ...}}``.
    ``thinking``: None (as the model likes), True (think first), False (no thinking) or "open"
    (the prompt already opened the thinking section). ``reserve``: tokens kept for the call's
    arguments when a required call has to cut thinking short. Per-tool pieces are cached apart,
    so a changed tool list compiles only the tools that changed. With ``lazy`` (the default) a
    tool's argument automaton is compiled when the model first calls that tool (a disk-cache hit
    after the first time), and until a call is inside its arguments they are counted by a bound
    (their shortest text in bytes), so budgets are a little conservative; ``lazy=False``
    compiles every tool now and counts exact token distances. ``timeout`` (seconds) bounds each
    automaton build; with ``lazy`` a tool whose arguments overrun it fails at its first call.
    """
    base = build_vocab(tokenizer)
    try:
        request = json.dumps([tools, tool_choice])
    except (TypeError, ValueError) as e:
        raise SchemaError(f"tools must be JSON data: {e}") from None
    fast_key = (base.fingerprint, format, request, bool(parallel_tool_calls), thinking, reserve, strict, whitespace, lazy)
    g = TOOL_GRAMMARS.get(fast_key)
    if g is not None:  # an agent loop sending the same tools again: no checks, no hashing
        return g
    name = format or detect_format(tokenizer)
    if name not in FAMILIES:
        raise RequestError(f"unknown tool-call format {name!r}; known: {', '.join(FAMILIES)}")
    fmt = load_format(name)
    missing = [t for t in fmt.special_texts() if not base.has_token(t)]
    if missing:
        raise TokenizerError(f"format {name!r} needs the special tokens {missing}, which tokenizer "
                             f"{base.name!r} does not have")
    offered = normalize_tools(tools)
    name_rule = fmt.patterns.get("TOOL_NAME_PATTERN")
    for t in offered:
        if name_rule is not None and not re.fullmatch(name_rule, t.name):
            raise SchemaError(f"tool name {t.name!r} cannot be written in the {name} format "
                              f"(names must match {name_rule})", tool=t.name)
    check_tool_choice(tool_choice, {t.name for t in offered})
    if thinking not in (None, True, False, "open"):
        raise RequestError(f"thinking must be None, True, False or 'open', got {thinking!r}")
    vocab = tool_vocab(base, fmt)
    key = (vocab.fingerprint, name, json.dumps([t.key for t in offered]), json.dumps(tool_choice, sort_keys=True),
           bool(parallel_tool_calls), thinking, reserve, strict, whitespace, lazy)
    g = TOOL_GRAMMARS.get(key)
    if g is None:
        g = TOOL_GRAMMARS.put(key, ToolGrammar(
            vocab, fmt, offered, tool_choice=tool_choice, parallel=bool(parallel_tool_calls), thinking=thinking,
            reserve=reserve, strict=strict, whitespace=whitespace, lazy=lazy, workers=workers, timeout=timeout))
    # counted under both keys, so neither outlives the bound
    return TOOL_GRAMMARS.put(fast_key, g)
