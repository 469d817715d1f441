"""The official JSON Schema Test Suite (draft 2020-12, required tests; tests/fixtures/data/json-schema-test-suite).

For every group: the schema compiles (strict mode) or is refused with a SchemaError that names its
keyword. For every instance of a compiled group, written as the engine writes JSON (schema key
order, compact), the regex's verdict is compared with the suite's: an invalid instance accepted is
under-constraint and fails the test; a valid one refused is over-constraint (counted, reported).
A schema whose expansion writes free values or cuts a recursion is read as the engine compiles it
by default: linked (its definitions' byte DFAs, a call stack between them).
Groups in the light form (every 6th; all with --full) are also walked through the token automaton
on the real Qwen3 vocabulary, as generation sees them.
"""

import json

import engine
from conftest import DATA, FULL, load_tokenizer
from engine.automata import compile_linked
from engine.automata.byte_dfa import byte_dfa
from engine.errors import SchemaError
from engine.json_schema import schema_to_regex
from engine.vocabulary import build_vocab
from instances import canonical_text

SUITE = DATA / "json-schema-test-suite"


def groups():
    for path in sorted(SUITE.glob("*.json")):
        for i, group in enumerate(json.loads(path.read_text())):
            yield f"{path.stem}/{i}", group


def dfa_match(regex: str):
    """The regex's verdict on a whole text, by its byte DFA (the language the token automaton is
    built from; the `regex` module took twice as long to compile the 251 groups' regexes)."""
    trans, final = byte_dfa(regex)

    def match(text: str) -> bool:
        state = 0
        for b in text.encode():
            state = trans[state, b]
        return bool(state < len(final) and final[state])
    return match


def linked_match(schema, vocab):
    """The linked translation's verdict on a whole text, byte by byte through its definitions."""
    t = schema_to_regex(schema, link=True)
    a = compile_linked([t.regex, *t.definitions], vocab, timeout=None, limits=t.counters)

    def match(text: str) -> bool:
        state = a.step(a.initial_state, text.encode(), 1 << 30)
        return state is not None and a.is_final(state)
    return match


def test_suite_no_invalid_instance_is_accepted():
    tally = {"groups": 0, "compiled": 0, "refused": 0, "tests": 0, "passed": 0, "valid refused": 0}
    accepted_invalid, unnamed = [], []
    walked = 0
    tok = load_tokenizer("qwen3")
    vocab = build_vocab(tok)
    for n, (name, group) in enumerate(groups()):
        tally["groups"] += 1
        try:
            t = schema_to_regex(group["schema"])
            match = None
            if t.free_values or t.cut:  # thousands of DFA states written out, one small definition linked
                try:
                    match = linked_match(group["schema"], vocab)
                except SchemaError:
                    pass  # the engine keeps the expansion then
            match = match or dfa_match(t.regex)
        except SchemaError as e:
            tally["refused"] += 1
            if not e.keyword:
                unnamed.append(f"{name}: {e}")
            tally["tests"] += len(group["tests"])
            tally["passed"] += sum(not t["valid"] for t in group["tests"])  # refusing rejects the invalid
            continue
        tally["compiled"] += 1
        grammar = None
        if FULL or n % 6 == 0:
            try:
                grammar = engine.compile_json_schema(tok, group["schema"], timeout=30)
                walked += 1
            except engine.errors.CompileError:  # a bound (size, time) refuses it; counted, not walked
                tally["automaton over a bound"] = tally.get("automaton over a bound", 0) + 1
        for t in group["tests"]:
            text = canonical_text(t["data"], group["schema"])
            ok = match(text)
            ids = tok.encode(text, add_special_tokens=False)
            if grammar is not None and tok.decode(ids) == text:  # (the tokenizer NFC-normalizes some text)
                state = grammar.walk(ids)
                assert ok == (state is not None and grammar.is_final(state)), (name, t["description"])
            tally["tests"] += 1
            tally["passed"] += ok == t["valid"]
            if ok and not t["valid"]:
                accepted_invalid.append(f"{name} {group['description']!r}: {t['description']!r} {text}")
            if t["valid"] and not ok:
                tally["valid refused"] += 1
    print(f"\nJSON Schema Test Suite 2020-12: {tally}, {walked} groups walked through the automaton")
    assert accepted_invalid == []
    assert unnamed == []
    assert tally["groups"] > 300 and walked > 20
    # llguidance 1.9.1 passes 877 of these tests (benchmarks/RESULTS_SUITE.md, bench_suite.py)
    assert tally["passed"] > 877, tally
