"""Byte DFAs with JSON strings and quoted literals spliced in accept what outlines-core's own DFAs
of the regexes accept.

automata.byte_dfa builds a regex with SPLICE standing for each string's rest and splices one
prebuilt copy of that rest's DFA in per use, and with a symbol standing for each quoted literal,
spliced in as a trie of the literals each state reads. Each check here walks the spliced DFA and the one
outlines-core builds from the regex as written in product, byte by byte: every pair of states
reached must agree on acceptance and on which bytes lead on.
"""

import json

import numpy as np
import pytest

import engine
from conftest import DATA
from engine.automata.automaton import UNREACHABLE, bfs
from engine.automata.byte_dfa import byte_dfa, outlines_dfa, quoted_literals, splice, splice_literals
from engine.json_schema import schema_to_regex
from engine.regexes import NONEMPTY_REST, STRING_REST
from engine.symbols import NONEMPTY_SPLICE, SPLICE

STRING, NONEMPTY = '"' + STRING_REST, '"' + NONEMPTY_REST


def trimmed(trans: np.ndarray, final: np.ndarray) -> np.ndarray:
    """``trans`` with every state that cannot reach a final one made the dead state."""
    n = len(final)
    src = np.repeat(np.arange(n, dtype=np.int32), 256)
    dst = trans[:n].reshape(-1)
    keep = dst != n
    live = np.append(bfs(dst[keep].astype(np.int32), src[keep], np.flatnonzero(final), n) < UNREACHABLE, False)
    return np.where(live[trans], trans, n)


def same_language(a: tuple, b: tuple) -> bool:
    """Two byte DFAs walked in product from their initial states: every pair reached agrees on
    acceptance and on which bytes lead to a live state."""
    (ta, fa), (tb, fb) = a, b
    ta, tb = trimmed(ta, fa), trimmed(tb, fb)
    na, nb = len(fa), len(fb)
    seen, todo = {(0, 0)}, [(0, 0)]
    while todo:
        x, y = todo.pop()
        if fa[x] != fb[y] or not np.array_equal(ta[x] == na, tb[y] == nb):
            return False
        live = ta[x] != na
        for pair in set(zip(ta[x][live].tolist(), tb[y][live].tolist())) - seen:
            seen.add(pair)
            todo.append(pair)
    return True


def spliced_once(regex: str):
    """The spliced DFA, or None where splice declined (byte_dfa then builds the regex as written)."""
    written = regex.replace(STRING, '"' + SPLICE).replace(NONEMPTY, '"' + NONEMPTY_SPLICE)
    dfa = outlines_dfa(written)
    for symbol in (SPLICE, NONEMPTY_SPLICE):
        if symbol in written and dfa is not None:
            dfa = splice(*dfa, symbol)
    return dfa


CASES = {
    "one string": STRING,
    "members": '\\{"a":' + STRING + '(?:,"b":' + STRING + ')?,"c":(?:' + STRING + '|null)\\}',
    "array of strings": '\\[(?:' + STRING + '(?:,' + STRING + ')*)?\\]',
    "string or number": '(?:' + STRING + '|-?[0-9]+)',
    "non-empty strings beside others": '\\{"a":' + NONEMPTY + ',"b":\\[' + NONEMPTY + '(?:,' + STRING + ')*\\]\\}',
}
DECLINED = {
    "a const beside a string": '(?:"abc"|' + STRING + ')',
    "the empty string beside a string": '\\[(?:""|' + STRING + ')\\]',
    "a string beside a non-empty one": '(?:' + STRING + '|' + NONEMPTY + ')',
}


def test_the_spliced_pieces_are_the_rests_of_strings():
    assert same_language(byte_dfa(STRING), outlines_dfa(STRING))
    assert same_language(byte_dfa(NONEMPTY), outlines_dfa(NONEMPTY))
    assert not same_language(byte_dfa(NONEMPTY), outlines_dfa(STRING))
    assert not same_language(byte_dfa(STRING), outlines_dfa('"[a-z]*"'))  # the check can fail


def test_jsonschemabench_regexes_spliced_accept_what_they_accept_as_written():
    counts = [0, 0, 0, 0]  # with strings, spliced; with literals, spliced
    for path in sorted(DATA.glob("jsonschemabench/*.jsonl")):
        for line in open(path):
            schema = json.loads(line)["schema"]
            for link in (False, True):
                try:
                    t = schema_to_regex(schema, link=link)
                except engine.ToolgateError:
                    continue
                for regex in [t.regex, *t.definitions]:
                    if len(regex) > 20_000:
                        continue
                    strings = STRING in regex or NONEMPTY in regex
                    keyed = bool(quoted_literals(regex)[1])
                    if not strings and not keyed:
                        continue
                    counts[0] += strings
                    counts[1] += strings and spliced_once(regex) is not None
                    counts[2] += keyed
                    counts[3] += keyed and literals_spliced(regex) is not None
                    assert same_language(byte_dfa(regex), outlines_dfa(regex)), regex[:200]
    strings, spliced, keyed, literal = counts
    assert strings >= 40 and spliced >= 0.9 * strings and keyed >= 40 and literal >= 0.9 * keyed, counts


def test_splice_declines_where_another_step_enters_the_splice_symbols_bytes():
    trans, final = outlines_dfa('(?:"' + SPLICE + '|1)')
    assert splice(trans, final, SPLICE) is not None
    n = len(final)
    inside = trans[trans[0, ord('"')], SPLICE.encode()[0]]  # one byte into SPLICE
    forged = trans.copy()
    forged[0, ord("x")] = inside  # "x" then SPLICE's last bytes: not a use of SPLICE
    assert inside != n and splice(forged, final, SPLICE) is None


def literals_spliced(regex: str):
    """The DFA with the regex's quoted literals spliced in (its strings' rests written), or None
    where it has none or splice_literals declined."""
    keyed, literals = quoted_literals(regex)
    return splice_literals(*outlines_dfa(keyed), literals) if literals else None


LITERAL_CASES = {
    "keys sharing prefixes": '\\{(?:"name":1,)?(?:"names":2,)?(?:"nam":3,)?"n":4(?:,"name":5)?\\}',
    "an enum with the empty string": '(?:""|"\\-R"|"\\-A"|"\\-A2")',
    "escaped punctuation and non-ASCII": '\\{"a\\.b\\$c":(?:"x\\|y"|"é€")\\}',
    "keys beside string values": '\\{"abc":' + STRING + '(?:,"abd":' + STRING + ')?\\}',
}


LITERAL_DECLINED = {
    "a literal beside a step on its first byte": '(?:"abc"|"[a-z]+1")',  # after the quote, "a" leads on in both
}
SPLICED = [(spliced_once, CASES, name) for name in CASES] + \
    [(literals_spliced, LITERAL_CASES, name) for name in LITERAL_CASES]
BUILT_AS_WRITTEN = [(spliced_once, DECLINED, name) for name in DECLINED] + \
    [(literals_spliced, LITERAL_DECLINED, name) for name in LITERAL_DECLINED]


@pytest.mark.parametrize("spliced, cases, name", SPLICED, ids=[name for *_, name in SPLICED])
def test_spliced_dfas_accept_what_the_written_regex_accepts(spliced, cases, name):
    regex = cases[name]
    dfa = spliced(regex)
    assert dfa is not None, "the splice declined"
    assert same_language(dfa, outlines_dfa(regex))
    assert same_language(byte_dfa(regex), outlines_dfa(regex))


@pytest.mark.parametrize("spliced, cases, name", BUILT_AS_WRITTEN, ids=[name for *_, name in BUILT_AS_WRITTEN])
def test_what_needs_the_subset_construction_is_built_as_written(spliced, cases, name):
    regex = cases[name]
    assert spliced(regex) is None
    assert same_language(byte_dfa(regex), outlines_dfa(regex))


def test_literals_no_string_reaches_leave_the_dfa_as_built():
    regex = '(?:a|[^\\x00-\\x{10FFFF}]"abc")'  # the empty class: nothing reads the literal
    assert quoted_literals(regex)[1]
    assert same_language(byte_dfa(regex), outlines_dfa(regex))


@pytest.mark.parametrize("regex", ['"ab"?', '["ab"]', '(?i)"ab"', '\\"ab"', '"a\\db"', '"a(b)"'])
def test_only_a_literal_concatenation_becomes_a_symbol(regex):
    keyed, literals = quoted_literals(regex)
    assert (keyed, literals) == (regex, {})
    assert same_language(byte_dfa(regex), outlines_dfa(regex))
