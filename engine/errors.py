"""The exceptions the engine raises for bad input, all before generation starts."""

from __future__ import annotations


class ToolgateError(ValueError):
    """Base class: every request the engine refuses raises a subclass of this."""


class TokenizerError(ToolgateError):
    """The tokenizer lacks something the request needs (a special token, an EOS id, byte info)."""


class SchemaError(ToolgateError):
    """A JSON schema (or tool list) the engine cannot enforce: names the tool, the keyword and its
    JSON pointer, which are also kept as attributes."""

    def __init__(self, message: str, *, pointer: str = "", keyword: str = "", tool: str = "") -> None:
        self.message = message
        self.pointer = pointer or "#"
        self.keyword = keyword
        self.tool = tool
        where = f" at {self.pointer}" if keyword or pointer else ""
        text = f"{message}{where}" if not keyword else f"{keyword!r}{where}: {message}"
        super().__init__(f"tool {tool!r}: {text}" if tool else text)


class RequestError(ToolgateError):
    """A request option the engine cannot honour (tool_choice, thinking, format, argument mix)."""


class CompileError(ToolgateError):
    """The regex could not be turned into a token automaton (too big, too slow, unrealisable)."""


class BudgetError(ToolgateError):
    """max_tokens cannot hold the shortest valid output."""


class GenerationError(ToolgateError):
    """The processor saw a token its automaton does not allow (a caller or sampler bug)."""
