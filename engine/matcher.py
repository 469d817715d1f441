"""Match per request: one sequence's walk through a compiled constraint, as an mlx-lm logits processor."""

from __future__ import annotations

import mlx.core as mx
import numpy as np

from .automata import apply_mask
from .constraint import Constraint
from .errors import BudgetError, GenerationError

# How many already-consumed positions are re-read each call, so a caller that trims and
# replaces recent tokens (speculative decoding) is followed rather than trusted.
LOOKBACK = 8
PROMPT_TAIL = 16  # prompt tokens kept to tell one sequence from another


class Matcher:
    """One request's state over a compiled constraint; pass it in mlx-lm's ``logits_processors``.

    mlx-lm calls ``processor(tokens, logits)`` where ``tokens`` holds the (uncached) prompt on
    the first call and grows by the sampled tokens after that; it builds step n+1 before it
    yields token n and calls once more than ``max_tokens``. We therefore track positions:
    the first call fixes where the output starts, every later call advances over exactly the
    tokens past what was consumed, and a call past the budget just allows EOS.
    """

    def __init__(self, grammar: Constraint, max_tokens: int) -> None:
        if not grammar.fits(max_tokens):
            raise BudgetError(
                f"max_tokens={max_tokens} cannot hold the shortest valid output, "
                f"which needs {grammar.min_tokens} tokens"
            )
        self.grammar = grammar
        self.max_tokens = max_tokens
        self.base: int | None = None
        self.prompt_tail: np.ndarray | None = None  # the prompt's last tokens: which sequence this is
        self.consumed: list[int] = []
        self.states = [grammar.initial_state]
        self.ended = False

    @property
    def state(self) -> int:
        return self.states[-1]

    @property
    def accepting(self) -> bool:
        """True when the output so far is complete and valid."""
        return self.grammar.is_final(self.state)

    @property
    def complete(self) -> bool:
        """True when the output is complete and nothing but end-of-sequence may follow."""
        return self.ended or self.grammar.is_complete(self.state)

    def complete_at(self, n: int) -> bool:
        """``complete`` for the first ``n`` output tokens (speculative decoding runs ahead of
        what the caller has accepted)."""
        return n < len(self.states) and self.grammar.is_complete(self.states[n])

    def __call__(self, tokens: mx.array, logits: mx.array) -> mx.array:
        width = logits.shape[-1]
        # Queue the token history, then this step's forward pass, then read the history: MLX runs
        # a stream's work in order, so a history queued after the forward pass waits for all of it
        # (~6 ms a step on the tiny model), and following the newest token (0.25 ms a step inside
        # a tool-call generation) would start only then. In this order it is read at once and the
        # model runs while we mask.
        if isinstance(tokens, mx.array):
            mx.async_eval(tokens)
        mx.async_eval(logits)
        tokens = np.asarray(tokens).reshape(-1)  # slicing on the host: an MLX slice costs ~80 µs
        length = tokens.shape[0]
        if self.base is None:
            self.base = length
            self.prompt_tail = tokens[-PROMPT_TAIL:].copy()
        else:
            self._check_owner(tokens, length)
            self._follow(tokens, length)
        if self.ended:
            return apply_mask(logits, self.grammar.eos_mask(width))
        return apply_mask(logits, self.grammar.mask(self.state, self.max_tokens - len(self.consumed), width))

    def _check_owner(self, tokens: np.ndarray, length: int) -> None:
        """Refuse a processor reused for a new request or shared between sequences: its state
        belongs to one token history, and following another would mask by the wrong state."""
        produced = length - self.base
        misuse = (
            "this Matcher belongs to one sequence of one request; create a new one with "
            "grammar.matcher(max_tokens) for each sequence"
        )
        if produced < 0 or not np.array_equal(tokens[self.base - len(self.prompt_tail):self.base], self.prompt_tail):
            raise GenerationError(f"the prompt differs from the one this processor started on: {misuse}")
        # speculative decoding may take back up to its draft length, even to the prompt; a
        # restart that deep is the same as a fresh processor, anything deeper is another history
        if len(self.consumed) - produced > LOOKBACK:
            raise GenerationError(f"the output went back from {len(self.consumed)} to {produced} tokens: {misuse}")
        keep = min(len(self.consumed), produced) - LOOKBACK
        if keep > 0 and (tokens[self.base] != self.consumed[0] or tokens[self.base + keep - 1] != self.consumed[keep - 1]):
            raise GenerationError(f"tokens this processor had already consumed changed: {misuse}")

    def _follow(self, tokens: np.ndarray, length: int) -> None:
        produced = length - self.base
        keep = max(0, min(len(self.consumed), produced) - LOOKBACK)
        fresh = tokens[self.base + keep:].tolist() if produced > keep else []
        for i, t in enumerate(fresh):
            if keep + i < len(self.consumed) and self.consumed[keep + i] == t:
                continue
            self._rollback(keep + i)
            self.advance(t)
        if produced < len(self.consumed):
            self._rollback(produced)

    def _rollback(self, n: int) -> None:
        if n < len(self.consumed):
            del self.consumed[n:]
            del self.states[n + 1:]
            self.ended = False

    def advance(self, token: int) -> None:
        """Consume one generated token; raises GenerationError if the automaton forbids it."""
        g = self.grammar
        if self.ended:
            # mlx-lm builds one more step before it notices the end; only EOS may follow it
            if token not in self.grammar.vocab.eos_ids:
                raise GenerationError(f"token {token} arrived after the output had ended")
            nxt = self.state
        elif token in self.grammar.vocab.eos_ids:
            if not g.is_final(self.state):
                raise GenerationError(f"end-of-sequence token {token} before the output was complete")
            self.ended = True
            nxt = self.state
        else:
            nxt = g.step(self.state, token, self.max_tokens - len(self.consumed) - 1)
            if nxt is None:
                raise GenerationError(
                    f"token {token} ({self.grammar.vocab.decode_bytes([token])!r}) is not allowed here"
                )
        self.consumed.append(token)
        self.states.append(nxt)
