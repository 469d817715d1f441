"""The embedded default model: the shipped files are the trainer's (manifest), the trainer learns,
and the shipped model answers the demo prompts with the fitting tool, greedily."""

import hashlib
import json

import pytest

import engine
from engine import default_model as dm


def test_shipped_files_match_their_manifest():
    folder = dm.shipped_model_dir()
    manifest = dm.read_manifest(folder)
    assert manifest is not None, "engine/embedded_model/MANIFEST.json is missing"
    assert manifest["version"] == dm.VERSION and manifest["settings"] == dm.SETTINGS
    shipped = {f.name for f in folder.iterdir() if f.name != "MANIFEST.json"}
    assert shipped == set(manifest["files"])
    for name, want in manifest["files"].items():
        data = (folder / name).read_bytes()
        assert len(data) == want["bytes"] and hashlib.sha256(data).hexdigest() == want["sha256"], name
    assert manifest["loss_last"] < manifest["loss_first"] / 5
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "qwen3" and manifest["parameters"] < 1_000_000


def test_the_shipped_model_is_the_one_loaded(monkeypatch):
    monkeypatch.delenv("TOOLGATE_DEFAULT_MODEL", raising=False)
    assert dm.default_model_dir() == dm.shipped_model_dir()
    monkeypatch.setattr(dm, "VERSION", dm.VERSION + 1)  # a newer trainer than the shipped files
    assert dm.default_model_dir() != dm.shipped_model_dir()


def test_a_short_training_run_learns(tmp_path):
    manifest = dm.train_default_model(tmp_path / "model", steps=26, dialogues=200, batch=4, progress=False)
    assert manifest["loss_last"] < manifest["loss_first"] / 3, manifest["loss_every_100"]
    for name, want in manifest["files"].items():
        assert (tmp_path / "model" / name).stat().st_size == want["bytes"]
    with pytest.raises(ValueError, match="unknown training settings"):
        dm.train_default_model(tmp_path / "other", epochs=3)


PROBES = {"What's the weather in Paris?": ("get_weather", {"city": "Paris"}),
          "What time is it in Tokyo?": ("get_time", None), "Convert 20 EUR to USD.": ("convert_currency", None),
          "Search the web for jazz history.": ("search_web", None), "Is it raining in London?": ("get_weather", None),
          "Find news about solar panels.": ("search_web", None), "Current time in Oslo?": ("get_time", None)}


def test_greedy_answers_pick_the_fitting_tool():
    model, tok = engine.load_default_model()
    hits = []
    for prompt, (tool, args) in PROBES.items():
        r = engine.generate(model, tok, [{"role": "user", "content": prompt}], tools=dm.DEMO_TOOLS, max_tokens=60)
        names = [c["function"]["name"] for c in r.tool_calls]
        hits.append(names[:1] == [tool])
        if args is not None:  # the README's demo: the right tool and the right argument
            assert names[:1] == [tool] and json.loads(r.tool_calls[0]["function"]["arguments"]) == args, r.tool_calls
    assert sum(hits) >= len(PROBES) - 1, hits


def test_the_build_command_trains_into_a_folder(tmp_path, capsys):
    from engine.cli import main

    assert main(["build-default-model", "--out", str(tmp_path / "m"), "--steps", "5", "--seed", "3",
                 "--dialogues", "200"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["settings"]["steps"] == 5 and report["settings"]["seed"] == 3
    assert report["settings"]["dialogues"] == 200
    assert dm.read_manifest(tmp_path / "m")["files"].keys() >= {"model.safetensors", "tokenizer.json", "config.json"}
