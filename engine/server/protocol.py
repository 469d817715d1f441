"""OpenAI's chat-completions request read into what the engine runs, and its response shapes.

Every field is either used or refused: an unknown field, or a known one set to a value we do not
support, is an ``ApiError`` (a 400 in OpenAI's error shape) naming it. Fields whose value cannot
change the output (``user``, ``metadata``) and defaults (``n: 1``, ``logprobs: false``, penalties
of 0) are accepted.
"""

from __future__ import annotations

import functools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import mlx.core as mx
from mlx_lm.sample_utils import apply_top_p


class ApiError(Exception):
    """An error the client gets in OpenAI's shape: ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, message: str, param: str | None = None, *, status: int = 400,
                 kind: str = "invalid_request_error", code: str | None = None) -> None:
        super().__init__(message)
        self.message, self.param, self.status, self.kind, self.code = message, param, status, kind, code

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}


# fields whose value is free: they cannot change what is generated
_FREE = {"model", "messages", "user", "metadata", "store"}
# fields accepted at their default value only, with that value
_DEFAULT_ONLY = {"n": 1, "logprobs": False, "presence_penalty": 0, "frequency_penalty": 0, "logit_bias": None,
                 "top_logprobs": None, "service_tier": None, "modalities": None, "prediction": None}
_USED = {"tools", "tool_choice", "parallel_tool_calls", "response_format", "max_tokens", "max_completion_tokens",
         "temperature", "top_p", "seed", "stop", "stream", "stream_options", "reasoning_effort", "thinking"}
_ROLES = {"system", "developer", "user", "assistant", "tool"}
DEFAULT_MAX_TOKENS = 512
MAX_STOPS = 4


@dataclass
class Plan:
    """What one request asks the engine for."""

    messages: list[dict]
    tools: list | None = None
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    schema: Any = None  # the response_format's JSON schema (None: free text)
    strict: bool = True  # the schema enforced in full (SchemaError otherwise), or as far as it can be
    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int | None = None
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    include_usage: bool = False
    thinking: bool | None = None


def _number(body: dict, name: str, lo: float, hi: float, default: float) -> float:
    v = body.get(name, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise ApiError(f"'{name}' must be a number from {lo} to {hi}, got {v!r}", name)
    return float(v)


def _flag(body: dict, name: str, default: bool) -> bool:
    v = body.get(name, default)
    if not isinstance(v, bool):
        raise ApiError(f"'{name}' must be a boolean", name)
    return v


def _text(content: Any, where: str) -> str:
    """A message's content: a string, or a list of text parts joined."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        out = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise ApiError(f"only text content parts are supported, got {str(part)[:80]}", f"{where}.content[{i}]")
            out.append(part["text"])
        return "".join(out)
    raise ApiError("content must be a string or a list of text parts", f"{where}.content")


def _messages(value: Any) -> list[dict]:
    if not isinstance(value, list) or not value:
        raise ApiError("'messages' must be a non-empty array", "messages")
    out = []
    for i, m in enumerate(value):
        where = f"messages[{i}]"
        if not isinstance(m, dict) or m.get("role") not in _ROLES:
            raise ApiError(f"each message needs a role among {sorted(_ROLES)}", f"{where}.role")
        msg = {"role": "system" if m["role"] == "developer" else m["role"], "content": _text(m.get("content"), where)}
        if m["role"] == "tool":
            if not isinstance(m.get("tool_call_id"), str):
                raise ApiError("a tool message needs its 'tool_call_id'", f"{where}.tool_call_id")
            msg["tool_call_id"] = m["tool_call_id"]
        if m["role"] == "assistant" and m.get("tool_calls"):
            calls = []
            for k, c in enumerate(m["tool_calls"]):
                fn = c.get("function") if isinstance(c, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
                    raise ApiError("a tool call needs function.name", f"{where}.tool_calls[{k}].function.name")
                args = fn.get("arguments", "{}")
                try:
                    args = json.loads(args) if isinstance(args, str) else args
                except ValueError:
                    raise ApiError("function.arguments must be a JSON string", f"{where}.tool_calls[{k}].function.arguments") from None
                # chat templates read arguments as a mapping (Llama 3's writes them with tojson)
                calls.append({"id": c.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}})
            msg["tool_calls"] = calls
        out.append(msg)
    return out


def _tool_choice(value: Any, tools: list | None) -> tuple[Any, list | None]:
    """The engine's tool_choice, and the tools the grammar offers (allowed_tools narrows them)."""
    if value is None:
        return "auto", tools
    if value in ("auto", "required", "none"):
        return value, tools
    if isinstance(value, dict) and value.get("type") == "function":
        name = (value.get("function") or {}).get("name")
        if not isinstance(name, str):
            raise ApiError("tool_choice of type function needs function.name", "tool_choice.function.name")
        if name not in {t["function"]["name"] for t in tools or []}:
            raise ApiError(f"tool_choice names {name!r}, which is not among the tools", "tool_choice.function.name")
        return {"type": "function", "function": {"name": name}}, tools
    if isinstance(value, dict) and value.get("type") == "allowed_tools":
        spec = value.get("allowed_tools") or {}
        mode = spec.get("mode", "auto")
        if mode not in ("auto", "required"):
            raise ApiError("allowed_tools.mode must be 'auto' or 'required'", "tool_choice.allowed_tools.mode")
        names = [(t.get("function") or {}).get("name") for t in spec.get("tools") or [] if isinstance(t, dict)]
        offered = {t["function"]["name"] for t in tools or []}
        unknown = [n for n in names if n not in offered]
        if not names or unknown:
            raise ApiError(f"allowed_tools must name offered tools (unknown: {unknown})", "tool_choice.allowed_tools.tools")
        return mode, [t for t in tools if t["function"]["name"] in names]
    raise ApiError(f"tool_choice must be 'auto', 'required', 'none', a function or allowed_tools, got {value!r}",
                   "tool_choice")


def _tools(value: Any) -> list | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise ApiError("'tools' must be an array", "tools")
    for i, t in enumerate(value):
        if not isinstance(t, dict) or t.get("type") != "function" or not isinstance(t.get("function"), dict) \
                or not isinstance(t["function"].get("name"), str):
            raise ApiError("each tool must be {'type': 'function', 'function': {'name': ...}}", f"tools[{i}]")
    return value or None


def read_request(body: Any) -> Plan:
    """Check a chat-completions body and read it into a Plan; raises ApiError naming the field."""
    if not isinstance(body, dict):
        raise ApiError("the request body must be a JSON object")
    for name in body:
        if name in _DEFAULT_ONLY:
            if body[name] not in (_DEFAULT_ONLY[name], None):
                raise ApiError(f"'{name}' is not supported (only {_DEFAULT_ONLY[name]!r})", name)
        elif name not in _FREE and name not in _USED:
            raise ApiError(f"unknown or unsupported field '{name}'", name)
    plan = Plan(messages=_messages(body.get("messages")))
    tools = _tools(body.get("tools"))
    plan.tool_choice, plan.tools = _tool_choice(body.get("tool_choice"), tools)
    if body.get("tool_choice") not in (None, "none", "auto") and not tools:
        raise ApiError("tool_choice needs tools", "tool_choice")
    plan.parallel_tool_calls = _flag(body, "parallel_tool_calls", True)
    rf = body.get("response_format")
    if rf is not None:
        kind = rf.get("type") if isinstance(rf, dict) else None
        if kind == "json_object":
            plan.schema = {"type": "object"}
        elif kind == "json_schema":
            spec = rf.get("json_schema")
            if not isinstance(spec, dict) or "schema" not in spec:
                raise ApiError("response_format json_schema needs json_schema.schema", "response_format.json_schema.schema")
            plan.schema, plan.strict = spec["schema"], spec.get("strict") is not False
        elif kind != "text":
            raise ApiError("response_format.type must be 'text', 'json_object' or 'json_schema'", "response_format.type")
        if plan.schema is not None and tools and plan.tool_choice != "none":
            raise ApiError("response_format with tools is not supported: pass one or the other (or tool_choice 'none')",
                           "response_format")
        if plan.tool_choice == "none":
            plan.tools = None
    for name in ("max_completion_tokens", "max_tokens"):
        v = body.get(name)
        if v is not None:
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ApiError(f"'{name}' must be a positive integer, got {v!r}", name)
            plan.max_tokens = v
            break
    plan.temperature = _number(body, "temperature", 0, 2, 1.0)
    plan.top_p = _number(body, "top_p", 0, 1, 1.0)
    if plan.top_p == 0:
        raise ApiError("'top_p' must be above 0", "top_p")
    seed = body.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise ApiError("'seed' must be an integer", "seed")
    plan.seed = seed
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else stop or []
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or not all(isinstance(s, str) and s for s in stops):
        raise ApiError(f"'stop' must be a string or up to {MAX_STOPS} non-empty strings", "stop")
    if stops and (plan.tools or plan.schema is not None):
        raise ApiError("'stop' applies to free text only, not with tools or response_format", "stop")
    plan.stop = stops
    plan.stream = _flag(body, "stream", False)
    opts = body.get("stream_options")
    if opts is not None:
        if not isinstance(opts, dict) or set(opts) - {"include_usage"} or not plan.stream:
            raise ApiError("stream_options takes include_usage, with stream: true", "stream_options")
        plan.include_usage = bool(opts.get("include_usage"))
    effort = body.get("reasoning_effort")
    if effort is not None:
        if effort not in ("none", "minimal", "low", "medium", "high"):
            raise ApiError("reasoning_effort must be none, minimal, low, medium or high", "reasoning_effort")
        plan.thinking = effort not in ("none", "minimal")
    if body.get("thinking") is not None:
        plan.thinking = _flag(body, "thinking", False)
    return plan


def sampler(temperature: float, top_p: float, seed: int | None):
    """Greedy at temperature 0; otherwise sampling with its own random key when ``seed`` is given,
    so a request's draws do not depend on the others in the batch. Requests without a seed share
    one sampler per (temperature, top_p): mlx-lm samples a batch whose rows share a sampler in one
    call instead of one call per row."""
    if temperature == 0 or seed is None:
        return _shared_sampler(temperature, top_p)
    return _sampler(temperature, top_p, [mx.random.key(seed)])


@functools.lru_cache(maxsize=64)
def _shared_sampler(temperature: float, top_p: float):
    if temperature == 0:
        return lambda logprobs: mx.argmax(logprobs, axis=-1)
    return _sampler(temperature, top_p, None)


def _sampler(temperature: float, top_p: float, key: list | None):
    def sample(logprobs: mx.array) -> mx.array:
        if top_p < 1:
            logprobs = apply_top_p(logprobs, top_p)
        if key is None:
            return mx.random.categorical(logprobs * (1 / temperature))
        key[0], sub = mx.random.split(key[0])
        return mx.random.categorical(logprobs * (1 / temperature), key=sub)
    return sample


def _fingerprint() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"toolgate-{version('mlx-toolgate')}-mlx-{version('mlx')}"
    except PackageNotFoundError:
        return "toolgate"


FINGERPRINT = _fingerprint()


def usage_of(usage: dict) -> dict:
    """The engine's token counts in OpenAI's usage shape (no prompt cache: nothing is cached)."""
    return {**usage, "prompt_tokens_details": {"cached_tokens": 0}}


def completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def response(cid: str, model: str, message: dict, finish_reason: str, usage: dict) -> dict:
    return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "system_fingerprint": FINGERPRINT,
            "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
            "usage": usage_of(usage)}


def chunk(cid: str, model: str, delta: dict | None, finish_reason: str | None = None, usage: dict | None = None) -> dict:
    out = {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
           "system_fingerprint": FINGERPRINT,
           "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason,
                                                 "logprobs": None}]}
    if usage is not None:
        out["usage"] = usage_of(usage)
    return out
