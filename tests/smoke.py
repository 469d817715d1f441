"""A self-contained run of the installed package: a small byte-level tokenizer trained here, a
JSON schema and a tool list compiled against it, a walk through a matcher, a parse.

CI runs it under each supported Python (``python tests/smoke.py``); tests/test_packaging.py runs
it under the current one. Prints one line and exits 0 when everything holds.
"""

import json
import sys
import tempfile

import mlx.core as mx


def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<|im_end|>", "<tool_call>", "</tool_call>", "<think>", "</think>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(['{"city": "Paris", "days": 3}', "The weather in Paris is mild."] * 20, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>")


def main() -> int:
    import engine

    tok = tokenizer()
    schema = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8},
                                               "days": {"type": "integer", "minimum": 1, "maximum": 7}},
              "required": ["city", "days"]}
    with tempfile.TemporaryDirectory() as cache:
        import os

        os.environ["TOOLGATE_CACHE_DIR"] = cache
        g = engine.compile_json_schema(tok, schema)
        text = '{"city": "Paris", "days": 3}'
        ids = tok.encode(text, add_special_tokens=False)
        m = g.matcher(len(ids) + 5)
        prompt = [0]
        for n in range(len(ids) + 1):
            row = m(mx.array(prompt + ids[:n]), mx.zeros((1, g.vocab.size)))
            if n < len(ids):
                assert row[0, ids[n]].item() == 0, f"token {n} of {text!r} refused"
        assert m.accepting and g.validate(text)[1] == []
        tools = [{"type": "function", "function": {"name": "get_weather", "parameters": schema}}]
        tg = engine.compile_tools(tok, tools, format="hermes", tool_choice="required")
        call = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>'
        cids = tok.encode(call, add_special_tokens=False)
        assert tg.is_final(tg.walk(cids))
        parsed = tg.parse(cids).tool_calls[0]["function"]
        assert json.loads(parsed["arguments"]) == {"city": "Oslo", "days": 2}
        engine.automata.store.flush()  # the disk cache's writes end before its folder goes
    print(f"smoke ok on Python {sys.version.split()[0]}: schema min_tokens={g.min_tokens}, tools min_tokens={tg.min_tokens}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
