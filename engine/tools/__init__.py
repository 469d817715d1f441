"""Tool calls: a family's format file plus the request's tools -> a budget-aware grammar, and its parser.

- ``tree``: the format tree, the mode rewrites, rendering to regexes.
- ``formats``: reading ``grammars/*.lark`` with lark; the registry of families; detection.
- ``calls``: the offered tools, checked, and each call cut into pieces (CallSpec).
- ``pieces``: the pieces' automata (literals built directly, arguments compiled lazily).
- ``turn``: the turn with each call as one symbol (the outer automaton) and its distances.
- ``grammar``: ToolGrammar, matching over outer and in-call configurations.
- ``parser``, ``stream``: reading a turn back, whole or as streamed deltas.
- ``compile``: compile_tools, the request checks and the cache.
"""

from .compile import compile_tools
from .formats import FAMILIES, detect_format, load_format
from .grammar import ToolGrammar
from .parser import ParsedOutput
from .stream import FreeTextStream, StreamParser, accumulate_deltas

__all__ = ["FAMILIES", "FreeTextStream", "ParsedOutput", "StreamParser", "ToolGrammar", "accumulate_deltas", "compile_tools",
           "detect_format", "load_format"]
