"""mlx-toolgate: grammar-constrained decoding for mlx-lm that always closes before max_tokens."""

from .errors import (
    BudgetError,
    CompileError,
    GenerationError,
    SchemaError,
    TokenizerError,
    ToolgateError,
)
from .formats import FORMATS, detect_format
from .generate import Result, generate, stream_generate
from .grammar import Grammar, compile_json_schema, compile_regex_grammar
from .parser import ParsedOutput, StreamParser
from .processor import LogitsProcessor
from .toolcalls import ToolGrammar, compile_tools
from .vocabulary import Vocab, build_vocab

__all__ = [
    "BudgetError",
    "CompileError",
    "FORMATS",
    "GenerationError",
    "Grammar",
    "LogitsProcessor",
    "ParsedOutput",
    "Result",
    "SchemaError",
    "StreamParser",
    "TokenizerError",
    "ToolGrammar",
    "ToolgateError",
    "Vocab",
    "build_vocab",
    "compile_json_schema",
    "compile_regex_grammar",
    "compile_tools",
    "detect_format",
    "generate",
    "stream_generate",
]
