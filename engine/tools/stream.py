"""Streaming: token ids in, OpenAI-style deltas out, by the grammar's own parser.

Each token is decoded onto the text so far (an incremental UTF-8 decoder), and while the output is
inside free text (reasoning or content) whose end can only be a special token, tokens with no
special token in them just extend that text: no regex runs, so the cost per token stays flat
however long the reasoning grows. Likewise inside a call's JSON arguments: a token that leaves the
arguments' object open is sent as an arguments fragment as it is (a small scanner keeps the
object's depth); inside an XML parameter's value (qwen3_coder, GLM), a token that cannot close it
is sent as JSON string text when the value is free raw text (its end held back while it may still
be the closer's start), and changes nothing to send otherwise (a JSON value or an enum is sent once
its parameter closes). Anything else (a special
token, the arguments closing, a format whose calls begin with ordinary text) re-reads the output
with the parser's regexes, which are the reference: ``incremental=False`` always takes that path.
"""

from __future__ import annotations

import codecs
from typing import Any

from ..errors import GenerationError
from .parser import OpenValue, Parser, call_id, raw_fragment


class StreamParser:
    """Feed token ids as they come; ``feed`` returns OpenAI-style deltas: ``{"reasoning_content": s}``,
    ``{"content": s}`` and ``{"tool_calls": [...]}``. A call opens with
    ``{"index", "id", "type", "function": {"name", "arguments": ""}}`` once its tool is certain,
    then sends ``{"index", "function": {"arguments": fragment}}`` as its arguments grow.
    Concatenated (see ``accumulate``), the deltas equal ``parse`` of the whole output."""

    def __init__(self, parser: Parser, *, incremental: bool = True) -> None:
        self.p = parser
        self.incremental = incremental
        self.sent = {"reasoning": 0, "content": 0}
        self.calls: list[dict] = []  # per opened call: id, name, arguments sent so far
        self.closed = 0
        self._parts: list[str] = []  # the output so far, special tokens as their symbols (joined on demand)
        self.ended = False  # an end-of-sequence token arrived: nothing after it counts
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._region: str | None = None  # the free text (reasoning or content) the output is inside
        self._held = ""  # that text's trailing whitespace, not sent yet (leading whitespace is never sent)
        self._backlog = ""  # text decoded while waiting for the rest of a character, not yet read
        self.rereads = 0  # feeds that re-read the whole output (the rest only extended free text)
        self._args: _JsonDepth | None = None  # inside the open call's JSON arguments, all sent
        self._value: OpenValue | None = None  # inside an XML parameter's value

    def _append(self, token_ids: list[int]) -> str:
        """Decode ``token_ids`` onto the text; returns what they added."""
        if self.ended:
            return ""
        data, self.ended = self.p.symbol_bytes(token_ids)
        new = self._decoder.decode(data)
        self._parts.append(new)
        return new

    @property
    def text(self) -> str:
        if len(self._parts) > 1:
            self._parts[:] = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def feed(self, token_ids: list[int]) -> list[dict]:
        new = self._backlog + self._append(list(token_ids))
        if self._decoder.getstate()[0] or new.endswith("\ufffd"):
            self._backlog = new
            return []  # a character split across tokens: wait for its other bytes
        self._backlog = ""
        if self.incremental and not self.p.has_symbol(new):
            if self._region is not None:
                return self._extend(self._region, new)
            if self._args is not None and self._args.stays_open(new):
                return self._arguments_grow(new)
            if self._value is not None and self.p.value_stop not in self._value.held + new:
                if not self._value.streamed:
                    return []  # a JSON value or an enum: sent once its parameter closes
                fragment, self._value.held = raw_fragment(self._value.held + new, self.p.value_closer)
                return self._arguments_grow(fragment)
        return self._reread()

    def _extend(self, role: str, new: str) -> list[dict]:
        """``_grow`` for text appended to the free text ``role``, in time proportional to ``new``."""
        more = self._held + new
        if self.sent[role] == 0:
            more = more.lstrip()
        kept = more.rstrip()
        self._held = more[len(kept):]
        if not kept:
            return []
        self.sent[role] += len(kept)
        return [{"reasoning_content" if role == "reasoning" else "content": kept}]

    def _reread(self) -> list[dict]:
        """Read the whole output with the parser's regexes and send what is new."""
        text = self.text
        self._region = None
        self._args = None
        self._value = None
        self.rereads += 1
        m = self.p.top.fullmatch(text, partial=True)
        if m is None:
            raise GenerationError(f"output left the {self.p.fmt.name} format: {self.p.plain(text)[-200:]!r}")
        gd = m.groupdict()
        deltas = []
        reasoning = gd.get("reasoning_text")
        closer = self.p.reasoning_closer
        if reasoning is None and closer:
            trial = self.p.top.fullmatch(text + closer, partial=True)
            if trial is not None and trial.groupdict().get("reasoning_text") is not None \
                    and trial.end("reasoning_text") == len(text):
                reasoning = trial.group("reasoning_text")
                if self.p.reasoning_ends_on_symbol:
                    self._region = "reasoning"
        if reasoning is not None:
            deltas += self._grow("reasoning", "reasoning_content", reasoning)
        content = gd.get("content_text")
        # text that could still become calls (Llama 3's bare JSON) is held back
        if content is not None and self.p.calls_region.fullmatch(content.lstrip(), partial=True) is None:
            deltas += self._grow("content", "content", content)
        if content is not None and m.end("content_text") == len(text) and self.p.content_ends_on_symbol:
            self._region = "content"
        if self._region is not None:
            region = reasoning if self._region == "reasoning" else content
            self._held = region.lstrip()[self.sent[self._region]:] if self.sent[self._region] else region
        start = self._calls_start(m, len(text))
        if start is None:
            return deltas
        pos = start
        for k, cm in enumerate(self.p.any_call.finditer(text, start)):
            pos = cm.end()
            if k >= self.closed:
                call = self.p.call(cm.group(), [])
                deltas += self._send(k, call["id"], call["function"]["name"], call["function"]["arguments"])
                self.closed += 1
        pm = self.p.any_call.search(text, pos, partial=True)
        if pm is not None and pm.partial:
            found = self.p.open_call(text[pm.start():])
            if found is not None:
                ti, groups, arguments, self._value = found
                name = self.p.calls[ti].tool.name
                deltas += self._send(self.closed, call_id(name, groups), name, arguments)
                if self.p.arguments[ti] is not None and text.endswith(arguments) and arguments.lstrip().startswith("{"):
                    depth = _JsonDepth()
                    if depth.stays_open(arguments):
                        self._args = depth  # the text ends inside the arguments' object
        return deltas

    def _arguments_grow(self, fragment: str) -> list[dict]:
        """The open call's arguments grew by ``fragment`` (sent as it is)."""
        if not fragment:
            return []
        index = len(self.calls) - 1
        self.calls[index]["arguments"] += fragment
        return [{"tool_calls": [{"index": index, "function": {"arguments": fragment}}]}]

    def _send(self, index: int, cid: str, name: str, arguments: str) -> list[dict]:
        """The header of call ``index`` (once) and whatever its arguments grew by."""
        out = []
        if index == len(self.calls):
            self.calls.append({"id": cid, "name": name, "arguments": ""})
            out.append({"tool_calls": [{"index": index, "id": cid, "type": "function",
                                        "function": {"name": name, "arguments": ""}}]})
        sent = self.calls[index]
        if not arguments.startswith(sent["arguments"]):
            raise GenerationError(f"call {index}: streamed arguments {sent['arguments']!r} are not a prefix "
                                  f"of {arguments!r}")
        if len(arguments) > len(sent["arguments"]):
            out.append({"tool_calls": [{"index": index, "function": {"arguments": arguments[len(sent["arguments"]):]}}]})
            sent["arguments"] = arguments
        return out

    @staticmethod
    def _calls_start(m, length: int) -> int | None:
        """Where the (possibly unfinished) calls begin, or None while the text is still content."""
        gd = m.groupdict()
        if gd.get("tool_calls") is not None:
            return m.start("tool_calls")
        if gd.get("content") is not None:
            return m.end("content") if m.end("content") < length else None
        return m.end("reasoning") if gd.get("reasoning") is not None else 0

    def _grow(self, role: str, key: str, text: str) -> list[dict]:
        """Send what is new, without leading and (not yet final) trailing whitespace."""
        text = text.strip()
        new = text[self.sent[role]:]
        if not new:
            return []
        self.sent[role] = len(text)
        return [{key: new}]


class _JsonDepth:
    """How deep a JSON text is, string and escape states included, fed piece by piece."""

    def __init__(self) -> None:
        self.depth, self.in_string, self.escaped = 0, False, False

    def stays_open(self, text: str) -> bool:
        """Read ``text``; True when the outermost container is open throughout and after it (the
        state is then advanced), False when ``text`` closes it (the state is then left as it was)."""
        depth, in_string, escaped = self.depth, self.in_string, self.escaped
        opened = depth > 0
        for c in text:
            if in_string:
                if escaped:
                    escaped = False
                elif c == "\\":
                    escaped = True
                elif c == '"':
                    in_string = False
            elif c == '"':
                in_string = True
            elif c in "{[":
                depth += 1
                opened = True
            elif c in "}]":
                depth -= 1
                if depth <= 0:
                    return False
            elif not opened and not c.isspace():
                return False  # a value that is not a container: its end cannot be told here
        if not opened:
            return False
        self.depth, self.in_string, self.escaped = depth, in_string, escaped
        return True


def accumulate_deltas(deltas: list[dict]) -> dict:
    """Streamed deltas put back together: content, reasoning_content and whole tool calls."""
    out: dict[str, Any] = {"content": None, "reasoning_content": None, "tool_calls": []}
    for d in deltas:
        for key in ("content", "reasoning_content"):
            if d.get(key):
                out[key] = (out[key] or "") + d[key]
        for c in d.get("tool_calls", []):
            if c["index"] == len(out["tool_calls"]):
                out["tool_calls"].append({"id": c.get("id"), "type": "function",
                                          "function": {"name": c["function"].get("name", ""), "arguments": ""}})
            out["tool_calls"][c["index"]]["function"]["arguments"] += c["function"].get("arguments", "")
    return out


class FreeTextStream:
    """Free text (no tools, no schema) read as the family's reasoning, then content, as it grows:
    ``feed(text)`` returns ``{"reasoning_content": s}`` and ``{"content": s}`` deltas, the text as
    written (only the markers are taken out), holding back what may still turn out to be a marker;
    ``feed("", final=True)`` flushes. Reasoning is recognised when the text opens with the opener.
    Each feed costs time in proportion to its own text."""

    def __init__(self, markers: tuple[str, str] | None) -> None:
        self.opener, self.closer = markers or ("", "")
        self.phase = "start" if self.opener else "content"
        self.buf = ""  # text read but not yet sent

    def feed(self, text: str, final: bool = False) -> list[dict]:
        self.buf += text
        out: list[dict] = []
        while True:
            if self.phase == "start":
                if self.buf.startswith(self.opener):
                    self.buf, self.phase = self.buf[len(self.opener):], "reasoning"
                elif self.opener.startswith(self.buf) and not final:
                    return out  # may still become the opener
                else:
                    self.phase = "content"
            elif self.phase == "reasoning":
                at = self.buf.find(self.closer)
                if at >= 0:
                    out += _delta("reasoning_content", self.buf[:at])
                    self.buf, self.phase = self.buf[at + len(self.closer):], "content"
                    continue
                cut = len(self.buf) - (0 if final else len(self.closer) - 1)
                if cut > 0:
                    out += _delta("reasoning_content", self.buf[:cut])
                    self.buf = self.buf[cut:]
                return out
            else:
                out += _delta("content", self.buf)
                self.buf = ""
                return out


def _delta(key: str, text: str) -> list[dict]:
    return [{key: text}] if text else []
