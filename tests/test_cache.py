"""Compiled automata are reused: same Grammar object, memory LRU, disk cache, corrupt files ignored."""

import time

import numpy as np

import engine
from engine.automata import AUTOMATA, automaton_key, compile_regex, store
from engine.grammar import GRAMMARS
from engine.json_schema import schema_to_regex

SCHEMA = {"type": "object", "properties": {"q": {"type": "string", "maxLength": 4}, "n": {"type": "integer"}},
          "required": ["q"]}


def test_repeat_compile_hits_every_cache(qwen3_tokenizer):
    tok = qwen3_tokenizer
    g1 = engine.compile_json_schema(tok, SCHEMA)
    hits, lookups = GRAMMARS.hits, AUTOMATA.hits + AUTOMATA.misses
    g2 = engine.compile_json_schema(tok, dict(reversed(list(SCHEMA.items()))))
    # the same grammar, from the grammar cache, without translating or looking up an automaton
    assert g2 is g1 and GRAMMARS.hits == hits + 1 and AUTOMATA.hits + AUTOMATA.misses == lookups
    vocab = engine.vocabulary.build_vocab(tok)
    regex = schema_to_regex(SCHEMA).regex
    key = automaton_key(regex, vocab, lazy=True)
    store.flush()  # saved by the writer thread, after the compile returned
    assert (store.cache_dir() / f"{key}.npz").exists()
    AUTOMATA.clear()
    hits = AUTOMATA.hits
    a = compile_regex(regex, vocab, lazy=True)  # from disk
    assert a is not g1.automaton
    assert (a.trans == g1.automaton.trans).all() and (a.bound == g1.automaton.bound).all()
    compile_regex(regex, vocab, lazy=True)
    assert AUTOMATA.hits == hits + 1


def test_corrupt_disk_entry_is_rebuilt(qwen3_tokenizer):
    vocab = engine.vocabulary.build_vocab(qwen3_tokenizer)
    regex = schema_to_regex({"enum": ["alpha", "beta"]}).regex
    first = compile_regex(regex, vocab)
    store.flush()
    path = store.cache_dir() / f"{automaton_key(regex, vocab)}.npz"
    path.write_bytes(b"not an npz file")
    AUTOMATA.clear()
    again = compile_regex(regex, vocab)
    store.flush()
    assert again.num_states == first.num_states
    assert store.load(path, again.key) is not None  # rewritten, valid
    assert store.load(path, "another key") is None  # a file for another key is not trusted


def test_bounded_compile_times_out_cleanly(qwen3_tokenizer):
    vocab = engine.vocabulary.build_vocab(qwen3_tokenizer)
    regex = schema_to_regex({"type": "string", "maxLength": 250}).regex + "x"
    t = time.perf_counter()
    try:
        compile_regex(regex, vocab, timeout=0.5)
    except engine.errors.CompileError as e:
        assert "0.5 s" in str(e)
    else:
        raise AssertionError("a 250-character string automaton cannot build in 0.5 s here")
    assert time.perf_counter() - t < 5
    assert compile_regex(schema_to_regex({"type": "boolean"}).regex, vocab, timeout=30).min_tokens == 1


def test_the_disk_cache_is_scanned_only_past_its_limit(tmp_path, monkeypatch):
    """Pruning stats every file of the folder; it runs on a process's first save to a folder, when
    its tally of the folder passes the limit, or every RESCAN saves, not on every compile."""
    folder = tmp_path / "cache"  # passed explicitly: a compile on a thread left by another test
    scans = []                    # reads TOOLGATE_CACHE_DIR and must not write or scan here
    real = store._scan
    monkeypatch.setattr(store, "_scan", lambda f, keep: (f == folder and scans.append(keep)) or real(f, keep))
    arrays = {"trans": np.zeros((2, 256), dtype=np.int32)}
    for i in range(10):
        path = folder / f"k{i}.npz"
        store.save(path, f"k{i}", arrays)
        store.prune(folder, path)
    assert len(scans) == 1
    limit = 3 * (folder / "k0.npz").stat().st_size
    monkeypatch.setenv("TOOLGATE_CACHE_BYTES", str(limit))
    path = folder / "k10.npz"
    store.save(path, "k10", arrays)
    store.prune(folder, path)
    kept = list(folder.glob("*.npz"))
    assert len(scans) == 2 and path in kept and 1 < len(kept) <= 3
    assert sum(f.stat().st_size for f in kept) <= limit


def test_schema_keys_from_the_marshal_cache_are_the_walked_keys():
    from collections import OrderedDict

    from engine.json_schema import keys

    # values json writes alike or Python compares equal (1, 1.0, True) must keep apart
    schemas = [{"const": 1}, {"const": 1.0}, {"const": True}, {"enum": [0, False]}, {"enum": [False, 0]},
               {"type": "object", "properties": {"a": {}, "b": {}}},
               {"properties": {"b": {}, "a": {}}, "type": "object"}, {"type": "string", "maxLength": 3}]
    walked = [keys.schema_key(s) for s in schemas]
    assert len(set(walked)) == len(schemas)
    assert keys.schema_key({"maxLength": 3, "type": "string"}) == walked[-1]  # key order off properties
    hits = keys.KEYS.hits
    assert [keys.schema_key(s) for s in schemas] == walked and keys.KEYS.hits == hits + len(schemas)
    # not plain data: walked every time, never stored
    size = len(keys.KEYS)
    assert keys.schema_key(OrderedDict(type="string", maxLength=3)) == walked[-1] and len(keys.KEYS) == size
