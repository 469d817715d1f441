"""Token bytes for any Hugging Face / mlx-lm tokenizer, with added tokens as atomic symbols.

Every ordinary token maps to the exact bytes it decodes to. Every added token (``<tool_call>``,
``<|im_end|>``, ``[TOOL_CALLS]`` ...) maps to one private-use character (see symbols), so a regex
can ask for the token itself and ordinary text can never spell it. Ordinary tokens holding the
byte 0xEE (the UTF-8 lead byte of U+E000..U+EFFF) are dropped so they cannot forge a symbol.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
from mlx_lm.tokenizer_utils import TokenizerWrapper

from .caches import Cache
from .errors import TokenizerError
from .symbols import FORGE_BYTE, TOKEN_SLOTS, token_symbol

# Added tokens that end a turn or a text even when the tokenizer names only one EOS.
_END_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>", "<|end|>")


def _bytes_to_unicode() -> dict[int, str]:
    """The GPT-2 byte-level alphabet: printable stand-ins for the 256 byte values."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {b: chr(b) for b in keep}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def _hf_tokenizer(tokenizer: Any) -> Any:
    """The transformers tokenizer inside an mlx-lm TokenizerWrapper, or the object itself."""
    return tokenizer._tokenizer if isinstance(tokenizer, TokenizerWrapper) else tokenizer


def _decoder_kind(hf: Any) -> str:
    backend = getattr(hf, "backend_tokenizer", None)
    if backend is None:
        raise TokenizerError(f"{type(hf).__name__} has no fast tokenizer backend; cannot read token bytes")
    # the decoder's own state: serialising the whole tokenizer to read it took 0.5-1.2 s
    state = backend.decoder.__getstate__() if backend.decoder is not None else None
    decoder = (json.loads(state) if state else json.loads(backend.to_str()).get("decoder")) or {}
    kinds = [d.get("type") for d in decoder.get("decoders", [decoder])]
    if "ByteLevel" in kinds:
        return "byte_level"
    if "ByteFallback" in kinds or "Replace" in kinds or "Metaspace" in kinds:
        return "sentencepiece"
    raise TokenizerError(f"unsupported tokenizer decoder {kinds!r}: cannot read token bytes")


def _piece_bytes(piece: str, kind: str) -> bytes:
    if kind == "byte_level":
        try:
            return bytes(_UNICODE_TO_BYTE[c] for c in piece)
        except KeyError:
            return piece.encode()
    if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
        return bytes([int(piece[3:5], 16)])
    return piece.replace("\u2581", " ").encode()


@dataclass(frozen=True, eq=False)
class Vocab:
    """A tokenizer seen as bytes: what the automaton compiles against."""

    token_bytes: tuple[bytes | None, ...]  # None for added tokens and unusable ids
    special: dict[str, int]  # added token text -> id
    eos_ids: tuple[int, ...]  # all end-of-sequence ids; eos_ids[0] is the one forced
    size: int  # logits width the masks are built for (at least the tokenizer's length)
    name: str = ""
    dropped: tuple[int, ...] = field(default=())  # ordinary ids that could forge a symbol

    def __post_init__(self) -> None:
        self.texts  # every step reads a token's text: built with the vocabulary, not at a request's first step

    def symbol(self, text: str) -> str:
        """The one-character stand-in for the added token ``text`` in a regex."""
        try:
            token_id = self.special[text]
        except KeyError:
            raise TokenizerError(f"tokenizer {self.name!r} has no added token {text!r}") from None
        return self.symbols[token_id]

    def has_token(self, text: str) -> bool:
        return text in self.special

    @cached_property
    def symbols(self) -> dict[int, str]:
        """Added token id -> its private-use character (end-of-sequence ids have none)."""
        ordered = sorted(i for i in self.special.values() if i not in self.eos_ids)
        if len(ordered) > TOKEN_SLOTS:
            raise TokenizerError(f"{len(ordered)} added tokens exceed the {TOKEN_SLOTS} symbol slots")
        return {i: token_symbol(k) for k, i in enumerate(ordered)}

    def with_eos(self, eos_ids: tuple[int, ...]) -> "Vocab":
        """The same vocabulary with other end-of-sequence ids."""
        if eos_ids == self.eos_ids:
            return self
        return Vocab(self.token_bytes, self.special, eos_ids, self.size, self.name, self.dropped)

    @cached_property
    def outlines_map(self) -> dict[bytes, tuple[int, ...]]:
        """``{bytes: (ids)}``: ordinary tokens plus symbols, EOS excluded. Tuples, not lists: the
        collector stops tracking a tuple of ints, while 150k lists kept for the process's life
        add ~20 ms to every full collection (Qwen3's vocabulary, measured here), a stall in the
        middle of a generation."""
        out: dict[bytes, list[int]] = {}
        for i, b in enumerate(self.token_bytes):
            if b:
                out.setdefault(b, []).append(i)
        for i, ch in self.symbols.items():
            out.setdefault(ch.encode(), []).append(i)
        return {b: tuple(ids) for b, ids in out.items()}

    @cached_property
    def texts(self) -> tuple[bytes | None, ...]:
        """Each id's bytes as automata read them: an added token's are its symbol's (EOS: None)."""
        out = list(self.token_bytes)
        for i, ch in self.symbols.items():
            out[i] = ch.encode()
        return tuple(out)

    @cached_property
    def longest(self) -> int:
        """The most bytes one token's text holds."""
        return max(map(len, filter(None, self.texts)), default=0)  # C-level loops: 150k texts in ms

    @cached_property
    def byte_tokens(self) -> np.ndarray:
        """The token of each byte value on its own (its lowest id; -1 where the vocabulary has none)."""
        out = np.full(256, -1, dtype=np.int64)
        for b in range(256):
            ids = self.outlines_map.get(bytes([b]))  # symbols are three bytes long: only tokens here
            if ids:
                out[b] = min(ids)
        return out

    def derive_all(self) -> None:
        """Compute every derived table now, before a fork: Python 3.11's cached_property holds one
        lock per property across instances, so a forked child computing one itself would wait
        forever if another thread of the parent held that lock at the fork."""
        for name, attr in vars(type(self)).items():
            if isinstance(attr, cached_property):
                getattr(self, name)

    def token_text(self, token: int) -> bytes | None:
        """``texts[token]``, None for ids outside the vocabulary."""
        return self.texts[token] if 0 <= token < len(self.texts) else None

    @cached_property
    def fingerprint(self) -> str:
        h = hashlib.sha256()
        for b in self.token_bytes:
            h.update(b"\x00" if b is None else len(b).to_bytes(2, "little") + b)
        h.update(json.dumps(sorted(self.special.items())).encode())
        h.update(json.dumps([self.eos_ids, self.size]).encode())
        return h.hexdigest()[:24]

    def decode_bytes(self, ids: list[int]) -> bytes:
        """Concatenated bytes of ordinary tokens; added tokens give their own text."""
        names = {i: t for t, i in self.special.items()}
        out = bytearray()
        for i in ids:
            b = self.token_bytes[i] if i < len(self.token_bytes) else None
            out += b if b is not None else names.get(i, "").encode()
        return bytes(out)

    @cached_property
    def eos_array(self) -> np.ndarray:
        return np.asarray(self.eos_ids, dtype=np.int64)


# by tokenizer object, and by fingerprint: reading a vocabulary takes about a second
VOCABS = Cache("vocabularies", 32, per_vocabulary=True)


def build_vocab(tokenizer: Any, *, size: int | None = None, eos_ids: list[int] | None = None) -> Vocab:
    """Read every token's bytes from an mlx-lm TokenizerWrapper or a transformers tokenizer.

    ``size`` is the model's logits width when it exceeds the tokenizer (padding rows are never
    allowed). ``eos_ids`` overrides the end-of-sequence ids found on the tokenizer.
    """
    cacheable = eos_ids is None
    try:
        cached = VOCABS.get(tokenizer) if cacheable else None
    except TypeError:  # an unhashable tokenizer is read every time
        cached = None
    if cached is not None and (size is None or cached.size == size):
        return cached
    hf = _hf_tokenizer(tokenizer)
    kind = _decoder_kind(hf)
    added = {i: t.content for i, t in hf.added_tokens_decoder.items()}
    vocab = hf.get_vocab()
    n = max(len(hf), max(vocab.values()) + 1)
    pieces: list[str | None] = [None] * n
    for piece, i in vocab.items():
        pieces[i] = piece
    token_bytes: list[bytes | None] = [None] * n
    dropped = []
    for i, piece in enumerate(pieces):
        if piece is None or i in added:
            continue
        b = _piece_bytes(piece, kind)
        if FORGE_BYTE in b:
            dropped.append(i)
            continue
        token_bytes[i] = b
    special = {text: i for i, text in added.items()}
    if eos_ids is None:
        found = [hf.eos_token_id] if hf.eos_token_id is not None else []
        if isinstance(tokenizer, TokenizerWrapper):
            found += sorted(tokenizer.eos_token_ids)  # exactly the ids mlx-lm stops on
        else:
            found += [special[t] for t in _END_TOKENS if t in special]
        eos_ids = list(dict.fromkeys(found))
    if not eos_ids:
        raise TokenizerError("tokenizer has no end-of-sequence token")
    out = Vocab(
        token_bytes=tuple(token_bytes),
        special=special,
        eos_ids=tuple(eos_ids),
        size=max(n, size or 0),
        name=getattr(hf, "name_or_path", ""),
        dropped=tuple(dropped),
    )
    # a tokenizer loaded twice reads to one Vocab, so its derived tables (0.5 s of them) are built once
    out = VOCABS.get_or_build(("fingerprint", out.fingerprint), lambda: out)
    if cacheable:
        try:
            VOCABS.put(tokenizer, out)
        except TypeError:
            pass
    return out
