"""Regex -> token automaton: compiled once (expensive, cached), walked per request (cheap).

- ``byte_dfa``: outlines-core compiles the regex to a DFA over bytes.
- ``index``: the vocabulary's byte trie walked through that DFA gives the token automaton.
- ``automaton``: the automaton as flat arrays, with each state's fewest tokens to acceptance.
- ``lazy``: the automaton kept as its byte DFA, each state's tokens found on its first visit.
- ``builders``: builds run in forked processes bounded in time and memory.
- ``store``: the disk cache; ``compile``: memory cache, then disk, then a build.
- ``masks``: logits masks per (state, budget), shared by content: allowed ids, banned ids or an additive row.
- ``counters``: long strings counted beside the DFA state.
- ``linked``: reference graphs as one DFA per definition, a call stack in the state.
"""

from .automaton import UNREACHABLE, Automaton, TokenAutomaton, distances, sorted_unique
from .lazy import LazyAutomaton
from .linked import LinkedAutomaton, match_state
from .compile import AUTOMATA, automaton_key, check_regex_size, compile_linked, compile_regex
from .index import warm_runs
from .masks import (MASKS, STATE_MASKS, MaskTable, allowed_bits_mask, allowed_bools, allowed_mask, apply_mask,
                    banned_final_mask, bits_mask, block_mask,
                    eos_mask, new_owner, shared_mask, state_mask)
from . import counters

__all__ = ["AUTOMATA", "MASKS", "STATE_MASKS", "UNREACHABLE", "Automaton", "LazyAutomaton", "LinkedAutomaton", "MaskTable", "TokenAutomaton", "allowed_bits_mask", "allowed_bools", "allowed_mask", "apply_mask", "automaton_key", "banned_final_mask", "bits_mask", "block_mask",
           "check_regex_size", "compile_linked", "compile_regex", "counters", "distances", "eos_mask", "match_state", "new_owner", "shared_mask",
           "sorted_unique", "state_mask", "warm_runs"]
