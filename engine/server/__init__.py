"""``toolgate serve``: an OpenAI-compatible chat-completions server whose tool calls and JSON
outputs are enforced by the engine, with continuous batching over mlx-lm's BatchGenerator.

- ``protocol``: the request read and checked field by field, and OpenAI's response shapes.
- ``scheduler``: one thread owning the batch; requests join and leave it between steps (with
  several processes under ``mlx.launch``, rank 0 leads and the others follow step for step).
- ``app``: the Starlette app (JSON and server-sent events), ``serve`` and ``serve_sharded``.
"""

from .app import create_app, serve, serve_sharded

__all__ = ["create_app", "serve", "serve_sharded"]
