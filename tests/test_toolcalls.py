"""Tool calls on every family's real tokenizer, with real BFCL and MCP tools.

The client is random: a sampler that picks uniformly among the tokens the processor allows (and,
in free text, often picks a special token so that calls actually open). Whatever it picks, the
output must parse with our parser, name only offered tools, carry arguments valid for the tool's
schema, respect the mode, be accepted by mlx-lm's own parser for the family, and be closed
within max_tokens.
"""

import importlib
import json
import re

import jsonschema
import mlx.core as mx
import numpy as np
import pytest

from conftest import FULL, load_tokenizer, scale, tokenizer_dir
from engine import accumulate_deltas, compile_tools, detect_format
from engine.automata import AUTOMATA, automaton_key
from engine.errors import BudgetError, CompileError, RequestError, SchemaError, TokenizerError
from engine.tools import FAMILIES as FORMATS
from engine.tools import formats, load_format
from tooldata import bfcl_tools, mcp_tools

# mlx-lm's parser module for each family, where it has one (the cross-check below)
MLX_LM_PARSERS = {"hermes": "json_tools", "qwen3_coder": "qwen3_coder", "kimi_k2": "kimi_k2",
                  "glm47": "glm47", "glm45": "glm47", "mistral": "mistral", "mistral_args": "mistral"}
TOKENIZER_OF = {"hermes": "qwen3", "qwen3_coder": "qwen3", "kimi_k2": "kimi-k2", "glm47": "glm4",
                "glm45": "glm4", "harmony": "gpt-oss", "llama3_json": "llama3", "mistral": "mistral",
                "mistral_args": "mistral"}
THINKS = {"hermes", "qwen3_coder", "glm47", "glm45", "harmony"}
NAMED = {"type": "function", "function": {"name": "move_file"}}
CHOICES = ["auto", "required", "none", NAMED]


def offered_tools(family=None):
    mcp = {t["function"]["name"]: t for t in mcp_tools()}
    tools = bfcl_tools("simple_python", 2) + [mcp["move_file"], mcp["read_graph"], mcp["list_commits"]]
    rule = load_format(family).patterns.get("TOOL_NAME_PATTERN") if family else None
    return [t for t in tools if rule is None or re.fullmatch(rule, t["function"]["name"])]


_WITH_ARGS = {}


def tokenizer_for(family):
    """The family's real tokenizer. For mistral_args (tekken tokenizers, not available here):
    Mistral's v3 SentencePiece vocabulary with the [ARGS] control token added."""
    if family != "mistral_args":
        return load_tokenizer(TOKENIZER_OF[family])
    if "tok" not in _WITH_ARGS:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(tokenizer_dir("mistral")))
        tok.add_tokens(["[ARGS]"], special_tokens=True)
        _WITH_ARGS["tok"] = tok
    return _WITH_ARGS["tok"]


def sample(grammar, max_tokens, rng, width=None, special_rate=0.3):
    """One output from the random client, through the processor exactly as mlx-lm calls it."""
    width = width or grammar.vocab.size
    proc = grammar.matcher(max_tokens)
    special = np.zeros(width, dtype=bool)
    special[[i for i in [*grammar.vocab.symbols, grammar.vocab.eos_ids[0]] if i < width]] = True
    prompt = [1, 2, 3]
    out = []
    logits = mx.zeros((1, width))
    for _ in range(max_tokens):
        masked = np.array(proc(mx.array(prompt + out), logits)[0])
        allowed = np.flatnonzero(masked == 0)
        assert len(allowed) > 0
        pick = allowed
        if len(allowed) > 1000 and rng.random() < special_rate:
            chosen = allowed[special[allowed]]
            pick = chosen if len(chosen) else allowed
        token = int(rng.choice(pick))
        if token in grammar.vocab.eos_ids:
            return out, True
        out.append(token)
        if proc.complete:
            return out, True
    return out, False


def mlx_lm_calls(family, text, tools):
    """What mlx-lm's own parser for the family reads from the same text."""
    mod = importlib.import_module(f"mlx_lm.tool_parsers.{MLX_LM_PARSERS[family]}")
    start, end = mod.tool_call_start, mod.tool_call_end
    if end:
        segments = re.findall(re.escape(start) + "(.*?)" + re.escape(end), text, re.S)
    else:
        segments = [text.split(start, 1)[1]] if start in text else []
    calls = []
    for seg in segments:
        got = mod.parse_tool_call(seg, tools)
        calls += got if isinstance(got, list) else [got]
    return [(c["name"], c["arguments"]) for c in calls]


def check_output(grammar, family, ids, tools, tool_choice, parallel, thinking):
    parsed = grammar.parse(ids)
    by_name = {t["function"]["name"]: t["function"]["parameters"] for t in tools}
    for call in parsed.tool_calls:
        name = call["function"]["name"]
        assert name in by_name
        args = json.loads(call["function"]["arguments"])
        jsonschema.validate(args, by_name[name])
        assert set(args) <= set(by_name[name].get("properties", {}))
    assert parsed.errors == []
    n = len(parsed.tool_calls)
    if tool_choice == "none":
        assert n == 0
    if tool_choice == "required" or isinstance(tool_choice, dict):
        assert n >= 1
    if isinstance(tool_choice, dict):
        assert {c["function"]["name"] for c in parsed.tool_calls} == {tool_choice["function"]["name"]}
    if not parallel:
        assert n <= 1
    if thinking is False:
        assert parsed.reasoning is None
    if family in MLX_LM_PARSERS and n:
        text = grammar.parser().plain(grammar.parser().symbol_text(ids))
        theirs = mlx_lm_calls(family, text, tools)
        ours = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in parsed.tool_calls]
        assert theirs == ours, text
    return parsed


def test_format_files_are_read_by_lark():
    """Every family's file loads through lark's grammar loader, and lark's own checks reach the user:
    an undefined rule, an undeclared terminal or a syntax error is a CompileError naming the file."""
    for name in FORMATS:
        fmt = load_format(name)
        assert {"start", "call"} <= set(fmt.rules) and fmt.holes <= formats.HOLES
    good = formats.grammar_text("hermes")
    broken = {
        "undefined rule": good.replace("content: TEXT", "content: TEXT missing_rule"),
        "undeclared terminal": good.replace("%declare TEXT TOOL_NAME ARGUMENTS", "%declare TEXT TOOL_NAME"),
        "syntax": good.replace("call: TOOL_CALL_OPEN", "call: TOOL_CALL_OPEN ((("),
        "unknown hole": good.replace("%declare TEXT", "%declare SURPRISE TEXT"),
    }
    for what, text in broken.items():
        with pytest.raises(CompileError, match="hermes.lark"):
            formats.read_format("hermes", text)


def test_detect_format():
    for family in ("hermes", "kimi_k2", "glm47", "harmony", "llama3_json", "mistral"):
        assert detect_format(load_tokenizer(TOKENIZER_OF[family])) == family
    qwen = load_tokenizer("qwen3")
    coder = (tokenizer_dir("qwen3") / "Qwen3-Coder.jinja").read_text()
    glm = load_tokenizer("glm4")
    glm45 = (tokenizer_dir("glm4") / "GLM-4.6.jinja").read_text()
    saved_q, saved_g = qwen.chat_template, glm.chat_template
    try:
        qwen.chat_template, glm.chat_template = coder, glm45
        assert detect_format(qwen) == "qwen3_coder"
        assert detect_format(glm) == "glm45"
    finally:
        qwen.chat_template, glm.chat_template = saved_q, saved_g
    tekken = tokenizer_for("mistral_args")
    tekken.chat_template = "{{ '[TOOL_CALLS]' + name + '[ARGS]' + arguments }}"
    assert detect_format(tekken) == "mistral_args"
    with pytest.raises(SchemaError, match="math.hypot.*cannot be written in the mistral_args format"):
        compile_tools(tekken, offered_tools(), format="mistral_args")


def _modes(family):
    for choice in CHOICES:
        for parallel in (True, False):
            for thinking in ((None, False) if family in THINKS else (None,)):
                yield choice, parallel, thinking


@pytest.mark.parametrize("family", FORMATS)
def test_random_client_every_mode(family):
    tok = tokenizer_for(family)
    tools = offered_tools(family)
    rng = np.random.default_rng(7)
    kinds = set()
    for choice, parallel, thinking in _modes(family):
        g = compile_tools(tok, tools, format=family, tool_choice=choice, parallel_tool_calls=parallel,
                          thinking=thinking)
        for trial in range(scale(1, 3)):
            budget = int(rng.integers(g.min_tokens, g.min_tokens + scale(60, 120)))
            ids, ended = sample(g, budget, rng)
            assert len(ids) <= budget
            state = g.walk(ids, budget)
            assert state is not None and g.is_final(state), "the output must be complete"
            parsed = check_output(g, family, ids, tools, choice, parallel, thinking)
            kinds.add("call" if parsed.tool_calls else "text")
            if len(parsed.tool_calls) > 1:
                kinds.add("parallel")
    assert {"call", "text"} <= kinds


@pytest.mark.parametrize("family", FORMATS)
def test_budget_sweep_never_leaves_a_call_open(family):
    """required mode, every max_tokens from the minimum up: a complete valid call, every time."""
    tok = tokenizer_for(family)
    tools = offered_tools(family)
    g = compile_tools(tok, tools, format=family, tool_choice="required")
    with pytest.raises(BudgetError, match=str(g.min_tokens)):
        g.matcher(g.min_tokens - 1)
    rng = np.random.default_rng(11)
    for budget in range(g.min_tokens, g.min_tokens + scale(21, 41)):
        ids, _ = sample(g, budget, rng, special_rate=0.0)
        state = g.walk(ids, budget)
        assert state is not None and g.is_final(state)
        parsed = check_output(g, family, ids, tools, "required", True, None)
        assert parsed.tool_calls


@pytest.mark.parametrize("family", ["hermes", "kimi_k2"])
def test_auto_call_opens_only_with_room(family):
    """In auto mode a call can open only while the tokens left can hold the shortest call."""
    tok = load_tokenizer(TOKENIZER_OF[family])
    g = compile_tools(tok, offered_tools(), format=family)
    shortest = min(g.pieces.call_min(ti) for ti in range(len(g.tools)))
    rng = np.random.default_rng(3)
    for budget in range(1, shortest + 25):
        ids, _ = sample(g, budget, rng, special_rate=0.9)
        parsed = check_output(g, family, ids, offered_tools(), "auto", True, None)
        if budget < shortest:
            assert not parsed.tool_calls


def test_thinking_is_cut_for_a_required_call():
    tok = load_tokenizer("qwen3")
    g = compile_tools(tok, offered_tools(), format="hermes", tool_choice="required", thinking=True, reserve=20)
    rng = np.random.default_rng(5)
    for budget in (g.min_tokens, g.min_tokens + 10, g.min_tokens + 60):
        ids, _ = sample(g, budget, rng, special_rate=0.0)
        parsed = g.parse(ids)
        assert parsed.tool_calls and len(ids) <= budget
    open_g = compile_tools(tok, offered_tools(), format="hermes", tool_choice="required", thinking="open")
    ids, _ = sample(open_g, 80, rng, special_rate=0.0)
    assert tok.convert_tokens_to_ids("<think>") not in ids
    assert open_g.parse(ids).tool_calls


def test_kimi_call_indices_count_calls():
    tok = load_tokenizer("kimi-k2")
    g = compile_tools(tok, offered_tools(), format="kimi_k2", tool_choice="required")
    rng = np.random.default_rng(2)
    seen = 0
    budget, n, rate = (400, 12, 0.6) if FULL else (150, 6, 0.9)
    for _ in range(n):
        ids, _ = sample(g, budget, rng, special_rate=rate)
        calls = g.parse(ids).tool_calls
        assert [c["id"].rsplit(":", 1)[1] for c in calls] == [str(i) for i in range(len(calls))]
        seen = max(seen, len(calls))
    assert seen >= 2


def test_special_tokens_only_as_tokens():
    """`<tool_call>` spelled with ordinary tokens is never allowed; thinking cannot hold it either."""
    tok = load_tokenizer("qwen3")
    g = compile_tools(tok, offered_tools(), format="hermes", tool_choice="required")
    state = g.initial_state
    lt = tok.encode("<", add_special_tokens=False)[0]
    assert g.step(state, lt, 100) is None
    think = tok.convert_tokens_to_ids("<think>")
    inside = g.step(state, think, 100)
    assert g.step(inside, tok.convert_tokens_to_ids("<tool_call>"), 99) is None
    assert g.step(inside, tok.convert_tokens_to_ids("<|im_end|>"), 99) is None


def test_streaming_deltas_add_up_to_the_parse():
    """Every family: a call's header (name) comes first, then argument fragments as they grow;
    put together they are exactly the parse of the whole output."""
    rng = np.random.default_rng(9)
    fragments = 0
    for family in TOKENIZER_OF:
        tok = tokenizer_for(family)
        g = compile_tools(tok, offered_tools(family), format=family)
        for _ in range(4):
            ids, _ = sample(g, 120, rng, special_rate=0.5)
            stream = g.stream_parser()
            deltas = [d for t in ids for d in stream.feed([t])]
            whole = g.parse(ids)
            got = accumulate_deltas(deltas)
            assert got["content"] == whole.content and got["reasoning_content"] == whole.reasoning, family
            assert [(c["function"]["name"], c["function"]["arguments"]) for c in got["tool_calls"]] == \
                   [(c["function"]["name"], c["function"]["arguments"]) for c in whole.tool_calls], family
            heads = [c for d in deltas for c in d.get("tool_calls", []) if "id" in c]
            assert [c["index"] for c in heads] == list(range(len(whole.tool_calls)))
            assert all(c["function"]["arguments"] == "" for c in heads)
            fragments += sum(1 for d in deltas for c in d.get("tool_calls", []) if "id" not in c)
    assert fragments > 3 * len(TOKENIZER_OF)


def test_bad_requests_fail_before_generation():
    tok = load_tokenizer("qwen3")
    tools = offered_tools()
    with pytest.raises(SchemaError, match="#0 has no name"):
        compile_tools(tok, [{"type": "function", "function": {"parameters": {"type": "object"}}}])
    with pytest.raises(SchemaError, match="parameters must be an object"):
        compile_tools(tok, [{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}])
    with pytest.raises(SchemaError, match="parameters must be an object"):
        compile_tools(tok, [{"type": "function", "function": {"name": "f", "parameters": {"type": "dict"}}}])
    with pytest.raises(RequestError, match="'nope', which is not among the offered"):
        compile_tools(tok, tools, tool_choice={"type": "function", "function": {"name": "nope"}})
    with pytest.raises(TokenizerError, match="kimi_k2.*special tokens"):
        compile_tools(tok, tools, format="kimi_k2")
    with pytest.raises(SchemaError, match="offered twice"):
        compile_tools(tok, tools + tools[:1])
    with pytest.raises(SchemaError, match="minimum"):
        compile_tools(tok, [{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"x": {"type": "integer", "minimum": "zero"}}}}}])
    g = compile_tools(tok, tools, tool_choice="required")
    with pytest.raises(BudgetError, match="shortest valid turn"):
        g.matcher(g.min_tokens - 1)


def test_compiled_once_and_per_tool():
    tok = load_tokenizer("qwen3")
    tools = offered_tools()
    fresh = {"type": "function", "function": {"name": "only_in_this_test", "parameters": {
        "type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}}}
    a = compile_tools(tok, tools[:3], format="hermes", lazy=False)
    assert compile_tools(tok, tools[:3], format="hermes", lazy=False) is a
    before = set(AUTOMATA.keys())
    b = compile_tools(tok, tools[:3] + [fresh], format="hermes", lazy=False)
    assert b is not a
    # the fourth tool's one argument piece is new; the outer automaton and the others are reused
    assert len(set(AUTOMATA.keys()) - before) == 1
    # lazily, a new tool's arguments compile when the model first calls it, not before
    other = {"type": "function", "function": {"name": "lazy_one", "parameters": {
        "type": "object", "properties": {"m": {"type": "integer"}}, "required": ["m"]}}}
    lazy = compile_tools(tok, tools[:3] + [other], format="hermes", tool_choice={"type": "function", "function": {"name": "lazy_one"}})
    args = [automaton_key(p.text, lazy.vocab, lazy=True) for p in lazy.calls[0].pieces if not p.literal]
    assert len(args) == 1 and args[0] not in AUTOMATA
    bound = lazy.min_tokens
    ids = tok.encode('<tool_call>\n{"name": "lazy_one", "arguments": {"m": 7}}\n</tool_call>', add_special_tokens=False)
    assert lazy.is_final(lazy.walk(ids))
    assert args[0] in AUTOMATA
    # budgets of a lazy grammar count arguments by their byte bound, compiled or not (so a request
    # never depends on what earlier ones called); it is never below the compiled arguments' bound
    assert lazy.min_tokens == bound
    eager = compile_tools(tok, tools[:3] + [other], format="hermes", lazy=False,
                          tool_choice={"type": "function", "function": {"name": "lazy_one"}})
    assert eager.min_tokens <= bound


NATURAL_CALL = ("math.hypot", {"x": 3, "y": 4})
NATURAL = {
    "mistral_args": '[TOOL_CALLS]calculate_triangle_area[ARGS]{"base": 3, "height": 4}',
    "hermes": '<tool_call>\n{"name": "math.hypot", "arguments": {"x": 3, "y": 4}}\n</tool_call>',
    "qwen3_coder": "<tool_call>\n<function=math.hypot>\n<parameter=x>\n3\n</parameter>\n<parameter=y>\n4\n"
                   "</parameter>\n</function>\n</tool_call>",
    "kimi_k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.math.hypot:0<|tool_call_argument_begin|>'
               '{"x": 3, "y": 4}<|tool_call_end|><|tool_calls_section_end|>',
    "glm47": "<tool_call>math.hypot<arg_key>x</arg_key><arg_value>3</arg_value><arg_key>y</arg_key>"
             "<arg_value>4</arg_value></tool_call>",
    "glm45": "<tool_call>math.hypot\n<arg_key>x</arg_key>\n<arg_value>3</arg_value>\n<arg_key>y</arg_key>\n"
             "<arg_value>4</arg_value>\n</tool_call>",
    "harmony": '<|channel|>commentary to=functions.math.hypot <|constrain|>json<|message|>{"x": 3, "y": 4}<|call|>',
    "llama3_json": '{"name": "math.hypot", "parameters": {"x": 3, "y": 4}}',
    "mistral": '[TOOL_CALLS] [{"name": "math.hypot", "arguments": {"x": 3, "y": 4}}]',
}


@pytest.mark.parametrize("family", FORMATS)
def test_the_tokenizers_own_spelling_is_allowed(family):
    """The call as the tokenizer itself splits it (tokens such as ' {"' that straddle the tool name
    and its arguments included) is allowed, with lazily compiled arguments."""
    tok = tokenizer_for(family)
    g = compile_tools(tok, offered_tools(family), format=family)
    ids = tok.encode(NATURAL[family], add_special_tokens=False)
    state = g.walk(ids)
    assert state is not None and g.is_final(state)
    call = g.parse(ids).tool_calls[0]["function"]
    want = ("calculate_triangle_area", {"base": 3, "height": 4}) if family == "mistral_args" else NATURAL_CALL
    assert (call["name"], json.loads(call["arguments"])) == want


def test_property_order_is_the_schemas_own():
    """Two schemas that differ only in property order are different requests (regression)."""
    tok = load_tokenizer("qwen3")

    def tool(order):
        return [{"type": "function", "function": {"name": "note", "parameters": {
            "type": "object", "properties": {k: {"type": "string"} for k in order}, "required": list(order)}}}]

    for order in (("title", "body"), ("body", "title")):
        g = compile_tools(tok, tool(order), format="hermes")
        text = '<tool_call>\n{"name": "note", "arguments": {"%s": "a", "%s": "b"}}\n</tool_call>' % order
        assert g.is_final(g.walk(tok.encode(text, add_special_tokens=False)))
    from engine import compile_json_schema

    a = compile_json_schema(tok, {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}}})
    b = compile_json_schema(tok, {"type": "object", "properties": {"y": {"type": "integer"}, "x": {"type": "integer"}}})
    assert a is not b and a.regex != b.regex


def _masked(deltas):
    """Deltas with the fresh call ids blanked (each parser makes its own)."""
    return [json.loads(re.sub(r'"call_[0-9a-f]+"', '"call_"', json.dumps(d))) for d in deltas]


@pytest.mark.parametrize("family", FORMATS)
def test_incremental_stream_equals_the_reference_reading(family):
    """The incremental stream parser sends exactly the deltas of re-reading the whole output at
    every token (its reference path), on random outputs and on a long reasoning turn."""
    from engine.tools import StreamParser

    tok = tokenizer_for(family)
    g = compile_tools(tok, offered_tools(family), format=family)
    rng = np.random.default_rng(13)
    outputs = [sample(g, 150, rng, special_rate=0.5)[0] for _ in range(3)]
    prose = sample(compile_tools(tok, offered_tools(family), format=family, tool_choice="none"), 300, rng,
                   special_rate=0.0)[0]  # a long answer in free text
    outputs.append(prose)
    if family in THINKS:
        think = compile_tools(tok, offered_tools(family), format=family, thinking=True, tool_choice="required")
        outputs.append(sample(think, 300, rng, special_rate=0.0)[0])
    for ids in outputs:
        fast, slow = g.stream_parser(), StreamParser(g.parser(), incremental=False)
        got = [d for t in ids for d in fast.feed([t])]
        want = [d for t in ids for d in slow.feed([t])]
        assert _masked(got) == _masked(want)
        if ids is prose and family != "llama3_json":
            # free text that only a special token can end is extended without re-reading
            # (llama3_json's calls begin with ordinary text, so there every token is re-read)
            assert fast.rereads <= len(ids) // 10 + 3, (fast.rereads, len(ids))

@pytest.mark.parametrize("family", ["hermes", "glm47", "harmony", "kimi_k2"])
def test_free_text_stream_splits_reasoning_at_any_chunking(family):
    """FreeTextStream gives the same reasoning and content however the text is cut into feeds,
    and equals one feed of the whole text; a family without reasoning gives content only."""
    from engine.tools import FreeTextStream

    markers = load_format(family).reasoning_markers()
    opener, closer = markers or ("", "")
    texts = [f"{opener}\nthinking it over \n{closer}\n\nthe answer ", f"{opener}cut off here", "plain text",
             f"text {opener} later", f" {opener}not at the start{closer}"]
    rng = np.random.default_rng(0)
    for text in texts:
        whole = FreeTextStream(markers).feed(text, final=True)
        want = {k: "".join(d.get(k, "") for d in whole) for k in ("reasoning_content", "content")}
        if markers is None or not text.startswith(opener):
            assert want == {"reasoning_content": "", "content": text}
        for _ in range(30):
            s, got, i = FreeTextStream(markers), [], 0
            while i < len(text):
                j = i + int(rng.integers(1, 6))
                got += s.feed(text[i:j])
                i = j
            got += s.feed("", final=True)
            assert {k: "".join(d.get(k, "") for d in got) for k in want} == want
    if markers:
        got = FreeTextStream(markers).feed(texts[0], final=True)
        assert got == [{"reasoning_content": "\nthinking it over \n"}, {"content": "\n\nthe answer "}]


WRITE_FILE = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "text": {"type": "string"}},
    "required": ["path", "text"]}}}]


def streamed_both_ways(g, ids):
    """``ids`` (a valid turn) through the incremental stream parser and the reference one: the
    incremental parser and its deltas, after checking the two sent the same."""
    from engine.tools import StreamParser

    state = g.walk(ids, 10_000)
    assert state is not None and g.is_final(state), "the text is a valid call"
    fast, slow = g.stream_parser(), StreamParser(g.parser(), incremental=False)
    got = [d for t in ids for d in fast.feed([t])]
    want = [d for t in ids for d in slow.feed([t])]
    assert _masked(got) == _masked(want)
    return fast, got


def test_long_arguments_stream_without_rereading():
    """A call whose JSON arguments run long: the deltas equal the reference reading, and the
    arguments' tokens are sent as they come without re-reading the output (flat per token)."""
    tok = load_tokenizer("qwen3")
    g = compile_tools(tok, WRITE_FILE, format="hermes")
    body = "def f(x):\\n    return {\\\"a\\\": [x, 2]}  # \\\"quoted\\\" braces } ] and more\\n" * 40
    text = ('<tool_call>\n{"name": "write_file", "arguments": {"path": "a.py", "text": "' + body + '"}}\n</tool_call>')
    ids = tok.encode(text, add_special_tokens=False)
    fast, got = streamed_both_ways(g, ids)
    assert json.loads(accumulate_deltas(got)["tool_calls"][0]["function"]["arguments"])["text"].count("quoted") == 40
    assert fast.rereads < len(ids) // 20, (fast.rereads, len(ids))


XML_CALLS = {  # a write_file call whose text parameter is BODY, in each XML-parameter format
    "qwen3_coder": "<tool_call>\n<function=write_file>\n<parameter=path>\na.py\n</parameter>\n"
                   "<parameter=text>\n{body}\n</parameter>\n</function>\n</tool_call>",
    "glm47": "<tool_call>write_file<arg_key>path</arg_key><arg_value>a.py</arg_value>"
             "<arg_key>text</arg_key><arg_value>{body}</arg_value></tool_call>",
    "glm45": "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>a.py</arg_value>\n"
             "<arg_key>text</arg_key>\n<arg_value>{body}</arg_value>\n</tool_call>",
}


@pytest.mark.parametrize("family", sorted(XML_CALLS))
def test_long_xml_parameter_values_stream_as_they_grow(family):
    """A call whose raw XML parameter value runs long (qwen3_coder, GLM): the deltas equal the
    reference reading; the value is sent in fragments as its tokens come (not whole once it
    closes), each fragment a piece of the JSON string, without re-reading the output, also when
    the value holds the closer's first character ('<' in qwen3_coder) or ends in newlines."""
    tok = load_tokenizer(TOKENIZER_OF[family])
    g = compile_tools(tok, WRITE_FILE, format=family)
    plain = "def f(x):\n    return {'a': [x, 2]}  # braces } ] and \"quotes\"\n" * 40
    for body in (plain, "if a <b: pass\n" + plain, plain + "\n\n\nend"):
        ids = tok.encode(XML_CALLS[family].format(body=body.strip()), add_special_tokens=False)
        fast, got = streamed_both_ways(g, ids)
        arguments = json.loads(accumulate_deltas(got)["tool_calls"][0]["function"]["arguments"])
        assert arguments == {"path": "a.py", "text": body.strip()}
        fragments = [c["function"]["arguments"] for d in got for c in d["tool_calls"] if "id" not in c]
        body_tokens = len(tok.encode(body.strip(), add_special_tokens=False))
        assert len(fragments) > body_tokens // 2, (len(fragments), body_tokens)
        assert max(map(len, fragments)) < 40, max(fragments, key=len)
        assert fast.rereads < len(ids) // 20, (fast.rereads, len(ids))


FREE_TOOL = {"type": "function", "function": {"name": "store", "description": "Store any JSON payload.", "parameters": {
    "type": "object", "properties": {"payload": {}, "meta": {"type": "object"}, "tags": {"type": "array"}},
    "required": ["payload"]}}}
DEEP = {"payload": [[[[[{"k": [1, {"z": None}]}]]]]], "meta": {"a": {"b": {"c": {"d": True}}}}}
_P, _M = '[[[[[{"k": [1, {"z": null}]}]]]]]', '{"a": {"b": {"c": {"d": true}}}}'
DEEP_CALL = {
    "mistral_args": '[TOOL_CALLS]store[ARGS]{"payload": %s, "meta": %s}' % (_P, _M),
    "hermes": '<tool_call>\n{"name": "store", "arguments": {"payload": %s, "meta": %s}}\n</tool_call>' % (_P, _M),
    # Qwen3-Coder's parsers read an untyped parameter as text (see grammars/qwen3_coder.lark)
    "qwen3_coder": "<tool_call>\n<function=store>\n<parameter=payload>\n%s\n</parameter>\n<parameter=meta>\n%s\n"
                   "</parameter>\n</function>\n</tool_call>" % ('text, not [JSON]: {"x": 1}', _M),
    "kimi_k2": '<|tool_calls_section_begin|><|tool_call_begin|>functions.store:0<|tool_call_argument_begin|>'
               '{"payload": %s, "meta": %s}<|tool_call_end|><|tool_calls_section_end|>' % (_P, _M),
    "glm47": "<tool_call>store<arg_key>payload</arg_key><arg_value>%s</arg_value><arg_key>meta</arg_key>"
             "<arg_value>%s</arg_value></tool_call>" % (_P, _M),
    "glm45": "<tool_call>store\n<arg_key>payload</arg_key>\n<arg_value>%s</arg_value>\n<arg_key>meta</arg_key>\n"
             "<arg_value>%s</arg_value>\n</tool_call>" % (_P, _M),
    "harmony": '<|channel|>commentary to=functions.store <|constrain|>json<|message|>{"payload": %s, "meta": %s}<|call|>'
               % (_P, _M),
    "llama3_json": '{"name": "store", "parameters": {"payload": %s, "meta": %s}}' % (_P, _M),
    "mistral": '[TOOL_CALLS] [{"name": "store", "arguments": {"payload": %s, "meta": %s}}]' % (_P, _M),
}


@pytest.mark.parametrize("family", FORMATS)
def test_free_parameters_are_linked_and_nest_at_any_depth(family):
    """Untyped parameters (``{}``, a bare object or array) make the arguments a linked piece: a
    value nested deeper than max_depth (3) is allowed and read back by our parser and mlx-lm's;
    random calls at every budget from the minimum up close valid; the eager grammar's shortest
    call is within the lazy one's bound."""
    tok = tokenizer_for(family)
    tools = offered_tools(family)[:1] + [FREE_TOOL]
    g = compile_tools(tok, tools, format=family, tool_choice={"type": "function", "function": {"name": "store"}})
    args = [p for p in g.calls[0].pieces if not p.literal]
    assert args and all(p.definitions for p in args)
    ids = tok.encode(DEEP_CALL[family], add_special_tokens=False)
    state = g.walk(ids)
    assert state is not None and g.is_final(state)
    parsed = check_output(g, family, ids, tools, {"type": "function", "function": {"name": "store"}}, True, None)
    want = dict(DEEP, payload='text, not [JSON]: {"x": 1}') if family == "qwen3_coder" else DEEP
    if family == "qwen3_coder":  # JSON there would be read as an array by mlx-lm, as text by vLLM
        json_payload = DEEP_CALL[family].replace('text, not [JSON]: {"x": 1}', _P)
        assert g.walk(tok.encode(json_payload, add_special_tokens=False)) is None
    assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == [want]
    eager = compile_tools(tok, tools, format=family, tool_choice="required", lazy=False)
    lazy = compile_tools(tok, tools, format=family, tool_choice="required")
    assert eager.min_tokens <= lazy.min_tokens
    rng = np.random.default_rng(5)
    called = 0
    outputs = [(g, tok.encode(DEEP_CALL[family], add_special_tokens=False))]
    for budget in range(lazy.min_tokens, lazy.min_tokens + scale(16, 40)):
        ids, _ = sample(lazy, budget, rng, special_rate=0.0)
        state = lazy.walk(ids, budget)
        assert state is not None and lazy.is_final(state)
        parsed = check_output(lazy, family, ids, tools, "required", True, None)
        called += any(c["function"]["name"] == "store" for c in parsed.tool_calls)
        outputs.append((lazy, ids))
    assert called
    # streamed, the linked arguments come out as the whole output's parse, as re-reading gives them
    from engine.tools import StreamParser

    for grammar, ids in outputs:
        fast, slow = grammar.stream_parser(), StreamParser(grammar.parser(), incremental=False)
        got = [d for t in ids for d in fast.feed([t])]
        assert _masked(got) == _masked([d for t in ids for d in slow.feed([t])])
        assert [(c["function"]["name"], c["function"]["arguments"]) for c in accumulate_deltas(got)["tool_calls"]] \
            == [(c["function"]["name"], c["function"]["arguments"]) for c in grammar.parse(ids).tool_calls]


TREE_TOOL = {"type": "function", "function": {"name": "plant", "parameters": {
    "type": "object", "properties": {"root": {"$ref": "#/$defs/node"}}, "required": ["root"],
    "$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string", "maxLength": 3},
        "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2}},
        "required": ["name"], "additionalProperties": False}}}}}


@pytest.mark.parametrize("family", ["hermes", "qwen3_coder"])
def test_recursive_parameters_are_linked_and_nest_past_max_depth(family):
    """A recursive $ref in a tool's parameters (written out, cut at max_depth 3) links: a tree
    six levels deep is allowed and read back; random calls at every budget close valid."""
    tok = tokenizer_for(family)
    tools = [TREE_TOOL]
    g = compile_tools(tok, tools, format=family, tool_choice="required")
    assert all(p.definitions for p in g.calls[0].pieces if not p.literal)
    deep = {"name": "a"}
    for k in range(5):
        deep = {"name": "b" * (k % 3), "kids": [deep]}
    value = json.dumps(deep)
    text = ('<tool_call>\n{"name": "plant", "arguments": {"root": %s}}\n</tool_call>' % value if family == "hermes" else
            "<tool_call>\n<function=plant>\n<parameter=root>\n%s\n</parameter>\n</function>\n</tool_call>" % value)
    ids = tok.encode(text, add_special_tokens=False)
    state = g.walk(ids)
    assert state is not None and g.is_final(state)
    parsed = check_output(g, family, ids, tools, "required", True, None)
    assert [json.loads(c["function"]["arguments"]) for c in parsed.tool_calls] == [{"root": deep}]
    rng = np.random.default_rng(8)
    for budget in range(g.min_tokens, g.min_tokens + scale(12, 30)):
        ids, _ = sample(g, budget, rng, special_rate=0.0)
        state = g.walk(ids, budget)
        assert state is not None and g.is_final(state)
        assert check_output(g, family, ids, tools, "required", True, None).tool_calls
