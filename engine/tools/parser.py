"""Turn generated output back into content, reasoning and tool calls, by the format's own rules.

The parser's regexes are rendered from the same format tree and the same per-tool regexes as the
mask, so whatever the mask allowed, the parser reads the same way. Python's ``regex`` module runs
them; its prefix matching (``partial=True``) drives the streaming parser.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import regex

from ..errors import GenerationError
from ..regexes import py_regex
from ..vocabulary import Vocab
from .calls import CallSpec, symbol_filler
from .tree import Format, body, render


@dataclass
class ParsedOutput:
    """What one turn said: its text parts and its calls."""

    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[dict] = field(default_factory=list)  # OpenAI shape, arguments as JSON text
    errors: list[str] = field(default_factory=list)  # schema violations (only possible when lenient)


class Parser:
    """Reads a turn by the regexes of the same tree and call specifications the mask was built from."""

    def __init__(self, fmt: Format, start: Any, calls: list[CallSpec], symbols: dict[str, str], vocab: Vocab) -> None:
        self.fmt = fmt
        self.calls = calls
        self.vocab = vocab
        self.symbols = dict(symbols)
        self.fill_symbols = symbol_filler(self.symbols)
        by_text = {fmt.specials[name]: ch for name, ch in self.symbols.items()}
        self.replace = sorted(by_text.items(), key=lambda kv: -len(kv[0]))
        self.to_text = {ch: text for text, ch in by_text.items()}
        groups = [g for c in calls for g in c.groups]  # linked definitions, which holes call by name
        self.defines = f"(?(DEFINE){''.join(groups)})" if groups else ""
        self.patterns = [self._compile(self._call_regex(ti, True)) for ti in range(len(calls))]
        # for streaming: each call's text up to its arguments, and the JSON arguments alone
        self.heads = [self._compile(self._call_regex(ti, True, head=True))
                      for ti in range(len(calls))]
        self.arguments = [self._compile(c.holes["ARGUMENTS"]) if "ARGUMENTS" in c.holes else None
                          for c in calls]
        any_call = "(?:" + "|".join(f"(?:{self._call_regex(ti, False)})" for ti in range(len(calls))) + ")"
        self.any_call = self._compile(any_call)

        def fill(n):
            if n[0] == "ref" and n[1] == "call":
                return any_call
            return self.fill_symbols(n)

        self.top = self._compile(render(fmt, start, fill, groups=True))
        region = fmt.rules.get("tool_calls", ("ref", "call"))
        self.calls_region = self._compile(render(fmt, region, fill))
        self.params = [
            {key: (self._compile(self._parameter_regex(key, value)), raw)
             for key, (value, raw) in c.values.items()}
            for c in calls
        ]
        # for streaming XML parameters: the fixed text closing a value and its first non-blank
        # character (a parameter completes only once that character comes after its value
        # begins), and each call's parameter openings (the text before a value)
        param = fmt.rules.get("parameter")
        self.value_closer = self._closer(param, "PARAM_VALUE") if param is not None else ""
        self.value_stop = self.value_closer.strip()[:1]
        self.value_openers = [
            {key: self._compile(self._parameter_regex(key, None)) for key in c.values}
            if self.value_stop else {}
            for c in calls
        ]
        reasoning = fmt.rules.get("reasoning")
        self.reasoning_closer = self._closer(reasoning) if reasoning is not None else ""
        # free text whose end can only be a special token (so a streamed token without one extends it)
        self.reasoning_ends_on_symbol = self.reasoning_closer[:1] in self.to_text
        self.content_ends_on_symbol = "tool_calls" not in fmt.rules or _starts_with_symbol(fmt, fmt.rules["tool_calls"])
        self._symbol_chars = frozenset(self.to_text)

    def _compile(self, rx: str) -> regex.Pattern:
        return regex.compile(py_regex(self.defines + rx), regex.DOTALL)

    def _call_regex(self, ti: int, groups: bool, head: bool = False) -> str:
        """Tool ``ti``'s call; ``head``: only what comes before its arguments."""
        tool, holes = self.calls[ti].tool, self.calls[ti].holes

        def fill(n):
            got = self.fill_symbols(n)
            if got is not None or n[0] != "hole":
                return got
            inner = {"TOOL_NAME": regex.escape(tool.name), "CALL_INDEX": "[0-9]+"}.get(n[1]) or holes[n[1]]
            return f"(?P<{n[1]}>{inner})" if groups else inner

        items = self.calls[ti].items()
        if head:
            items = items[:next(k for k, it in enumerate(items) if it in (("hole", "ARGUMENTS"), ("hole", "PARAMETERS")))]
        return render(self.fmt, ("seq", items), fill)

    def _parameter_regex(self, key: str, value: str | None) -> str:
        """Parameter ``key`` with a value matching ``value``; None: only the text before its value."""
        node = self.fmt.rules["parameter"]
        if value is None:
            items = node[1] if node[0] == "seq" else [node]
            node = ("seq", items[:items.index(("hole", "PARAM_VALUE"))])

        def fill(n):
            got = self.fill_symbols(n)
            if got is not None or n[0] != "hole":
                return got
            return regex.escape(key) if n[1] == "PARAM_KEY" else f"(?P<PARAM_VALUE>{value})"

        return render(self.fmt, node, fill)

    def _closer(self, node, hole: str = "TEXT") -> str:
        """The fixed text after the last ``hole`` of ``node`` (appended to test whether we are inside it)."""
        items = node[1] if node[0] == "seq" else [node]
        texts = [k for k, it in enumerate(items) if it == ("hole", hole)]
        out = []
        for it in items[texts[-1] + 1:] if texts else []:
            if it[0] == "lit":
                out.append(it[1])
            elif it[0] == "sym":
                out.append(self.symbols[it[1]])
            else:
                return ""
        return "".join(out)

    # --- reading ----------------------------------------------------------------------------

    def symbol_text(self, output: Any) -> str:
        """Token ids (exact) or text (special tokens recognised by their text) as symbol text."""
        if isinstance(output, str):
            for text, ch in self.replace:
                output = output.replace(text, ch)
            return output
        return self.symbol_bytes(output)[0].decode("utf-8", errors="replace")

    def symbol_bytes(self, token_ids: Any) -> tuple[bytes, bool]:
        """The UTF-8 of ``token_ids`` with special tokens as their symbols, up to an end-of-sequence
        token, and whether one came."""
        vocab, syms = self.vocab, self.vocab.symbols
        data = bytearray()
        for t in token_ids:
            if t in vocab.eos_ids:
                return bytes(data), True
            if t in syms:
                data += syms[t].encode()
            elif 0 <= t < len(vocab.token_bytes) and vocab.token_bytes[t] is not None:
                data += vocab.token_bytes[t]
            else:
                raise GenerationError(f"token {t} is neither ordinary text nor a token of the {self.fmt.name} format")
        return bytes(data), False

    def has_symbol(self, text: str) -> bool:
        """Whether ``text`` holds a special token of the format."""
        return not self._symbol_chars.isdisjoint(text)

    def plain(self, text: str) -> str:
        return "".join(self.to_text.get(c, c) for c in text)

    def parse(self, output: Any) -> ParsedOutput:
        text = self.symbol_text(output)
        m = self.top.fullmatch(text)
        if m is None:
            raise GenerationError(f"output does not follow the {self.fmt.name} format: {self.plain(text)[:300]!r}")
        gd = m.groupdict()
        out = ParsedOutput(reasoning=_clean(gd.get("reasoning_text")), content=_clean(gd.get("content_text")))
        if gd.get("tool_calls") is not None:
            for cm in self.any_call.finditer(text, *m.span("tool_calls")):
                out.tool_calls.append(self.call(cm.group(), out.errors))
        return out

    def call(self, text: str, errors: list[str]) -> dict:
        """One call's text as an OpenAI tool call; schema violations go to ``errors``."""
        for ti, pattern in enumerate(self.patterns):
            m = pattern.fullmatch(text)
            if m is None:
                continue
            tool = self.calls[ti].tool
            gd = m.groupdict()
            # the arguments keep the model's own JSON text (re-serialising could turn 1e999 into Infinity)
            if gd.get("ARGUMENTS") is not None:
                text_args = gd["ARGUMENTS"]
            else:
                text_args = self._parameters(ti, gd.get("PARAMETERS") or "")[0]
            errors += schema_errors(tool.name, tool.parameters, json.loads(text_args))
            return {"id": call_id(tool.name, gd), "type": "function",
                    "function": {"name": tool.name, "arguments": text_args}}
        raise GenerationError(f"not a call to an offered tool: {self.plain(text)[:300]!r}")

    def _parameters(self, ti: int, text: str, partial: bool = False) -> tuple[str, int]:
        """XML parameters as JSON object text: raw strings quoted, other values as written; and
        where the complete ones end. ``partial``: those complete so far, without the closing brace."""
        out, pos = {}, 0
        while pos < len(text):
            for key, (pattern, raw) in self.params[ti].items():
                m = None if key in out else pattern.match(text, pos)
                if m is not None:
                    value = m.group("PARAM_VALUE")
                    out[key] = json.dumps(value, ensure_ascii=False) if raw else value
                    pos = m.end()
                    break
            else:
                if partial:
                    break
                raise GenerationError(f"cannot read the parameters at {self.plain(text[pos:])[:200]!r}")
        body = ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {v}" for k, v in out.items())
        if partial:
            return ("{" + body if body else ""), pos
        return "{" + body + "}", pos

    def open_call(self, text: str) -> tuple[int, dict, str, OpenValue | None] | None:
        """An unfinished call at the start of ``text``, once its tool is certain: (tool index, head
        groups, arguments so far, the XML parameter value the text ends inside, if any); None
        before that. A free raw value is part of the arguments so far, up to what may still be
        its closer."""
        found = [(ti, m) for ti, pattern in enumerate(self.patterns)
                 if (m := pattern.fullmatch(text, partial=True)) is not None]
        if len(found) != 1:
            return None
        ti, m = found[0]
        if m.span("TOOL_NAME") == (-1, -1) or m.end("TOOL_NAME") >= len(text):
            return None  # a longer name may still follow
        head = self.heads[ti].match(text)
        if head is None:
            return ti, m.groupdict(), "", None
        rest = text[head.end():]
        if self.arguments[ti] is None:
            arguments, end = self._parameters(ti, rest, partial=True)
            return (ti, head.groupdict(), *self._open_value(ti, rest, end, arguments))
        am = self.arguments[ti].match(rest, partial=True)
        return ti, head.groupdict(), rest[:am.end()] if am is not None else "", None

    def _open_value(self, ti: int, rest: str, end: int, arguments: str) -> tuple[str, OpenValue | None]:
        """Call ``ti``'s arguments so far (``arguments``: its complete parameters, which end at
        ``end`` in ``rest``) and the value ``rest`` ends inside, if any."""
        for key, opener in self.value_openers[ti].items():
            m = opener.match(rest, end)
            if m is None:
                continue
            value = rest[m.end():]
            if key in self.calls[ti].free_raw:
                fragment, held = raw_fragment(value, self.value_closer)
                head = arguments + ", " if arguments else "{"
                return f'{head}{json.dumps(key, ensure_ascii=False)}: "{fragment}', OpenValue(True, held)
            if self.value_stop not in value and not self.has_symbol(value):
                return arguments, OpenValue(False)
            return arguments, None
        return arguments, None


@dataclass
class OpenValue:
    """The streamed text ends inside an XML parameter's value. ``streamed``: a free raw string,
    whose text is sent as it grows, all but ``held`` (its end that may yet be the closer's start)."""

    streamed: bool
    held: str = ""


def raw_fragment(value: str, closer: str) -> tuple[str, str]:
    """A raw value's text as it stands: (all of it but its end that may yet be the start of its
    ``closer``, as JSON string text without quotes, as ``_parameters`` quotes the whole value;
    that end)."""
    held = next((value[-k:] for k in range(min(len(value), len(closer)), 0, -1) if value.endswith(closer[:k])), "")
    return json.dumps(value[:len(value) - len(held)], ensure_ascii=False)[1:-1], held


def _starts_with_symbol(fmt: Format, node: Any) -> bool:
    """Every string of ``node`` begins with a special token."""
    kind = node[0]
    if kind == "sym":
        return True
    if kind == "ref":
        return _starts_with_symbol(fmt, body(fmt, node))
    if kind == "seq":
        return bool(node[1]) and _starts_with_symbol(fmt, node[1][0])
    if kind == "alt":
        return all(_starts_with_symbol(fmt, c) for c in node[1])
    if kind == "plus":
        return _starts_with_symbol(fmt, node[1])
    return False  # text, holes, and what may be empty


def call_id(name: str, groups: dict) -> str:
    """Kimi-K2 numbers its calls in the text; other formats get a fresh OpenAI-style id."""
    if groups.get("CALL_INDEX") is not None:
        return f"functions.{name}:{groups['CALL_INDEX']}"
    return f"call_{uuid.uuid4().hex[:24]}"


def _clean(text: str | None) -> str | None:
    return (text.strip() or None) if text is not None else None


def schema_errors(name: str, schema: dict, arguments: Any) -> list[str]:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return [f"tool {name!r} {'/'.join(map(str, e.absolute_path)) or '#'}: {e.message}"
            for e in cls(schema).iter_errors(arguments)]
