"""The format tree: node shapes, the rewrites that make the tool_choice/thinking modes, and rendering.

Node shapes (plain tuples): ("lit", text) ordinary text; ("sym", NAME) a special token; ("hole",
NAME) filled by the engine; ("pat", regex) an ordinary-text regex; ("ref", rule) or ("ref", rule,
body) when a mode rewrote the rule's body; ("seq", (..)); ("alt", (..)); ("opt", n); ("star", n);
("plus", n); ("empty",) matches nothing but the empty string.

The modes are rewrites of ``start``: ``none`` removes calls (``without``), ``required`` keeps only
strings with a call (``must``), ``parallel_tool_calls=False`` cuts repetitions around ``call``
(``single``), thinking removes, requires, or starts inside the reasoning section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..errors import CompileError
from ..regexes import escape, exclude_specials

EMPTY = ("empty",)


@dataclass(frozen=True)
class Format:
    """A family's format file as a tree: rule name -> node."""

    name: str
    rules: dict
    specials: dict  # terminal name -> special token text
    patterns: dict  # terminal name -> ordinary-text regex
    holes: frozenset

    def special_texts(self) -> list[str]:
        return list(self.specials.values())

    def reasoning_markers(self) -> tuple[str, str] | None:
        """The fixed text before the reasoning rule's free text and the item that ends it
        (``<think>``, ``</think>``), or None when the family has no reasoning rule of that shape."""
        node = self.rules.get("reasoning")
        items = node[1] if node is not None and node[0] == "seq" else [node] if node is not None else []
        if items.count(("hole", "TEXT")) != 1:
            return None
        cut = items.index(("hole", "TEXT"))
        texts = []
        for part in (items[:cut], items[cut + 1:cut + 2]):
            if not all(it[0] in ("lit", "sym") for it in part):
                return None
            texts.append("".join(it[1] if it[0] == "lit" else self.specials[it[1]] for it in part))
        return (texts[0], texts[1]) if texts[0] and texts[1] else None


def body(fmt: Format, node) -> Any:
    """The body a ref stands for (a mode may have rewritten it)."""
    return node[2] if len(node) > 2 else fmt.rules[node[1]]


def contains(fmt: Format, node, rule: str) -> bool:
    kind = node[0]
    if kind == "ref":
        return node[1] == rule or contains(fmt, body(fmt, node), rule)
    if kind in ("seq", "alt"):
        return any(contains(fmt, c, rule) for c in node[1])
    if kind in ("opt", "star", "plus"):
        return contains(fmt, node[1], rule)
    return False


def _seq(items: list):
    items = [i for i in items if i != EMPTY]
    return EMPTY if not items else items[0] if len(items) == 1 else ("seq", tuple(items))


def _alt(options: list):
    options = list(dict.fromkeys(options))
    return options[0] if len(options) == 1 else ("alt", tuple(options))


def drop(fmt: Format, node, rule: str):
    """``node`` with every use of ``rule`` replaced by the empty string."""
    kind = node[0]
    if kind == "ref":
        if node[1] == rule:
            return EMPTY
        if contains(fmt, body(fmt, node), rule):
            return ("ref", node[1], drop(fmt, body(fmt, node), rule))
        return node
    if kind == "seq":
        return _seq([drop(fmt, c, rule) for c in node[1]])
    if kind == "alt":
        return _alt([drop(fmt, c, rule) for c in node[1]])
    if kind in ("opt", "star", "plus"):
        inner = drop(fmt, node[1], rule)
        return EMPTY if inner == EMPTY else (kind, inner)
    return node


def without(fmt: Format, node, rule: str):
    """The strings of ``node`` that never use ``rule`` (None if there are none)."""
    kind = node[0]
    if kind == "ref":
        if node[1] == rule:
            return None
        if not contains(fmt, body(fmt, node), rule):
            return node
        inner = without(fmt, body(fmt, node), rule)
        return None if inner is None else ("ref", node[1], inner)
    if kind == "seq":
        items = [without(fmt, c, rule) for c in node[1]]
        return None if any(i is None for i in items) else _seq(items)
    if kind == "alt":
        options = [o for o in (without(fmt, c, rule) for c in node[1]) if o is not None]
        return _alt(options) if options else None
    if kind in ("opt", "star"):
        inner = without(fmt, node[1], rule)
        return EMPTY if inner is None or inner == EMPTY else (kind, inner)
    if kind == "plus":
        inner = without(fmt, node[1], rule)
        return None if inner is None else (kind, inner)
    return node


def must(fmt: Format, node, rule: str):
    """The strings of ``node`` that use ``rule`` at least once (None if there are none)."""
    kind = node[0]
    if kind == "ref":
        if node[1] == rule:
            return node
        inner = must(fmt, body(fmt, node), rule)
        return None if inner is None else ("ref", node[1], inner)
    if kind == "seq":
        options = []
        for i, c in enumerate(node[1]):
            m = must(fmt, c, rule)
            before = [without(fmt, x, rule) for x in node[1][:i]]
            if m is not None and all(b is not None for b in before):  # the first use is in item i
                options.append(_seq(before + [m] + list(node[1][i + 1:])))
        return _alt(options) if options else None
    if kind == "alt":
        options = [m for m in (must(fmt, c, rule) for c in node[1]) if m is not None]
        return _alt(options) if options else None
    if kind == "opt":
        return must(fmt, node[1], rule)
    if kind in ("star", "plus"):
        m = must(fmt, node[1], rule)
        if m is None:
            return None
        first = without(fmt, node[1], rule)
        return _seq(([("star", first)] if first not in (None, EMPTY) else []) + [m, ("star", node[1])])
    return None


def single(fmt: Format, node, rule: str):
    """``node`` with repetitions around ``rule`` cut to one use (parallel_tool_calls=False)."""
    kind = node[0]
    if kind == "ref":
        return ("ref", node[1], single(fmt, body(fmt, node), rule)) if contains(fmt, body(fmt, node), rule) else node
    if kind == "seq":
        return _seq([single(fmt, c, rule) for c in node[1]])
    if kind == "alt":
        return _alt([single(fmt, c, rule) for c in node[1]])
    if kind == "star" and contains(fmt, node[1], rule):
        return EMPTY
    if kind == "plus" and contains(fmt, node[1], rule):
        return single(fmt, node[1], rule)
    if kind in ("opt", "star", "plus"):
        return (kind, single(fmt, node[1], rule))
    return node


def strip_open(fmt: Format, node, rule: str):
    """``node`` with the leading special token of ``rule`` removed (the prompt already holds it)."""
    kind = node[0]
    if kind == "ref":
        if node[1] == rule:
            b = body(fmt, node)
            items = b[1] if b[0] == "seq" else [b]
            if items[0][0] != "sym":
                raise CompileError(f"format {fmt.name}: rule {rule} does not start with a special token")
            return ("ref", rule, _seq(items[1:]))
        return ("ref", node[1], strip_open(fmt, body(fmt, node), rule)) if contains(fmt, body(fmt, node), rule) else node
    if kind in ("seq", "alt"):
        return (kind, tuple(strip_open(fmt, c, rule) for c in node[1]))
    if kind in ("opt", "star", "plus"):
        return (kind, strip_open(fmt, node[1], rule))
    return node


def render(fmt: Format, node, fill: Callable[[Any], str | None], groups: bool = False, role: str = "") -> str:
    """The regex for ``node``. ``fill(node)`` supplies holes, symbols and overrides (None: default).

    With ``groups`` (for the parser) the regions become named groups: ``reasoning``, ``content``,
    ``tool_calls``, and ``reasoning_text`` / ``content_text`` for their free text.
    """
    got = fill(node)
    if got is not None:
        if groups and role and node == ("hole", "TEXT"):
            return f"(?P<{role}_text>{got})"
        return got
    kind = node[0]
    if kind == "lit":
        return escape(node[1])
    if kind == "pat":
        return "(?:" + exclude_specials(node[1]) + ")"
    if kind == "empty":
        return ""
    if kind == "ref":
        region = node[1] in ("reasoning", "content", "tool_calls")
        inner = render(fmt, body(fmt, node), fill, groups, node[1] if region else role)
        if groups and region:
            return f"(?P<{node[1]}>{inner})"
        return f"(?:{inner})"
    if kind == "seq":
        return "".join(render(fmt, c, fill, groups, role) for c in node[1])
    if kind == "alt":
        return "(?:" + "|".join(render(fmt, c, fill, groups, role) for c in node[1]) + ")"
    if kind in ("opt", "star", "plus"):
        suffix = {"opt": "?", "star": "*", "plus": "+"}[kind]
        return "(?:" + render(fmt, node[1], fill, groups, role) + ")" + suffix
    raise CompileError(f"format {fmt.name}: nothing fills {node}")
