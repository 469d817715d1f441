"""Token bytes on the six real tokenizers; special tokens are atomic; EOS ids are all found."""

import pytest

from conftest import FAMILIES, load_tokenizer
from engine.automata import compile_regex
from engine.grammar import compile_regex_grammar
from engine.json_schema import schema_to_regex
from engine.vocabulary import build_vocab

TEXTS = [
    "Hello, world!",
    '{"name": "Zoë", "city": "Paris", "days": 3, "ok": true, "x": null}',
    "  leading spaces\n\ttabs and\r\nnewlines\n\n",
    "日本語のテキストと한국어 and emoji 👩‍👩‍👧 🇫🇷 ok",
    "def f(x):\n    return x ** 2  # comment\n",
    "Ünïcödé ñ ß — “quotes” ‘single’ … \u00a0nbsp",
    "numbers 1234567890 3.14159 -2e10 0x1F",
    "<tool_call> text that looks like a tag </tool_call>",
    "\u0000\u0001 control \u007f bytes",
]


@pytest.mark.parametrize("family", FAMILIES)
def test_token_bytes_concatenate_to_decode(family):
    tok = load_tokenizer(family)
    vocab = build_vocab(tok)
    sentencepiece = family == "mistral"
    for text in TEXTS:
        ids = tok.encode(text, add_special_tokens=False)
        ids = [i for i in ids if vocab.token_bytes[i] is not None or i in vocab.dropped]
        ours = b"".join(vocab.token_bytes[i] or b"" for i in ids if i not in vocab.dropped)
        if any(i in vocab.dropped for i in ids):
            continue  # a private-use byte token: excluded from generation by design
        expected = tok.decode(ids).encode("utf-8", "surrogatepass")
        if sentencepiece and ours.startswith(b" "):
            ours = ours[1:]  # SentencePiece's decoder drops the first token's leading space
        assert ours.decode("utf-8", "replace") == expected.decode("utf-8", "replace"), (family, text)


@pytest.mark.parametrize("family", FAMILIES)
def test_every_token_has_bytes_or_is_special(family):
    tok = load_tokenizer(family)
    vocab = build_vocab(tok)
    specials = set(vocab.special.values())
    missing = [i for i, b in enumerate(vocab.token_bytes) if b is None and i not in specials and i not in vocab.dropped]
    assert missing == [], missing[:10]
    assert len(vocab.dropped) <= 32, "only the few tokens that could forge a special-token symbol are dropped"


def test_eos_ids_include_both_qwen_ends():
    vocab = build_vocab(load_tokenizer("qwen3"))
    assert vocab.eos_ids[0] == 151645
    assert 151643 in vocab.eos_ids


@pytest.mark.parametrize("family,token", [("qwen3", "<tool_call>"), ("glm4", "<arg_key>"),
                                          ("kimi-k2", "<|tool_calls_section_begin|>"),
                                          ("gpt-oss", "<|channel|>"), ("llama3", "<|python_tag|>"),
                                          ("mistral", "[TOOL_CALLS]")])
def test_special_token_is_atomic(family, token):
    tok = load_tokenizer(family)
    vocab = build_vocab(tok)
    token_id = vocab.special[token]
    g = compile_regex_grammar(tok, vocab.symbol(token) + "ok")
    a = g.automaton
    first = a.successors_within(0, 10)
    assert first.tolist() == [token_id], "only the special token itself may start the output"
    # the same text spelled with ordinary tokens is rejected
    spelled = tok.encode(token.replace("<", "< ").replace("[", "[ "), add_special_tokens=False)
    assert a.walk(spelled) == -1


@pytest.mark.parametrize("family", ["qwen3", "glm4", "kimi-k2"])
def test_json_strings_cannot_hold_special_tokens(family):
    tok = load_tokenizer(family)
    vocab = build_vocab(tok)
    a = compile_regex(schema_to_regex({"type": "string"}).regex, vocab)
    inside = a.next_state(0, tok.encode('"', add_special_tokens=False)[0])
    allowed = set(a.successors_within(inside, 100).tolist())
    specials = set(vocab.special.values())
    assert not allowed & specials
    assert len(allowed) > 0.9 * (len(vocab.token_bytes) - len(specials))


def test_a_tokenizer_loaded_twice_reads_to_one_vocabulary():
    """Two loads of one tokenizer give one Vocab object, so the tables derived from it (its
    outlines-core map: 0.5 s for Qwen3) are built once per process, not once per load."""
    from transformers import AutoTokenizer
    from conftest import tokenizer_dir

    first = build_vocab(load_tokenizer("qwen3"))
    again = build_vocab(AutoTokenizer.from_pretrained(str(tokenizer_dir("qwen3"))))
    assert again is first
    assert build_vocab(load_tokenizer("llama3")) is not first


@pytest.mark.parametrize("family", ["qwen3", "mistral"])
def test_tokens_extending_a_prefix_are_the_trie_subtree(family):
    """The tokens that start with a prefix and run on past it, read from the trie, are exactly
    those a scan of every token finds (symbols included: they are tokens of the trie too)."""
    from engine.automata.index import tokens_extending

    vocab = build_vocab(load_tokenizer(family))
    texts = vocab.outlines_map
    for prefix in [b'{"', b'"', b'",', b" {", b"\xe2", b"xyzzy-no-token", b"a", b"<"]:
        want = sorted(i for text, ids in texts.items() if text.startswith(prefix) and len(text) > len(prefix)
                      for i in ids)
        assert sorted(tokens_extending(vocab, prefix).tolist()) == want, prefix


def test_token_map_leaves_nothing_for_the_collector():
    """The token map lives as long as the process: once collected, none of its values is tracked
    by the garbage collector (150k tracked lists made every full collection walk them)."""
    import gc

    vocab = build_vocab(load_tokenizer("qwen3"))
    texts = vocab.outlines_map
    gc.collect()
    assert len(texts) > 100_000
    assert not any(gc.is_tracked(ids) for ids in texts.values())
    assert all(isinstance(ids, tuple) and ids for ids in texts.values())
