"""mlx-toolgate: grammar-constrained decoding for mlx-lm that always closes before max_tokens.

Compile once (expensive, cached): ``compile_json_schema`` and ``compile_tools`` give a
``Grammar`` or a ``ToolGrammar``. Match per request (cheap): ``grammar.matcher(max_tokens)``
gives a ``Matcher``, an mlx-lm logits processor for one sequence. Or let ``generate``,
``stream_generate`` and ``batch_generate`` do both, with a ``Request`` saying what to enforce.
Errors derive from ``ToolgateError``; the kinds are in ``engine.errors``.
"""

from .caches import clear_caches
from .default_model import load_default_model
from .errors import ToolgateError
from .generate import Request, Result, batch_generate, generate, stream_generate
from .grammar import Grammar, compile_json_schema
from .matcher import Matcher
from .tools import ToolGrammar, accumulate_deltas, compile_tools, detect_format

__all__ = [
    "Grammar",
    "Matcher",
    "Request",
    "Result",
    "ToolGrammar",
    "ToolgateError",
    "accumulate_deltas",
    "batch_generate",
    "clear_caches",
    "compile_json_schema",
    "compile_tools",
    "detect_format",
    "generate",
    "load_default_model",
    "stream_generate",
]
