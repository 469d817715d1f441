"""mlx-toolgate: grammar-constrained decoding for mlx-lm that always closes before max_tokens."""

from .errors import (
    BudgetError,
    CompileError,
    GenerationError,
    RequestError,
    SchemaError,
    TokenizerError,
    ToolgateError,
)
from .formats import FORMATS, detect_format
from .default_model import DEMO_TOOLS, build_default_model, load_default_model
from .generate import Result, batch_generate, generate, stream_generate
from .grammar import Grammar, compile_json_schema, compile_regex_grammar
from .parser import ParsedOutput, StreamParser, accumulate_deltas
from .processor import LogitsProcessor
from .toolcalls import ToolGrammar, compile_tools
from .vocabulary import Vocab, build_vocab

__all__ = [
    "DEMO_TOOLS",
    "BudgetError",
    "CompileError",
    "FORMATS",
    "GenerationError",
    "Grammar",
    "LogitsProcessor",
    "ParsedOutput",
    "RequestError",
    "Result",
    "SchemaError",
    "StreamParser",
    "TokenizerError",
    "ToolGrammar",
    "ToolgateError",
    "Vocab",
    "accumulate_deltas",
    "batch_generate",
    "build_default_model",
    "build_vocab",
    "compile_json_schema",
    "compile_regex_grammar",
    "compile_tools",
    "detect_format",
    "generate",
    "load_default_model",
    "stream_generate",
]
