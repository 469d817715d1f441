"""The HTTP side: OpenAI's chat-completions endpoint (JSON or server-sent events), models, health.

A request is read and checked (protocol), compiled on a worker thread so a hard schema never
stalls the tokens of the requests already running, then handed to the scheduler's batch; its
tokens come back through an asyncio queue and are read by the family's own parser.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import json
import os
import random
import time
from typing import Any

import anyio
import jinja2
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request as HttpRequest
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route

from ..errors import BudgetError, CompileError, RequestError, SchemaError, ToolgateError
from ..generate import Request, finish, prepare
from ..grammar import compile_json_schema
from ..tools import FreeTextStream, ToolGrammar, detect_format, load_format
from ..vocabulary import build_vocab
from .protocol import ApiError, Plan, chunk, completion_id, read_request, response, sampler
from .scheduler import MAX_ACTIVE, Broken, Busy, Job, Scheduler, follow

MAX_BODY = 8 << 20  # bytes of one request body


def _engine_error(e: ToolgateError, plan: Plan) -> ApiError:
    """An engine refusal as a 400 naming the field it comes from."""
    if isinstance(e, BudgetError):
        field = "max_tokens"
    elif plan.tools:
        field = "tool_choice" if isinstance(e, RequestError) else "tools"
    elif isinstance(e, (SchemaError, CompileError)):
        field = "response_format.json_schema.schema"
    else:
        field = None
    return ApiError(str(e), field, code=type(e).__name__)


def _setup(tokenizer: Any, plan: Plan) -> tuple[Any, list[int], Any]:
    """Compile the request's constraint and render its prompt: (grammar, prompt ids, matcher).
    Tools compile up front: a tool compiled at its first call would hold up the whole batch."""
    rf = compile_json_schema(tokenizer, plan.schema, strict=plan.strict) if plan.schema is not None else None
    request = Request(response_format=rf, tools=plan.tools, tool_choice=plan.tool_choice,
                      parallel_tool_calls=plan.parallel_tool_calls, thinking=plan.thinking, lazy_tools=False,
                      max_tokens=plan.max_tokens)
    grammar, ids = prepare(tokenizer, plan.messages, request)
    matcher = grammar.matcher(plan.max_tokens) if grammar is not None else None
    return grammar, ids, matcher


def _job(tokenizer: Any, plan: Plan, setup: tuple, on_token: Any, on_end: Any, key: int | None = None) -> Job:
    """The scheduler's job for ``plan`` compiled by ``_setup``: its prompt, processor, sampler and
    end tokens, with these callbacks."""
    grammar, ids, matcher = setup
    eos = list((grammar.vocab if grammar is not None else build_vocab(tokenizer)).eos_ids)
    return Job(ids, plan.max_tokens, sampler(plan.temperature, plan.top_p, plan.seed),
               [matcher] if matcher is not None else [], eos, on_token, on_end,
               matcher.complete_at if matcher is not None else None, key=key)


def mirror_job(tokenizer: Any, spec: dict) -> Job:
    """On a rank other than 0: the job rank 0 announced with ``spec`` (the request's body and the
    seed rank 0 drew): the same prompt, processor, sampler and end tokens; no callbacks."""
    plan = read_request(spec["body"])
    plan.seed = spec["seed"]
    return _job(tokenizer, plan, _setup(tokenizer, plan), lambda token: False, lambda reason, error: None)


class _Output:
    """One request's tokens as they arrive, and its end; fed from the scheduler's thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop, vocab: Any, stops: list[str]) -> None:
        self.loop, self.vocab, self.stops = loop, vocab, stops
        self.queue: asyncio.Queue = asyncio.Queue()
        self.tokens: list[int] = []
        self.reason: str | None = None
        self.error: Exception | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._text = ""  # the end of the text so far, for stop strings
        self._window = max((len(s) for s in stops), default=0) + 64

    def on_token(self, token: int) -> bool:
        self.tokens.append(token)
        self.loop.call_soon_threadsafe(self.queue.put_nowait, token)
        if not self.stops:
            return False
        # the last characters only: a stop string ends in the newest token's text
        self._text = (self._text + self._decoder.decode(self.vocab.decode_bytes([token])))[-self._window:]
        return any(s in self._text for s in self.stops)

    def on_end(self, reason: str, error: Exception | None) -> None:
        self.reason, self.error = reason, error
        self.loop.call_soon_threadsafe(self.queue.put_nowait, None)


def _cut(text: str, stops: list[str]) -> tuple[str, bool]:
    """``text`` up to its first stop string, and whether one was found."""
    hits = [text.find(s) for s in stops if s in text]
    return (text[:min(hits)], True) if hits else (text, False)


def create_app(model: Any, tokenizer: Any, model_id: str, *, max_active: int = MAX_ACTIVE, max_waiting: int = 64,
               group: Any = None) -> Starlette:
    """The ASGI app serving ``model``; ``app.state.scheduler`` runs the batch. With ``group`` (rank
    0 of several processes holding shards of the model), the other ranks run ``serve_sharded``."""
    scheduler = Scheduler(model, max_active=max_active, max_waiting=max_waiting, group=group)
    # compiles at once: each build runs in a builder process, and a burst of new schemas must not
    # fork one per request
    compiling = anyio.CapacityLimiter(max(1, os.cpu_count() or 1))
    vocab = build_vocab(tokenizer)
    created = int(time.time())
    try:  # free text is read as reasoning then content by the family's markers, when it has them
        markers = load_format(detect_format(tokenizer)).reasoning_markers()
    except ToolgateError:
        markers = None

    def error(e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status)

    async def read_body(request: HttpRequest) -> Any:
        size = request.headers.get("content-length")
        if size is not None and size.isdigit() and int(size) > MAX_BODY:
            raise ApiError(f"the body has {size} bytes; at most {MAX_BODY}", status=413)
        data = bytearray()
        async for part in request.stream():
            data += part
            if len(data) > MAX_BODY:
                raise ApiError(f"the body exceeds {MAX_BODY} bytes", status=413)
        try:
            return json.loads(data)
        except ValueError as e:
            raise ApiError(f"the body is not JSON: {e}") from None

    async def chat(request: HttpRequest):
        try:
            body = await read_body(request)
            plan = read_request(body)
            if body.get("model") not in (None, model_id):
                raise ApiError(f"the model {body.get('model')!r} is not served here (this server serves {model_id!r})",
                               "model", status=404, code="model_not_found")
            if scheduler.broken:
                raise ApiError(scheduler.broken, status=503, kind="server_error")
            if scheduler.group is not None and plan.seed is None and plan.temperature > 0:
                plan.seed = random.getrandbits(32)  # every rank draws the same tokens
        except ApiError as e:
            return error(e)
        # the other ranks compile this request while this one does; a refusal here drops it there
        key = scheduler.announce({"body": body, "seed": plan.seed})
        submitted = False
        try:
            try:
                grammar, ids, matcher = await anyio.to_thread.run_sync(_setup, tokenizer, plan, limiter=compiling)
            except ToolgateError as e:
                raise _engine_error(e, plan) from None
            except jinja2.TemplateError as e:  # the model's chat template refused the conversation
                raise ApiError(f"the chat template cannot render these messages: {e}", "messages") from None
            out = _Output(asyncio.get_running_loop(), vocab, plan.stop)
            job = _job(tokenizer, plan, (grammar, ids, matcher), out.on_token, out.on_end, key)
            try:
                scheduler.submit(job)
                submitted = True
            except Busy as e:
                raise ApiError(f"the server is busy: {e}", status=429, kind="server_busy", code="server_busy") from None
            except Broken as e:
                raise ApiError(str(e), status=503, kind="server_error") from None
        except ApiError as e:
            return error(e)
        finally:
            if not submitted:
                scheduler.drop(key)
        cid = completion_id()
        if plan.stream:
            return StreamingResponse(_events(cid, plan, grammar, ids, out, job), media_type="text/event-stream")
        try:
            while out.reason is None:
                try:
                    await asyncio.wait_for(out.queue.get(), 0.5)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        scheduler.cancel(job)
                        return JSONResponse({}, status_code=499)
        except asyncio.CancelledError:
            scheduler.cancel(job)
            raise
        if out.reason == "error":
            return error(ApiError(f"generation failed: {out.error}", status=503 if isinstance(out.error, Broken)
                                  else 500, kind="server_error"))
        result, text = _result(grammar, ids, out, plan)
        return JSONResponse(response(cid, model_id, _message(grammar, result, text), result.finish_reason,
                                     result.usage))

    def _result(grammar, ids, out: _Output, plan: Plan):
        """The engine's Result of ``out``, a stop string's cut counted as a stop; and the text cut."""
        flags = {"ended": out.reason in ("eos", "complete"), "eos": out.reason == "eos"}
        result = finish(tokenizer, grammar, ids, out.tokens, flags, plan.max_tokens)
        text, cut = _cut(result.text, plan.stop)
        if cut:
            result.finish_reason = "stop"
        return result, text

    def _message(grammar, result, text: str) -> dict:
        """The assistant message of a whole (not streamed) response."""
        message: dict = {"role": "assistant", "content": None}
        if isinstance(grammar, ToolGrammar):
            message["content"] = result.content or None
            reasoning = result.reasoning
            if result.tool_calls:
                message["tool_calls"] = result.tool_calls
        elif grammar is None:
            parts = FreeTextStream(markers).feed(text, final=True)
            message["content"] = "".join(d.get("content", "") for d in parts)
            reasoning = "".join(d.get("reasoning_content", "") for d in parts)
        else:
            message["content"], reasoning = text, None
        if reasoning:  # under both names clients read it by (mlx_lm.server's is "reasoning")
            message["reasoning_content"] = message["reasoning"] = reasoning
        return message

    async def _events(cid, plan: Plan, grammar, ids, out: _Output, job: Job):
        def sse(obj: dict) -> str:
            return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"

        parser = grammar.stream_parser() if isinstance(grammar, ToolGrammar) else None
        free = FreeTextStream(markers if grammar is None else None)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        text = ""  # the text so far (without tools)
        sent = 0  # how much of it was fed on: the rest may be the start of a stop string
        hold = max((len(s) for s in plan.stop), default=1) - 1
        stopped = False

        def alias(delta: dict) -> dict:
            if "reasoning_content" in delta:
                delta["reasoning"] = delta["reasoning_content"]
            return delta
        try:
            yield sse(chunk(cid, model_id, {"role": "assistant", "content": ""}))
            while True:
                token = await out.queue.get()
                if token is None:
                    break
                if parser is not None:
                    for delta in parser.feed([token]):
                        yield sse(chunk(cid, model_id, alias(delta)))
                    continue
                if stopped:
                    continue
                text += decoder.decode(vocab.decode_bytes([token]))
                end = len(text) - hold
                if plan.stop:  # search only where a stop string could newly end
                    found, stopped = _cut(text[max(0, sent - hold):], plan.stop)
                    if stopped:
                        text = text[:max(0, sent - hold)] + found
                        end = len(text)
                if end > sent:
                    for delta in free.feed(text[sent:end]):
                        yield sse(chunk(cid, model_id, alias(delta)))
                    sent = end
            if out.reason == "error":
                yield sse({"error": ApiError(f"generation failed: {out.error}", kind="server_error").body()["error"]})
                return
            result, _ = _result(grammar, ids, out, plan)
            if parser is None:
                for delta in free.feed(text[sent:], final=True):
                    yield sse(chunk(cid, model_id, alias(delta)))
            yield sse(chunk(cid, model_id, {}, result.finish_reason))
            if plan.include_usage:
                yield sse(chunk(cid, model_id, None, usage=result.usage))
            yield "data: [DONE]\n\n"
        finally:
            if out.reason is None:
                scheduler.cancel(job)  # the client went away: free the slot now

    async def models(request: HttpRequest):
        return JSONResponse({"object": "list", "data": [{"id": model_id, "object": "model", "created": created,
                                                         "owned_by": "mlx-toolgate"}]})

    async def health(request: HttpRequest):
        if scheduler.broken:
            return JSONResponse({"status": "error", "model": model_id, "error": scheduler.broken}, status_code=503)
        return JSONResponse({"status": "ok", "model": model_id, "requests": scheduler.load})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        yield
        await anyio.to_thread.run_sync(scheduler.close)

    async def unknown(request: HttpRequest, exc: Exception):
        return error(ApiError(f"internal error: {type(exc).__name__}: {exc}", status=500, kind="server_error"))

    async def http_error(request: HttpRequest, exc: HTTPException):
        return error(ApiError(f"{request.method} {request.url.path}: {exc.detail}", status=exc.status_code,
                              code="not_found" if exc.status_code == 404 else None))

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                            Route("/v1/models", models, methods=["GET"]),
                            Route("/health", health, methods=["GET"])],
                    exception_handlers={Exception: unknown, HTTPException: http_error}, lifespan=lifespan)
    app.state.scheduler = scheduler
    return app


def serve(model_path: str | None = None, host: str = "127.0.0.1", port: int = 8080, **options: Any) -> None:
    """Load the model (default: the embedded one) and serve it until interrupted."""
    import mlx_lm

    from ..default_model import load_default_model

    model, tokenizer = mlx_lm.load(model_path) if model_path else load_default_model()
    _run(create_app(model, tokenizer, model_path or "toolgate-default", **options), host, port)


def serve_sharded(group: Any, model_path: str | None = None, host: str = "127.0.0.1", port: int = 8080,
                  pipeline: bool = False, **options: Any) -> None:
    """One process of several started by ``mlx.launch``: load this rank's shard of the model
    (tensor-parallel, or a pipeline of layers); rank 0 serves HTTP and leads the batch, the other
    ranks follow it until it stops."""
    from mlx_lm.utils import sharded_load

    from ..default_model import build_default_model

    path = model_path or str(build_default_model())
    model, tokenizer = sharded_load(path, pipeline_group=group if pipeline else None,
                                    tensor_group=None if pipeline else group)
    if group.rank() > 0:
        follow(model, group, lambda spec: mirror_job(tokenizer, spec), max_active=options.get("max_active", MAX_ACTIVE))
        return
    _run(create_app(model, tokenizer, model_path or "toolgate-default", group=group, **options), host, port)


def _run(app: Starlette, host: str, port: int) -> None:
    """uvicorn until a signal; on it, requests in flight are answered with an error at once rather
    than waited for (mlx.launch stops rank 0 so when another rank dies, and the batch may be stuck
    on the dead rank)."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.scheduler.stop(f"the server is stopping (signal {sig}); under mlx.launch, "
                                     "another rank ended")
            super().handle_exit(sig, frame)

    Server(uvicorn.Config(app, host=host, port=port, log_level="info")).run()
