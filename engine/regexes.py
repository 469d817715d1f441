"""Our regex dialect (Rust's, as outlines-core reads it): escaping, Python's spelling, sizing.

Python's own regex parser (``re._parser``, what patterns and sizes are read with) is reached here
only, so a change of its name in a later Python is one line.
"""

from __future__ import annotations

import re
import re._constants as sre_constants
import re._parser as sre_parse

from .errors import CompileError
from .symbols import SPECIAL_CLASS, is_symbol

__all__ = ["NONEMPTY_REST", "STRING_CHAR", "STRING_REST", "alternation", "escape", "exclude_specials", "min_units",
           "py_regex", "repeat_bounds", "sre_constants", "sre_parse"]

# one character of a JSON string's text (no special token among them), and the rest of a string
# after its opening quote (of a string of one character or more)
STRING_CHAR = (rf'(?:[^"\\\x00-\x1F{SPECIAL_CLASS}]|\\["\\/bfnrt]'
               r'|\\u(?:[0-9a-cA-CefEF][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))')
STRING_REST = STRING_CHAR + '*"'
NONEMPTY_REST = STRING_CHAR + '{1,}"'


def escape(text: str) -> str:
    """``text`` as a literal in our dialect."""
    return "".join("\\" + c if c in r"\.+*?()|[]{}^$#&-~" else c for c in text)


def alternation(parts: list[str]) -> str:
    """One regex matching any of ``parts`` (duplicates dropped, order kept)."""
    parts = list(dict.fromkeys(parts))
    return parts[0] if len(parts) == 1 else "(?:" + "|".join(parts) + ")"


_BOUNDED = re.compile(r"(?<!\\)\{\d+,(\d+)\}")


def repeat_bounds(regex: str) -> list[int]:
    """The upper bounds of the regex's bounded repetitions (``{a,b}``; an escaped brace begins none)."""
    return [int(b) for b in _BOUNDED.findall(regex)]


def py_regex(rust: str) -> str:
    """Our dialect in Python's: only ``\\x{...}`` differs."""
    return re.sub(r"\\x\{([0-9A-Fa-f]+)\}", lambda m: "\\U%08X" % int(m.group(1), 16), rust)


def exclude_specials(regex: str) -> str:
    """Negated classes in a format's regex never match a special-token symbol."""
    return regex.replace("[^", "[^" + SPECIAL_CLASS)


def min_units(rust: str) -> int:
    """An upper bound on the fewest tokens of any string the regex accepts, without compiling it:
    its fewest bytes, a special-token symbol counting one (every byte is a token of its own)."""
    return _units(sre_parse.parse(py_regex(rust)))


def _char_units(cp: int) -> int:
    return 1 if is_symbol(cp) else len(chr(cp).encode("utf-8", "surrogatepass"))


def _class_units(members) -> int:
    ranges, negate = [], False
    for op, av in members:
        name = str(op)
        if name == "NEGATE":
            negate = True
        elif name == "LITERAL":
            ranges.append((av, av))
        elif name == "RANGE":
            ranges.append(av)
        else:  # a category (\d, \s, \w) always has an ASCII member
            ranges.append((0x30, 0x30) if not negate else (-1, -1))
    if not negate:
        return min(_char_units(a) for a, _ in ranges)
    cp = 0
    for a, b in sorted(ranges):
        if a > cp:
            break
        cp = max(cp, b + 1)
    return _char_units(cp)


def _units(items) -> int:
    total = 0
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            total += _char_units(av)
        elif name in ("NOT_LITERAL", "ANY", "CATEGORY"):
            total += 1
        elif name == "IN":
            total += _class_units(av)
        elif name == "BRANCH":
            total += min(_units(b) for b in av[1])
        elif name == "SUBPATTERN":
            total += _units(av[-1])
        elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
            total += av[0] * _units(av[2])
        elif name != "AT":
            raise CompileError(f"cannot size the regex construct {name}")
    return total
