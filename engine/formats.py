"""Tool-call formats: one Lark file per model family, read into a small regular-expression tree.

A format file is ordinary Lark. Its rules have fixed roles: ``start`` (the whole assistant turn
in "auto" mode), ``reasoning``, ``content``, ``tool_calls``, ``call`` (one call, the template
instantiated per tool) and, for XML-argument families, ``parameter``. Named string terminals are
the family's special tokens (each must be one added token of the tokenizer); named regex
terminals are ordinary-text patterns (``RAW_STRING``: a raw string argument value;
``TOOL_NAME_PATTERN``: what a tool name must match in this format). The holes,
declared with ``%declare``, are filled by the engine: TEXT (free text without special tokens),
TOOL_NAME, ARGUMENTS (the tool's JSON schema), PARAMETERS (the tool's parameters, each through
``parameter`` with PARAM_KEY and PARAM_VALUE) and CALL_INDEX (the call's number in the turn).

The tree renders both into the mask's regex and into the parser's regex, so they cannot drift.
"""

from __future__ import annotations

import ast
import re
import re._parser as sre_parse
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

from .errors import CompileError, TokenizerError
from .schema import _escape

GRAMMAR_DIR = Path(__file__).parent / "grammars"
HOLES = {"TEXT", "TOOL_NAME", "ARGUMENTS", "PARAMETERS", "PARAM_KEY", "PARAM_VALUE", "CALL_INDEX"}
ROLES = ("reasoning", "content", "tool_calls", "call", "parameter")
SPECIAL_CLASS = r"\x{E000}-\x{EFFF}"  # the private-use symbols that stand for added tokens
TEXT_REGEX = rf"[^{SPECIAL_CLASS}]*"

# Node shapes (plain tuples): ("lit", text) ordinary text; ("sym", NAME) a special token;
# ("hole", NAME); ("pat", regex) ordinary-text regex; ("ref", rule) or ("ref", rule, body) when a
# mode rewrote the rule's body; ("seq", [..]); ("alt", [..]); ("opt", n); ("star", n); ("plus", n);
# ("empty",) matches nothing but the empty string.
EMPTY = ("empty",)

_TOKEN = re.compile(
    r"""(?P<ws>\s+)|(?P<comment>//[^\n]*)|(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<regexp>/(?:[^/\\\n]|\\.)+/)|(?P<directive>%\w+)|(?P<name>[A-Za-z_]\w*)|(?P<op>[:|()\[\]?*+])""",
    re.X,
)


@dataclass(frozen=True)
class Format:
    """A parsed format file."""

    name: str
    rules: dict  # rule name -> node
    specials: dict  # terminal name -> special token text
    patterns: dict  # terminal name -> ordinary-text regex
    holes: frozenset

    def special_texts(self) -> list[str]:
        return list(self.specials.values())


def _tokens(text: str, path: str) -> list[tuple[str, str, int]]:
    out, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise CompileError(f"{path}:{line}: cannot read {text[pos:pos + 20]!r}")
        kind = m.lastgroup
        if kind not in ("ws", "comment"):
            out.append((kind, m.group(), line))
        line += m.group().count("\n")
        pos = m.end()
    return out


def _definitions(tokens: list, path: str) -> tuple[list, list[str]]:
    """Split the token stream into (name, body tokens) definitions and %declare'd names."""
    defs, declared, i = [], [], 0
    while i < len(tokens):
        kind, value, line = tokens[i]
        if kind == "directive":
            if value != "%declare":
                raise CompileError(f"{path}:{line}: only %declare is supported, not {value}")
            i += 1
            while i < len(tokens) and tokens[i][0] == "name" and not (i + 1 < len(tokens) and tokens[i + 1][1] == ":"):
                declared.append(tokens[i][1])
                i += 1
            continue
        if kind != "name" or i + 1 >= len(tokens) or tokens[i + 1][1] != ":":
            raise CompileError(f"{path}:{line}: expected a definition, found {value!r}")
        j = i + 2
        while j < len(tokens) and not (tokens[j][0] in ("name", "directive") and (tokens[j][0] == "directive" or (j + 1 < len(tokens) and tokens[j + 1][1] == ":"))):
            j += 1
        defs.append((value, tokens[i + 2:j], line))
        i = j
    return defs, declared


def _parse_expansion(tokens: list, path: str, line: int):
    pos = 0

    def peek():
        return tokens[pos][1] if pos < len(tokens) else None

    def alt():
        nonlocal pos
        options = [seq()]
        while peek() == "|":
            pos += 1
            options.append(seq())
        return options[0] if len(options) == 1 else ("alt", tuple(options))

    def seq():
        items = []
        while pos < len(tokens) and peek() not in ("|", ")", "]"):
            items.append(item())
        return items[0] if len(items) == 1 else ("seq", tuple(items))

    def item():
        nonlocal pos
        node = atom()
        while peek() in ("?", "*", "+"):
            node = ({"?": "opt", "*": "star", "+": "plus"}[peek()], node)
            pos += 1
        return node

    def atom():
        nonlocal pos
        kind, value, _ = tokens[pos]
        pos += 1
        if value in ("(", "["):
            inner = alt()
            close = ")" if value == "(" else "]"
            if peek() != close:
                raise CompileError(f"{path}:{line}: missing {close!r}")
            pos += 1
            return inner if value == "(" else ("opt", inner)
        if kind == "string":
            return ("lit", ast.literal_eval(value))
        if kind == "regexp":
            return ("pat", value[1:-1])
        if kind == "name":
            return ("ref", value) if value.islower() else ("term", value)
        raise CompileError(f"{path}:{line}: unexpected {value!r}")

    node = alt()
    if pos != len(tokens):
        raise CompileError(f"{path}:{line}: unexpected {tokens[pos][1]!r}")
    return node


@lru_cache(maxsize=None)
def load_format(name: str) -> Format:
    """Read ``grammars/<name>.lark``."""
    path = GRAMMAR_DIR / f"{name}.lark"
    if not path.is_file():
        raise CompileError(f"unknown tool-call format {name!r}; known: {', '.join(FORMATS)}")
    text = path.read_text()
    defs, declared = _definitions(_tokens(text, path.name), path.name)
    rules, specials, patterns = {}, {}, {}
    for def_name, body, line in defs:
        node = _parse_expansion(body, path.name, line)
        if def_name.islower():
            rules[def_name] = node
        elif node[0] == "lit":
            specials[def_name] = node[1]
        elif node[0] == "pat":
            patterns[def_name] = node[1]
        else:
            raise CompileError(f"{path.name}:{line}: terminal {def_name} must be one string or one regex")
    unknown = set(declared) - HOLES
    if unknown:
        raise CompileError(f"{path.name}: unknown holes {sorted(unknown)}; the engine fills {sorted(HOLES)}")
    for required in ("start", "call"):
        if required not in rules:
            raise CompileError(f"{path.name}: the rule {required!r} is missing")

    def resolve(node):
        kind = node[0]
        if kind == "term":
            t = node[1]
            if t in specials:
                return ("sym", t)
            if t in patterns:
                return ("pat", patterns[t])
            if t in declared:
                return ("hole", t)
            raise CompileError(f"{path.name}: terminal {t} is neither defined nor declared")
        if kind == "ref" and node[1] not in rules:
            raise CompileError(f"{path.name}: rule {node[1]!r} is not defined")
        if kind in ("seq", "alt"):
            return (kind, tuple(resolve(c) for c in node[1]))
        if kind in ("opt", "star", "plus"):
            return (kind, resolve(node[1]))
        return node

    rules = {k: resolve(v) for k, v in rules.items()}
    return Format(name, rules, specials, patterns, frozenset(declared))


# --- tree utilities -------------------------------------------------------------------------


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
        return _escape(node[1])
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


def py_regex(rust: str) -> str:
    """Our regex dialect (Rust's, as outlines-core reads it) in Python's: only ``\\x{...}`` differs."""
    return re.sub(r"\\x\{([0-9A-Fa-f]+)\}", lambda m: "\\U%08X" % int(m.group(1), 16), rust)


def min_units(rust: str) -> int:
    """An upper bound on the fewest tokens of any string the regex accepts, without compiling it:
    its fewest bytes, a special-token symbol counting one (every byte is a token of its own)."""
    return _units(sre_parse.parse(py_regex(rust)))


def _char_units(cp: int) -> int:
    return 1 if 0xE000 <= cp <= 0xEFFF else len(chr(cp).encode("utf-8", "surrogatepass"))


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


def exclude_specials(regex: str) -> str:
    """Negated classes in a format's regex never match a special-token symbol."""
    return regex.replace("[^", "[^" + SPECIAL_CLASS)


# --- registry and detection --------------------------------------------------------------------

FORMATS = ("hermes", "qwen3_coder", "kimi_k2", "glm47", "glm45", "harmony", "llama3_json", "mistral", "mistral_args")

# Families whose reference parsers (mlx-lm's, vLLM's) read non-string argument values through
# float(): their integer and number values are kept where a float is exact (|x| < 10**15).
FLOAT_VALUES = {"qwen3_coder"}

# mlx-lm's parser module for each family, where it has one (used to cross-check in the tests).
MLX_LM_PARSERS = {"hermes": "json_tools", "qwen3_coder": "qwen3_coder", "kimi_k2": "kimi_k2",
                  "glm47": "glm47", "glm45": "glm47", "mistral": "mistral", "mistral_args": "mistral"}


def _template(tokenizer: Any) -> str:
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    t = getattr(tokenizer, "chat_template", None) or getattr(hf, "chat_template", None)
    if isinstance(t, dict):
        t = "\n".join(str(v) for v in t.values())
    return t if isinstance(t, str) else ""


def detect_format(tokenizer: Any) -> str:
    """The tool-call family of ``tokenizer``, from its chat template, else its vocabulary."""
    t = _template(tokenizer)
    if "<arg_key>" in t:
        return "glm45" if re.search(r"</arg_key>(\n|\\n)<arg_value>", t) else "glm47"
    if "<tool_call>\n<function=" in t or "<tool_call>\\n<function=" in t:
        return "qwen3_coder"
    if "<|tool_calls_section_begin|>" in t:
        return "kimi_k2"
    if "[TOOL_CALLS]" in t:
        return "mistral_args" if "[ARGS]" in t else "mistral"
    if "<|channel|>" in t or "<|constrain|>" in t:
        return "harmony"
    if "<tool_call>" in t:
        return "hermes"
    if "<|python_tag|>" in t or '"parameters": dictionary of argument' in t:
        return "llama3_json"
    hf = getattr(tokenizer, "_tokenizer", tokenizer)
    vocab = hf.get_vocab()
    for name, marker in (("kimi_k2", "<|tool_calls_section_begin|>"), ("harmony", "<|constrain|>"),
                         ("glm47", "<arg_key>"), ("mistral_args", "[ARGS]"), ("mistral", "[TOOL_CALLS]"),
                         ("hermes", "<tool_call>"),
                         ("llama3_json", "<|eom_id|>")):
        if marker in vocab:
            return name
    raise TokenizerError("cannot tell the tool-call format of this tokenizer; pass format= one of "
                         + ", ".join(FORMATS))
