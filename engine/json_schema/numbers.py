"""Integer and decimal ranges, and the multiples of a step within them, as regexes: exact numeric
bounds without leading zeros."""

from __future__ import annotations

import math
from decimal import Decimal

import numpy as np

from ..caches import Cache
from ..regexes import alternation, escape


def _digits_range(lo: str, hi: str) -> str:
    """Regex for decimal strings of equal length between ``lo`` and ``hi`` inclusive."""
    if not lo:
        return ""
    if lo == hi:
        return lo
    a, b, rest = int(lo[0]), int(hi[0]), len(lo) - 1
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:
        head = str(a) if a == b else f"[{a}-{b}]"
        return head + (f"[0-9]{{{rest}}}" if rest else "")
    if a == b:
        return lo[0] + _digits_range(lo[1:], hi[1:])
    parts = [lo[0] + _digits_range(lo[1:], "9" * rest)]
    if b - a > 1:
        parts.append((f"[{a + 1}-{b - 1}]" if b - a > 2 else str(a + 1)) + (f"[0-9]{{{rest}}}" if rest else ""))
    parts.append(hi[0] + _digits_range("0" * rest, hi[1:]))
    return alternation(parts)


def _nonneg_int_range(lo: int, hi: int | None) -> str:
    """Regex for integers lo..hi (hi None: unbounded), lo >= 0, no leading zeros. Lengths of
    more than one digit taken whole share one branch (``[1-9][0-9]{1,14}``, not fourteen): the
    regex, and outlines-core's time to build its DFA, stay small for wide bounds."""
    parts, whole = [], []
    top = hi if hi is not None else 10 ** len(str(lo)) - 1
    for n in range(len(str(lo)), len(str(top)) + 1):
        a = max(lo, 10 ** (n - 1) if n > 1 else 0)
        b = min(top, 10**n - 1)
        if n > 1 and a == 10 ** (n - 1) and b == 10**n - 1:
            whole.append(n - 1)  # the lengths in between are whole, so these run on
        elif a <= b:
            parts.append(_digits_range(str(a), str(b)))
    if whole:
        reps = f"{whole[0]}" if len(whole) == 1 else f"{whole[0]},{whole[-1]}"
        parts.append(f"[1-9][0-9]{{{reps}}}")
    if hi is None:
        parts.append(f"[1-9][0-9]{{{len(str(lo))},}}")
    return alternation(parts)


def int_range(lo: int | None, hi: int | None) -> str:
    parts = []
    if hi is None or hi >= 0:
        parts.append(_nonneg_int_range(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        mag_lo = max(1, -hi) if hi is not None else 1
        parts.append("-" + _nonneg_int_range(mag_lo, -lo if lo is not None else None))
    return alternation(parts)


def _nonneg_number(lo: int, lo_incl: bool, hi: int | None, hi_incl: bool) -> str | None:
    """Decimal numbers x >= 0 with lo <=/< x <=/< hi (integer bounds); None when empty."""
    any_frac, zero_frac, pos_frac = r"(?:\.[0-9]+)?", r"(?:\.0+)?", r"\.[0-9]*[1-9][0-9]*"
    if hi is not None and (hi < lo or (hi == lo and not (lo_incl and hi_incl))):
        return None
    if hi is not None and hi == lo:
        return str(lo) + zero_frac
    parts = [str(lo) + (any_frac if lo_incl else pos_frac)]
    if hi is None or hi - 1 >= lo + 1:
        parts.append(_nonneg_int_range(lo + 1, None if hi is None else hi - 1) + any_frac)
    if hi is not None and hi_incl:
        parts.append(str(hi) + zero_frac)
    return alternation(parts)


def number_range(lo, lo_incl, hi, hi_incl) -> str | None:
    parts = []
    if hi is None or hi > 0 or (hi == 0 and hi_incl):
        start, start_incl = (0, True) if lo is None or lo < 0 else (lo, lo_incl)
        p = _nonneg_number(start, start_incl, hi, hi_incl)
        if p:
            parts.append(p)
    if lo is None or lo < 0:
        # magnitudes of the negative side: -x in (max(0,-hi) .. -lo)
        mlo, mlo_incl = (0, False) if hi is None or hi >= 0 else (-hi, hi_incl)
        p = _nonneg_number(mlo, mlo_incl, None if lo is None else -lo, lo_incl)
        if p:
            parts.append("-" + p)
    return alternation(parts) if parts else None


# a multipleOf between two bounds is written value by value up to this many multiples
MAX_MULTIPLES = 10_000
MULTIPLES = Cache("number multiples", 1024)  # a definition's bounds are met once per reference


def multiples(lo, lo_incl: bool, hi, hi_incl: bool, step, integer: bool) -> str | None:
    """The numbers within the bounds (integers when ``integer``) that jsonschema takes for multiples
    of ``step``, or None when the bounds hold more than MAX_MULTIPLES of them. jsonschema divides a
    float step in floats, so 38.1 passes multipleOf 0.01 and 0.07 does not: each multiple is tried
    as it would be and the ones that pass written, trailing zeros at will. "" when none passes."""
    key = (lo, lo_incl, hi, hi_incl, step, type(step), integer)
    return MULTIPLES.get_or_build(key, lambda: (_multiples(lo, lo_incl, hi, hi_incl, step, integer),))[0]


def _multiples(lo, lo_incl: bool, hi, hi_incl: bool, step, integer: bool) -> str | None:
    exact = Decimal(str(step))
    decimals = max(0, -exact.normalize().as_tuple().exponent)
    first, last = math.ceil(Decimal(str(lo)) / exact), math.floor(Decimal(str(hi)) / exact)
    scale = 10 ** decimals
    unit = int(exact * scale)  # the step in units of 10**-decimals
    if last - first > MAX_MULTIPLES or max(abs(first), abs(last)) * unit >= 2 ** 53 or max(abs(lo), abs(hi)) >= 2 ** 53:
        return None
    units = np.arange(first, last + 1, dtype=np.int64) * unit
    whole, frac = np.divmod(np.abs(units), scale)
    # a decimal text's float is its units / scale rounded once, as IEEE division of exact operands rounds
    value = units / scale
    keep = (value > lo if not lo_incl else value >= lo) & (value < hi if not hi_incl else value <= hi)
    if isinstance(step, float):
        quotient = value / step
        keep &= quotient == np.trunc(quotient)
    else:
        keep &= np.fmod(value, step) == 0
    if integer:
        keep &= frac == 0
    fractions: dict[str, set[str]] = {}  # the integer part's text -> fractions that pass
    for u, w, f in zip(units[keep].tolist(), whole[keep].tolist(), frac[keep].tolist()):
        fractions.setdefault(f"-{w}" if u < 0 else str(w), set()).add(f"{f:0{decimals}d}" if f else "")
    heads: dict[frozenset, list[str]] = {}
    for head, fracs in fractions.items():
        heads.setdefault(frozenset(fracs), []).append(head)
    parts = []
    for fracs, group in heads.items():
        tail = _literals(sorted({f.rstrip("0") for f in fracs if f}))
        if integer:
            tail = ""
        elif "" in fracs:
            tail = rf"(?:\.(?:0+|{tail}0*))?" if tail else r"(?:\.0+)?"
        else:
            tail = rf"\.{tail}0*"
        parts.append(_literals(group) + tail)
    return alternation(sorted(parts)) if parts else ""


def int_multiples(lo: int | None, hi: int | None, step: int) -> str | None:
    """Integers lo..hi (None: unbounded) that are multiples of ``step``, or None when that cannot be
    written briefly. A side without a bound needs a step dividing 1000, or three times one of 100: past
    the small ones, the integers whose last digits are multiples of that divisor (and whose digits
    sum to a multiple of 3)."""
    thirds = step % 3 == 0 and step % 9 != 0
    base = step // 3 if thirds else step
    # (with thirds the DFA keeps the last k digits apart: k = 3 took 1,700 states for 24)
    k = next((k for k in range(3 if thirds else 4) if 10**k % base == 0), None)

    def side(a: int, b: int | None) -> str | None:
        """Magnitudes a..b that are multiples."""
        start = -(-a // step) * step
        if b is not None:
            if (b - start) // step > MAX_MULTIPLES:
                return None
            return _literals([str(m) for m in range(start, b + 1, step)])
        if k is None:
            return None
        if thirds:  # lengths past k, from 10**k up: a must not be above that
            if a > 10**k:
                return None
            digits = k
            ends: dict[int, list[str]] = {}
            for m in range(0, 10**k, base):
                text = f"{m:0{k}d}" if k else ""
                ends.setdefault(-sum(map(int, text)) % 3, []).append(text)
            longer = alternation([_DIGIT_SUMS_LEADING[r] + _literals(texts) for r, texts in sorted(ends.items())])
        else:
            digits = max(len(str(a)), k or 1)
            if 10**digits // step > MAX_MULTIPLES:
                return None
            more = f"[0-9]{{{digits - k},}}" if digits > k else "[0-9]*"
            longer = f"[1-9]{more}{_literals([f'{m:0{k}d}' for m in range(0, 10**k, step)])}"
        small = [str(m) for m in range(start, 10**digits, step)]
        return alternation(([_literals(small)] if small else []) + [longer])
    parts = []
    if hi is None or hi >= 0:
        parts.append(side(max(lo, 0) if lo is not None else 0, hi))
    if lo is None or lo < 0:
        parts.append(side(max(1, -hi) if hi is not None else 1, None if lo is None else -lo))
        if parts[-1]:
            parts[-1] = f"-(?:{parts[-1]})"
    if None in parts:
        return None
    return alternation([x for x in parts if x])


def _digit_sums() -> list[str]:
    """Digit strings (empty included) whose digits sum to r mod 3, for r = 0, 1, 2: the
    three-state automaton of the sum, its states eliminated into one regex each."""
    classes = ["[0369]", "[147]", "[258]"]  # digits by their residue
    out = []
    for r in range(3):
        # generalized automaton: s -> 0 (empty), residue q -> q + c by class c, r -> f (empty)
        edges: dict = {("s", 0): "", (r, "f"): ""}
        for q in range(3):
            for c in range(3):
                key = (q, (q + c) % 3)
                edges[key] = f"(?:{edges[key]}|{classes[c]})" if key in edges else classes[c]
        for q in range(3):
            loop = f"(?:{edges[(q, q)]})*" if (q, q) in edges else ""
            into = [(a, x) for (a, b), x in edges.items() if b == q and a != q]
            out_of = [(b, x) for (a, b), x in edges.items() if a == q and b != q]
            edges = {key: x for key, x in edges.items() if q not in key}
            for a, x in into:
                for b, y in out_of:
                    z = x + loop + y
                    edges[(a, b)] = f"(?:{edges[(a, b)]}|{z})" if (a, b) in edges else z
        out.append(edges[("s", "f")])
    return out


_DIGIT_SUMS = _digit_sums()
# digit strings without a leading zero, at least one digit, whose digits sum to r mod 3
_DIGIT_SUMS_LEADING = [
    alternation([f"{first}{_DIGIT_SUMS[(r - c) % 3]}" for c, first in enumerate(["[369]", "[147]", "[258]"])])
    for r in range(3)]


def _literals(words: list[str]) -> str:
    """One regex for literal strings of digits and '-': shared prefixes written once, and
    characters whose continuations are the same written as one class."""
    tree: dict = {}
    for w in words:
        node = tree
        for c in w:
            node = node.setdefault(c, {})
        node[""] = None

    def walk(node: dict) -> str:
        after: dict[str, str] = {}
        for c, below in node.items():
            if c:
                rest = walk(below)
                after[rest] = after.get(rest, "") + c
        alts = [(escape(cs) if len(cs) == 1 else f"[{escape(cs)}]") + rest for rest, cs in after.items()]
        if not alts:
            return ""
        body = "|".join(alts)
        if "" in node:
            return f"(?:{body})?"
        return body if len(alts) == 1 else f"(?:{body})"
    return walk(tree)
