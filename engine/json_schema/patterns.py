"""A JSON Schema ``pattern`` (Python-parsed) re-written over JSON-encoded string characters."""

from __future__ import annotations

from ..errors import SchemaError
from ..regexes import alternation, escape, sre_constants
from ..symbols import PUA_BASE, PUA_LIMIT, SPECIAL_CLASS, is_symbol

# What a pattern's `.` matches: any character but a newline (so no \n and no \u escapes).
PATTERN_ANY = rf'(?:[^"\\\x00-\x1F{SPECIAL_CLASS}]|\\["\\/bfrt])'


class PatternRegex:
    """Re-emit a Python-parsed pattern over JSON-encoded string characters."""

    def __init__(self, source: str, pointer: str) -> None:
        self.source = source
        self.pointer = pointer

    def fail(self, what: str) -> SchemaError:
        return SchemaError(f"pattern {self.source!r} uses {what}, which the mask cannot enforce",
                           pointer=self.pointer, keyword="pattern")

    def seq(self, items) -> str:
        return "".join(self.node(op, av) for op, av in items)

    def char(self, code: int) -> str:
        c = chr(code)
        if c == '"':
            return r'\\"'
        if c == "\\":
            return r"\\\\"
        if code < 0x20:
            return {8: r"\\b", 9: r"\\t", 10: r"\\n", 12: r"\\f", 13: r"\\r"}.get(code, rf"\\u{code:04x}")
        if is_symbol(code):
            return rf"\\u{code:04x}"
        return escape(c)

    def node(self, op, av) -> str:
        if op == sre_constants.LITERAL:
            return self.char(av)
        if op == sre_constants.NOT_LITERAL:
            return f"(?:{self.cls_negated([(sre_constants.LITERAL, av)])})"
        if op == sre_constants.ANY:
            return PATTERN_ANY
        if op == sre_constants.IN:
            if av and av[0][0] == sre_constants.NEGATE:
                return self.cls_negated(av[1:])
            return self.cls(av)
        if op == sre_constants.BRANCH:
            return "(?:" + "|".join(self.seq(b) for b in av[1]) + ")"
        if op == sre_constants.SUBPATTERN:
            return "(?:" + self.seq(av[-1]) + ")"
        if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT, getattr(sre_constants, "POSSESSIVE_REPEAT", None)):
            lo, hi, inner = av
            if hi == sre_constants.MAXREPEAT:
                count = "*" if lo == 0 else "+" if lo == 1 else f"{{{lo},}}"
            else:
                count = f"{{{lo},{hi}}}"
            return f"(?:{self.seq(inner)}){count}"
        raise self.fail(f"{str(op).lower()} (anchors inside, lookaround or backreferences)")

    def ranges(self, items) -> list[tuple[int, int]]:
        out = []
        for op, av in items:
            if op == sre_constants.LITERAL:
                out.append((av, av))
            elif op == sre_constants.RANGE:
                out.append(av)
            elif op == sre_constants.CATEGORY:
                out += {
                    sre_constants.CATEGORY_DIGIT: [(48, 57)],
                    sre_constants.CATEGORY_WORD: [(48, 57), (65, 90), (95, 95), (97, 122)],
                    sre_constants.CATEGORY_SPACE: [(9, 13), (32, 32)],
                }.get(av) or self._neg_category(av)
            else:
                raise self.fail(str(op).lower())
        return out

    def _neg_category(self, av) -> list[tuple[int, int]]:
        base = {
            sre_constants.CATEGORY_NOT_DIGIT: [(48, 57)],
            sre_constants.CATEGORY_NOT_WORD: [(48, 57), (65, 90), (95, 95), (97, 122)],
            sre_constants.CATEGORY_NOT_SPACE: [(9, 13), (32, 32)],
        }.get(av)
        if base is None:
            raise self.fail(f"the class {av}")
        return _complement(base)

    def cls(self, items) -> str:
        return self.emit(self.ranges(items))

    def cls_negated(self, items) -> str:
        return self.emit(_complement(self.ranges(items)))

    def emit(self, ranges: list[tuple[int, int]]) -> str:
        """Characters in ``ranges``: plain ones as a class, the ones JSON escapes as escapes."""
        plain, escaped = [], []
        for lo, hi in sorted(ranges):
            for a, b, needs_escape in _split_json(lo, hi):
                (escaped if needs_escape else plain).append((a, b))
        parts = []
        if plain:
            parts.append("[" + "".join(_class_range(a, b) for a, b in plain) + "]")
        for a, b in escaped:
            if (a, b) == (PUA_BASE, PUA_BASE + PUA_LIMIT - 1):
                parts.append(r"\\u[eE][0-9a-fA-F]{3}")
            elif b - a <= 64:
                parts += [self.char(c) for c in range(a, b + 1)]
            # a larger escaped run is left out: the output stays valid, only narrower
        if not parts:
            raise self.fail("an empty character class")
        return alternation(parts)


def _complement(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out, at = [], 0
    for lo, hi in sorted(ranges):
        if lo > at:
            out.append((at, lo - 1))
        at = max(at, hi + 1)
    if at <= 0x10FFFF:
        out.append((at, 0x10FFFF))
    return out


def _split_json(lo: int, hi: int):
    """Split a code point range into runs that JSON writes plainly and runs it must escape."""
    cuts = [(0x00, 0x1F, True), (0x22, 0x22, True), (0x5C, 0x5C, True), (0xD800, 0xDFFF, True),
            (PUA_BASE, PUA_BASE + PUA_LIMIT - 1, True)]
    at = lo
    for a, b, esc in cuts:
        if b < at or a > hi:
            continue
        if a > at:
            yield at, a - 1, False
        if a <= 0xDFFF and b >= 0xD800:  # surrogates never appear as characters
            at = min(b, hi) + 1
            continue
        yield max(a, at), min(b, hi), esc
        at = min(b, hi) + 1
    if at <= hi:
        yield at, hi, False


def _class_range(a: int, b: int) -> str:
    def one(c: int) -> str:
        ch = chr(c)
        if ch in r"\[]^-&~" or c < 0x21 or c > 0x7E:
            return f"\\x{{{c:X}}}"
        return ch
    return one(a) if a == b else f"{one(a)}-{one(b)}"
