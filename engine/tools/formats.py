"""Tool-call formats: one Lark file per model family, read with lark into a small regex tree.

A format file is ordinary Lark, loaded and validated by lark's own grammar loader. Its rules
have fixed roles: ``start`` (the whole assistant turn in "auto" mode), ``reasoning``, ``content``,
``tool_calls``, ``call`` (one call, the template instantiated per tool) and, for XML-argument
families, ``parameter``. Named string terminals are the family's special tokens (each must be
one added token of the tokenizer); named regex terminals are ordinary-text patterns
(``RAW_STRING``: a raw string argument value; ``UNTYPED_STRING``: where the family's parsers read
a parameter that takes any value as text, that text; ``TOOL_NAME_PATTERN``: what a tool name must
match in this format). The holes, declared with ``%declare``, are filled by the engine: TEXT (free text
without special tokens), TOOL_NAME, ARGUMENTS (the tool's JSON schema), PARAMETERS (the tool's
parameters, each through ``parameter`` with PARAM_KEY and PARAM_VALUE) and CALL_INDEX (the
call's number in the turn).

The tree (see ``tools.tree``) renders both the mask's regex and the parser's, so they cannot drift.
A new family is one ``grammars/<name>.lark`` file and its name in ``FAMILIES``.
"""

from __future__ import annotations

import copy
import re
from importlib import resources
from typing import Any

from lark import Token, Tree
from lark.exceptions import LarkError
from lark.grammar import NonTerminal, Terminal
from lark.load_grammar import GrammarBuilder, PrepareLiterals

from ..caches import Cache
from ..errors import CompileError, TokenizerError
from .tree import EMPTY, Format

FAMILIES = ("hermes", "qwen3_coder", "kimi_k2", "glm47", "glm45", "harmony", "llama3_json", "mistral", "mistral_args")

# Families whose reference parsers (mlx-lm's, vLLM's) read non-string argument values through
# float(): their integer and number values are kept where a float is exact (|x| < 10**15).
FLOAT_VALUES = {"qwen3_coder"}

HOLES = {"TEXT", "TOOL_NAME", "ARGUMENTS", "PARAMETERS", "PARAM_KEY", "PARAM_VALUE", "CALL_INDEX"}
GRAMMAR_PACKAGE = "engine.grammars"
FORMATS = Cache("tool-call formats", 64, per_vocabulary=True)


def grammar_text(name: str) -> str:
    """The text of ``grammars/<name>.lark`` as installed."""
    if name not in FAMILIES:
        raise CompileError(f"unknown tool-call format {name!r}; known: {', '.join(FAMILIES)}")
    return (resources.files(GRAMMAR_PACKAGE) / f"{name}.lark").read_text(encoding="utf-8")


def load_format(name: str) -> Format:
    """Read and check ``grammars/<name>.lark`` (cached)."""
    return FORMATS.get_or_build(name, lambda: read_format(name, grammar_text(name)))


def read_format(name: str, text: str) -> Format:
    """Check and read a format file's text (lark validates it; CompileError names the file)."""
    path = f"{name}.lark"
    builder = GrammarBuilder()
    try:
        builder.load_grammar(text, path)
        builder.validate()
        grammar = builder.build()
    except LarkError as e:  # lark's grammar errors and the parse errors of the file itself
        raise CompileError(f"{path}: {e}") from None
    specials, patterns, declared = {}, {}, set()
    for term, (tree, _priority) in grammar.term_defs:
        if tree is None:
            declared.add(term)
            continue
        pattern = _one_pattern(tree)
        if pattern is None:
            raise CompileError(f"{path}: terminal {term} must be one string or one regex")
        (specials if pattern.type == "str" else patterns)[term] = pattern.value
    unknown = declared - HOLES
    if unknown:
        raise CompileError(f"{path}: unknown holes {sorted(unknown)}; the engine fills {sorted(HOLES)}")
    rules = {}
    for rule, params, tree, _options in grammar.rule_defs:
        if params:
            raise CompileError(f"{path}: rule {rule} has parameters; templates are not supported")
        rules[rule] = _node(tree, specials, patterns, path)
    for required in ("start", "call"):
        if required not in rules:
            raise CompileError(f"{path}: the rule {required!r} is missing")
    return Format(name, rules, specials, patterns, frozenset(declared))


def _one_pattern(tree: Tree) -> Any:
    """The single string or regex a terminal is defined as (lark's own unescaping), or None."""
    literals = list(tree.find_data("literal"))
    if len(literals) != 1 or len(list(tree.iter_subtrees())) != 4:  # expansions > expansion > value > literal
        return None
    prepared = PrepareLiterals().transform(copy.deepcopy(tree))
    return next(prepared.find_data("pattern")).children[0]


def _node(tree: Any, specials: dict, patterns: dict, path: str) -> Any:
    """A lark rule tree as a node of tools.tree."""
    if isinstance(tree, NonTerminal):
        return ("ref", tree.name)
    if isinstance(tree, Terminal):
        if tree.name in specials:
            return ("sym", tree.name)
        if tree.name in patterns:
            return ("pat", patterns[tree.name])
        return ("hole", tree.name)
    kind, children = tree.data, tree.children
    if kind == "expansions":
        options = [_node(c, specials, patterns, path) for c in children]
        return options[0] if len(options) == 1 else ("alt", tuple(options))
    if kind == "expansion":
        items = [_node(c, specials, patterns, path) for c in children]
        return EMPTY if not items else items[0] if len(items) == 1 else ("seq", tuple(items))
    if kind == "value":
        return _node(children[0], specials, patterns, path)
    if kind == "maybe":
        return ("opt", _node(children[0], specials, patterns, path))
    if kind == "expr":
        op = children[1]
        if not isinstance(op, Token) or op.value not in ("?", "*", "+") or len(children) != 2:
            raise CompileError(f"{path}: only ?, * and + repeat an item (found {children[1:]})")
        return ({"?": "opt", "*": "star", "+": "plus"}[op.value], _node(children[0], specials, patterns, path))
    if kind == "literal":
        pattern = PrepareLiterals().transform(copy.deepcopy(Tree("value", [tree]))).children[0].children[0]
        return ("lit", pattern.value) if pattern.type == "str" else ("pat", pattern.value)
    raise CompileError(f"{path}: the construct {kind!r} is not supported in a format file")


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
                         + ", ".join(FAMILIES))
