"""The private-use characters that stand for added tokens, and the engine's own markers.

Every added token (``<tool_call>``, ``<|im_end|>`` ...) is written in regexes as one character
of U+E000..U+EFFF, so a grammar can ask for the token itself and ordinary text can never spell
it. The top slots are the engine's: the automaton's START and END sentinels, the macro that
stands for one whole tool call in a turn's outer automaton, the two that stand for a JSON
string's rest while outlines-core builds a DFA, the markers of counted strings and those of
linked definitions, and those that stand for quoted literals while outlines-core builds a DFA.
"""

PUA_BASE = 0xE000
PUA_LIMIT = 0x1000  # U+E000..U+EFFF all start with the UTF-8 byte 0xEE
FORGE_BYTE = 0xEE  # ordinary tokens holding this byte could forge a symbol: they are dropped
COUNTER_SLOTS = 64  # markers of counted long strings (see automata.counters), above the added tokens
LINK_SLOTS = 1024  # markers of linked definitions (see automata.linked), above the counters
LITERAL_SLOTS = 1024  # quoted literals while outlines-core builds a DFA (automata.byte_dfa), above the links,
# below the engine's five
TOKEN_SLOTS = PUA_LIMIT - 5 - COUNTER_SLOTS - LINK_SLOTS - LITERAL_SLOTS  # slots for added tokens; the rest are below

# a JSON string's rest, and a non-empty one's, spliced in after outlines-core's build (automata.byte_dfa)
NONEMPTY_SPLICE = chr(PUA_BASE + PUA_LIMIT - 5)  # U+EFFB
SPLICE = chr(PUA_BASE + PUA_LIMIT - 4)  # U+EFFC
START = chr(PUA_BASE + PUA_LIMIT - 3)  # U+EFFD: starts every compiled regex (see automata.byte_dfa)
END = chr(PUA_BASE + PUA_LIMIT - 2)  # U+EFFE: ends every compiled regex
MACRO = chr(PUA_BASE + PUA_LIMIT - 1)  # U+EFFF: one tool call in a turn's outer automaton

SPECIAL_CLASS = r"\x{E000}-\x{EFFF}"  # the whole range, as it goes inside a regex class
TEXT_REGEX = rf"[^{SPECIAL_CLASS}]*"  # free text: anything but a special token


def counter_symbol(k: int) -> str:
    """The marker of the ``k``-th counted string in a regex (no token spells it)."""
    return chr(PUA_BASE + TOKEN_SLOTS + k)


def link_symbol(k: int) -> str:
    """The marker of a use of the ``k``-th linked definition in a regex (no token spells it)."""
    return chr(PUA_BASE + TOKEN_SLOTS + COUNTER_SLOTS + k)


def literal_symbol(k: int) -> str:
    """The symbol standing for the ``k``-th quoted literal of a regex in outlines-core's build."""
    return chr(PUA_BASE + TOKEN_SLOTS + COUNTER_SLOTS + LINK_SLOTS + k)


def token_symbol(slot: int) -> str:
    """The character for the ``slot``-th added token."""
    return chr(PUA_BASE + slot)


def is_symbol(code_point: int) -> bool:
    return PUA_BASE <= code_point < PUA_BASE + PUA_LIMIT
