"""Integer and decimal ranges as regexes: exact numeric bounds without leading zeros."""

from __future__ import annotations

from ..regexes import alternation


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
