"""The embedded default model: a small tool-calling model the project trains for itself, offline.

The trainer writes a corpus of synthetic tool-use dialogues from templates, trains a byte-level
BPE tokenizer on it with the ``tokenizers`` library (Qwen-style chat template, ``<tool_call>`` and
``<think>`` tokens), and trains a small Qwen3-architecture MLX model on the assistant turns with a
fixed seed. Its output (tokenizer, weights, and a MANIFEST.json with the settings, the loss curve
and each file's size and hash) ships in the package (``engine/embedded_model``), so the first run
answers at once; it is rebuilt into the user's cache only when the shipped VERSION differs from
this module's. ``toolgate build-default-model`` re-runs the trainer.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

VERSION = 2
SETTINGS = {"steps": 2400, "batch": 8, "dialogues": 4000, "seed": 0, "vocab_size": 1024, "learning_rate": 3e-3}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>",
                  "<think>", "</think>", "<tool_response>", "</tool_response>"]

DEMO_TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Current weather for a city.",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. Paris"},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "get_time", "description": "Current local time in a time zone.",
        "parameters": {"type": "object", "properties": {
            "timezone": {"type": "string", "description": "IANA name, e.g. Europe/Paris"}},
            "required": ["timezone"]}}},
    {"type": "function", "function": {
        "name": "convert_currency", "description": "Convert an amount between currencies.",
        "parameters": {"type": "object", "properties": {
            "amount": {"type": "number"},
            "from": {"type": "string", "description": "ISO code, e.g. EUR"},
            "to": {"type": "string", "description": "ISO code, e.g. USD"}},
            "required": ["amount", "from", "to"]}}},
    {"type": "function", "function": {
        "name": "search_web", "description": "Search the web.",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}}, "required": ["query"]}}},
]

# Qwen-style: <|im_start|>/<|im_end|> turns, tools listed in the system turn (one line each, so
# training sequences stay short), calls as JSON inside <tool_call>, reasoning inside <think>.
CHAT_TEMPLATE = (
    "{% if tools %}<|im_start|>system{{ '\\n' }}"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}{{ '\\n\\n' }}{% endif %}"
    "# Tools{{ '\\n\\n' }}<tools>"
    "{% for tool in tools %}{{ '\\n' }}{{ tool.function.name }}({{ tool.function.parameters.properties | join(', ') }})"
    ": {{ tool.function.description }}{% endfor %}{{ '\\n' }}</tools>{{ '\\n\\n' }}"
    "Call a function with <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call>.<|im_end|>{{ '\\n' }}"
    "{% elif messages[0].role == 'system' %}<|im_start|>system{{ '\\n' }}{{ messages[0].content }}<|im_end|>{{ '\\n' }}"
    "{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'user' %}<|im_start|>user{{ '\\n' }}{{ message.content }}<|im_end|>{{ '\\n' }}"
    "{% elif message.role == 'assistant' %}<|im_start|>assistant{{ '\\n' }}"
    "{% if message.reasoning_content %}<think>{{ '\\n' }}{{ message.reasoning_content }}{{ '\\n' }}</think>{{ '\\n\\n' }}{% endif %}"
    "{% if message.content %}{{ message.content }}{% endif %}"
    "{% for call in message.tool_calls or [] %}"
    "{% if not loop.first or message.content %}{{ '\\n' }}{% endif %}"
    "<tool_call>{{ '\\n' }}{\"name\": \"{{ call.function.name }}\", \"arguments\": "
    "{% if call.function.arguments is string %}{{ call.function.arguments }}"
    "{% else %}{{ call.function.arguments | tojson }}{% endif %}}{{ '\\n' }}</tool_call>{% endfor %}"
    "<|im_end|>{{ '\\n' }}"
    "{% elif message.role == 'tool' %}<|im_start|>user{{ '\\n' }}<tool_response>{{ '\\n' }}{{ message.content }}"
    "{{ '\\n' }}</tool_response><|im_end|>{{ '\\n' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant{{ '\\n' }}"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>{{ '\\n\\n' }}</think>{{ '\\n\\n' }}{% endif %}"
    "{% endif %}"
)

CITIES = {"Paris": "Europe/Paris", "London": "Europe/London", "Tokyo": "Asia/Tokyo", "Berlin": "Europe/Berlin",
          "Madrid": "Europe/Madrid", "Rome": "Europe/Rome", "New York": "America/New_York",
          "Chicago": "America/Chicago", "Sydney": "Australia/Sydney", "Cairo": "Africa/Cairo",
          "Toronto": "America/Toronto", "Seoul": "Asia/Seoul", "Lima": "America/Lima", "Oslo": "Europe/Oslo",
          "Dublin": "Europe/Dublin", "Mumbai": "Asia/Kolkata", "Lisbon": "Europe/Lisbon",
          "Vienna": "Europe/Vienna", "Denver": "America/Denver", "Nairobi": "Africa/Nairobi"}
CURRENCIES = ["EUR", "USD", "GBP", "JPY", "CHF", "CAD", "AUD", "CNY"]
TOPICS = ["electric cars", "the Olympics", "Python tutorials", "healthy recipes", "the Mars rover",
          "jazz history", "solar panels", "chess openings", "climate news", "cheap flights to Rome"]


def _call(name: str, arguments: dict) -> dict:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _dialogue(rng: random.Random) -> tuple[list[dict], bool]:
    """One templated exchange: (messages, whether the tools are offered)."""
    city = rng.choice(list(CITIES))
    kind = rng.random()
    if kind < 0.3:
        unit = rng.choice([None, None, "celsius", "fahrenheit"])
        ask = rng.choice(["What's the weather in {c}?", "Is it raining in {c}?", "How warm is it in {c} today?",
                          "Weather in {c}, please.", "Tell me the weather for {c}."]).format(c=city)
        if unit:
            ask += f" Use {unit}."
        args = {"city": city, **({"unit": unit} if unit else {})}
        calls, why = [_call("get_weather", args)], f"The user wants the weather in {city}."
        reply = f"It is {rng.randint(-5, 35)} degrees and {rng.choice(['sunny', 'cloudy', 'rainy'])} in {city}."
    elif kind < 0.5:
        ask = rng.choice(["What time is it in {c}?", "Current time in {c}?", "Tell me the time in {c}."]).format(c=city)
        calls, why = [_call("get_time", {"timezone": CITIES[city]})], f"The user wants the local time in {city}."
        reply = f"It is {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} in {city}."
    elif kind < 0.65:
        amount = rng.choice([5, 10, 20, 50, 100, 250, 1000, 12.5, 99.99])
        a, b = rng.sample(CURRENCIES, 2)
        ask = rng.choice(["Convert {n} {a} to {b}.", "How much is {n} {a} in {b}?", "{n} {a} to {b}?"])
        ask = ask.format(n=amount, a=a, b=b)
        calls, why = [_call("convert_currency", {"amount": amount, "from": a, "to": b})], "A currency conversion."
        reply = f"{amount} {a} is about {round(amount * rng.uniform(0.5, 2), 2)} {b}."
    elif kind < 0.8:
        topic = rng.choice(TOPICS)
        ask = rng.choice(["Search the web for {t}.", "Find news about {t}.", "Look up {t}."]).format(t=topic)
        calls, why = [_call("search_web", {"query": topic})], f"A web search for {topic}."
        reply = f"Here is what I found about {topic}."
    elif kind < 0.9:
        other = rng.choice([c for c in CITIES if c != city])
        ask = f"What's the weather in {city} and in {other}?"
        calls = [_call("get_weather", {"city": city}), _call("get_weather", {"city": other})]
        why, reply = f"Two weather lookups: {city} and {other}.", f"Both {city} and {other} are mild today."
    else:
        ask, reply = rng.choice([("Hello!", "Hello! How can I help you today?"),
                                 ("Thanks!", "You are welcome."),
                                 ("Who are you?", "I am a small assistant that can call tools."),
                                 ("Tell me a joke.", "Why did the function return early? It had no arguments.")])
        calls, why = [], "No tool is needed."
    messages = [{"role": "user", "content": ask}]
    assistant: dict[str, Any] = {"role": "assistant", "content": "" if calls else reply}
    if rng.random() < 0.5:
        assistant["reasoning_content"] = why
    if calls:
        assistant["tool_calls"] = calls
    messages.append(assistant)
    if calls and rng.random() < 0.3:
        messages += [{"role": "tool", "content": json.dumps({"ok": True})}, {"role": "assistant", "content": reply}]
    return messages, bool(calls) or rng.random() < 0.5


def probe_prompts(n: int, seed: int = 1) -> list[tuple[str, list[str]]]:
    """``n`` user prompts from the training templates with a seed of their own: (prompt, the tool
    names a fitting answer calls, in order; empty when no tool fits)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages, _ = _dialogue(rng)
        calls = messages[1].get("tool_calls") or []
        out.append((messages[0]["content"], [c["function"]["name"] for c in calls]))
    return out


@functools.lru_cache(maxsize=1)
def _template() -> Any:
    """The chat template as transformers compiles it (the tokenizer does not exist yet)."""
    import jinja2

    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
    return env.from_string(CHAT_TEMPLATE)


def _render(messages: list[dict], tools: list | None) -> str:
    return _template().render(messages=messages, tools=tools, add_generation_prompt=False)


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` rendered training dialogues."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        messages, offered = _dialogue(rng)
        tools = rng.sample(DEMO_TOOLS, len(DEMO_TOOLS)) if offered else None
        out.append(_render(messages, tools))
    return out


def _train_tokenizer(texts: list[str], folder: Path, vocab_size: int) -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(texts, trainer)
    hf = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    hf.chat_template = CHAT_TEMPLATE
    hf.save_pretrained(str(folder))
    return hf


def _config(vocab_size: int) -> dict:
    return {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "intermediate_size": 192,
            "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "rms_norm_eps": 1e-6,
            "vocab_size": vocab_size, "max_position_embeddings": 2048, "rope_theta": 10000.0,
            "tie_word_embeddings": True, "torch_dtype": "float32"}


def _train(hf: Any, texts: list[str], config: dict, steps: int, batch: int, seed: int,
           learning_rate: float, progress: bool) -> tuple[Any, list[float]]:
    """Train on the assistant turns (the part a tool call comes from) with AdamW: (model, losses)."""
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    import numpy as np
    from mlx_lm.models import qwen3
    from tqdm import tqdm

    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(config))
    start = hf.convert_tokens_to_ids("<|im_start|>")
    rows = []
    for text in texts:
        ids = hf.encode(text, add_special_tokens=False)
        weight = np.zeros(len(ids), dtype=np.float32)
        inside = False
        for i, t in enumerate(ids):
            if t == start:
                inside = hf.decode(ids[i + 1:i + 3]).startswith("assistant")
            weight[i] = inside
        rows.append((ids, weight))

    def loss_fn(model, x, y, w):
        logits = model(x)
        ce = nn.losses.cross_entropy(logits, y, reduction="none")
        return (ce * w).sum() / w.sum()

    opt = optim.AdamW(learning_rate=optim.cosine_decay(learning_rate, steps, learning_rate / 10), weight_decay=0.01)
    step_fn = nn.value_and_grad(model, loss_fn)
    rng = np.random.default_rng(seed)
    losses = []
    bar = tqdm(range(steps), desc="training the default model", unit="step", file=sys.stderr, disable=not progress)
    for _ in bar:
        pick = rng.choice(len(rows), batch, replace=False)
        length = max(len(rows[i][0]) for i in pick)  # pad to this batch's longest dialogue only
        x = np.zeros((batch, length), dtype=np.int32)
        w = np.zeros((batch, length), dtype=np.float32)
        for b, i in enumerate(pick):
            ids, weight = rows[i]
            x[b, :len(ids)] = ids
            w[b, :len(ids)] = weight
        xs, ys, ws = mx.array(x[:, :-1]), mx.array(x[:, 1:]), mx.array(w[:, 1:])
        loss, grads = step_fn(model, xs, ys, ws)
        opt.update(model, grads)
        mx.eval(model.parameters(), opt.state, loss)
        losses.append(round(loss.item(), 4))
        bar.set_postfix(loss=f"{losses[-1]:.3f}", refresh=False)
    return model, losses


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_default_model(folder: str | Path, *, progress: bool = True, **settings: Any) -> dict:
    """Train the default model into ``folder`` (replaced whole) and return its manifest.
    ``settings`` override SETTINGS (steps, batch, dialogues, seed, vocab_size, learning_rate)."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    unknown = set(settings) - set(SETTINGS)
    if unknown:
        raise ValueError(f"unknown training settings {sorted(unknown)}; known: {sorted(SETTINGS)}")
    cfg = {**SETTINGS, **settings}
    out = Path(folder)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".building-"))
    t = time.perf_counter()
    try:
        texts = corpus(cfg["dialogues"], cfg["seed"])
        hf = _train_tokenizer(texts, tmp, vocab_size=cfg["vocab_size"])
        config = _config(len(hf))
        model, losses = _train(hf, texts, config, cfg["steps"], cfg["batch"], cfg["seed"], cfg["learning_rate"],
                               progress)
        mx.save_safetensors(str(tmp / "model.safetensors"), dict(tree_flatten(model.parameters())))
        (tmp / "config.json").write_text(json.dumps(config, indent=1))
        files = {f.name: {"bytes": f.stat().st_size, "sha256": _digest(f)} for f in sorted(tmp.iterdir())}
        manifest = {"version": VERSION, "settings": cfg, "files": files, "parameters": _count(model),
                    "loss_first": losses[0], "loss_last": sum(losses[-20:]) / len(losses[-20:]),
                    "loss_every_100": losses[::100], "train_seconds": round(time.perf_counter() - t, 1)}
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=1) + "\n")
        tmp.chmod(0o755)  # mkdtemp makes it private; the model is package data
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return manifest


def _count(model: Any) -> int:
    from mlx.utils import tree_flatten

    return sum(v.size for _, v in tree_flatten(model.parameters()))


def shipped_model_dir() -> Path:
    """The model shipped in the package (engine/embedded_model)."""
    return Path(str(resources.files("engine") / "embedded_model"))


def read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "MANIFEST.json").read_text())
    except (OSError, ValueError):
        return None


def default_model_dir() -> Path:
    """The folder the default model loads from: ``TOOLGATE_DEFAULT_MODEL`` if set, else the shipped
    model when its version is this module's, else a build in the user's cache."""
    value = os.environ.get("TOOLGATE_DEFAULT_MODEL")
    if value:
        return Path(value)
    shipped = shipped_model_dir()
    if (read_manifest(shipped) or {}).get("version") == VERSION:
        return shipped
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mlx-toolgate"
    return base / f"default-model-v{VERSION}"


def build_default_model() -> Path:
    """The default model's folder, trained there first if it holds no model of this VERSION."""
    out = default_model_dir()
    if (read_manifest(out) or {}).get("version") != VERSION:
        print(f"toolgate: training the default model in {out} (once; about 15 minutes on a 2-core CPU)",
              file=sys.stderr, flush=True)
        train_default_model(out)
    return out


def load_default_model():
    """(model, tokenizer) of the default model: the shipped one, or built once on a version mismatch."""
    import mlx_lm

    return mlx_lm.load(str(build_default_model()))
