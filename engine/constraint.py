"""What the matcher drives: the protocol every compiled constraint offers.

A JSON ``Grammar`` and a ``ToolGrammar`` both implement it; the matcher knows nothing else about
them. States are opaque, hashable values; ``left`` is the number of tokens the request may still
generate after the step (or, for ``mask``, including the token being chosen).
"""

from __future__ import annotations

from typing import Any, Hashable, Protocol

import mlx.core as mx

from .automata import UNREACHABLE
from .vocabulary import Vocab


class Constraint(Protocol):
    vocab: Vocab

    @property
    def initial_state(self) -> Hashable: ...

    @property
    def min_tokens(self) -> int:
        """The tokens of the shortest complete output the masks guide to (end-of-sequence not
        counted): the true minimum, or a bound a little above it for lazy JSON grammars."""

    def fits(self, max_tokens: int) -> bool:
        """Some complete output has at most ``max_tokens`` tokens."""

    def step(self, state: Any, token: int, left: int) -> Any:
        """The state after ``token``, or None when the token is not allowed (or cannot finish in ``left``)."""

    def is_final(self, state: Any) -> bool:
        """The output so far is complete and valid."""

    def is_complete(self, state: Any) -> bool:
        """Complete, and nothing but end-of-sequence may follow."""

    def mask(self, state: Any, left: int, width: int) -> mx.array:
        """The tokens that can still finish within ``left``, for ``automata.apply_mask``: the
        allowed ids (uint32), the banned ids (int32) or an additive float32 row (0 allowed, -inf banned)."""

    def eos_mask(self, width: int) -> mx.array:
        """The mask that allows only end-of-sequence."""


def walk(constraint: Constraint, token_ids: list[int], max_tokens: int | None = None) -> Any:
    """The state after ``token_ids`` from the initial one (end-of-sequence ids stop the walk), or
    None once a token is not allowed; with ``max_tokens``, each step counts the tokens left."""
    left = max_tokens if max_tokens is not None else UNREACHABLE
    state = constraint.initial_state
    for i, t in enumerate(token_ids):
        if t in constraint.vocab.eos_ids:
            break
        state = constraint.step(state, t, left - i - 1)
        if state is None:
            return None
    return state
