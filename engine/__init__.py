"""mlx-toolgate: grammar-constrained decoding for mlx-lm that always closes before max_tokens."""

from .errors import (
    BudgetError,
    CompileError,
    GenerationError,
    SchemaError,
    TokenizerError,
    ToolgateError,
)
from .generate import Result, generate
from .grammar import Grammar, compile_json_schema, compile_regex_grammar
from .processor import LogitsProcessor
from .vocabulary import Vocab, build_vocab

__all__ = [
    "BudgetError",
    "CompileError",
    "GenerationError",
    "Grammar",
    "LogitsProcessor",
    "Result",
    "SchemaError",
    "TokenizerError",
    "ToolgateError",
    "Vocab",
    "build_vocab",
    "compile_json_schema",
    "compile_regex_grammar",
    "generate",
]
