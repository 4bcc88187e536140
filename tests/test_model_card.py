"""The model card: an export writes it into assets.extra/ (JSON and Markdown); it says what the
run's files say, names the git commit of the code, and lists the signatures the SavedModel really
has; a run directory's card is built from its files; exports without a card still show their
signatures."""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import subprocess

import pytest
import tensorflow as tf

import keras_transformer
from keras_transformer import model_card
from keras_transformer.cli import main
from keras_transformer.inference.defaults import DEFAULT_ALPHA
from keras_transformer.run_dir import load_run, read_run_info


def git_head() -> str:
    return subprocess.run(
        ["git", "-C", str(model_card.SOURCE_ROOT), "rev-parse", "HEAD"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()


@pytest.fixture(scope="module")
def exported(trained_run_dir, tmp_path_factory):
    """`(version directory, heads)`: an export of the trained run, and `git rev-parse HEAD`
    before and after it (other commits may land meanwhile)."""
    base = tmp_path_factory.mktemp("models") / "translator"
    before = git_head()
    assert main(["export", str(trained_run_dir), "--base", str(base), "--beam", "2"]) == 0
    return base / "1", {before, git_head()}


@pytest.fixture(scope="module")
def card(exported):
    return json.loads((exported[0] / "assets.extra" / "model_card.json").read_text())


def line_count(path) -> int:
    with open(path, encoding="utf-8") as lines:
        return sum(1 for _ in lines)


def test_the_export_carries_the_card_as_json_and_markdown(exported, card):
    version, _ = exported
    assert model_card.read_model_card(version) == card
    assert model_card.read_model_card(version.parent) == card  # base directory: highest version
    markdown = (version / "assets.extra" / "model_card.md").read_text()
    assert markdown == model_card.render_markdown(card)
    for section in ("## Model", "## Data", "## Training", "## Validation (the kept model)",
                    "## Decoding (exported with)", "## Exported with", "## Serving signatures"):
        assert section in markdown


def test_the_card_says_what_the_run_directory_says(card, trained_run_dir):
    run = load_run(trained_run_dir, compile=False)
    info = read_run_info(trained_run_dir)
    assert card["name"] == trained_run_dir.name
    assert card["model"] == run.config.to_dict()
    assert card["vocabulary"] == {"source_size": run.source_tokenizer.vocab_size,
                                  "target_size": run.target_tokenizer.vocab_size,
                                  "shared": False}
    assert card["data"]["train"] == {
        "files": [run.settings.source_file, run.settings.target_file],
        "pairs": line_count(run.settings.source_file), "skipped_empty": 0, "skipped_too_long": 0,
    }
    assert card["data"]["validation"] == {
        "files": [run.settings.val_source_file, run.settings.val_target_file],
        "pairs": line_count(run.settings.val_source_file), "held_out_fraction": None,
    }
    assert card["training"] == {"epochs": 4, "steps": 200, "seconds": info["training_seconds"],
                                "settings": run.settings.to_dict()}
    assert card["validation"]["val_loss"] == pytest.approx(min(run.history["val_loss"]),
                                                           rel=1e-5)
    assert card["trained_with"] == info["software"]
    assert card["decoding"] == {"beam_width": 2, "alpha": DEFAULT_ALPHA, "max_length": None,
                                "xla_max_batch": 0}


def test_the_card_names_the_git_commit_and_the_version(card, exported):
    _, heads = exported
    software = card["exported_with"]
    assert software["git_commit"] in heads
    assert isinstance(software["git_dirty"], bool)
    versions = {importlib.metadata.version(name) for name in
                importlib.metadata.packages_distributions()["keras_transformer"]}
    assert software["keras_transformer"] in versions | {keras_transformer.__version__}
    assert software["tensorflow"] == tf.__version__
    assert software["git_commit"] in model_card.render_markdown(card)


def test_the_card_lists_the_saved_models_signatures(card, exported):
    loaded = tf.saved_model.load(str(exported[0]))

    def specs(structure) -> dict:
        return {name: {"dtype": spec.dtype.name, "shape": spec.shape.as_list()}
                for name, spec in structure.items()}

    assert set(card["signatures"]) == set(loaded.signatures) == {
        "serving_default", "translate_tokens", "translate_with_options", "attention"}
    for name, function in loaded.signatures.items():
        assert card["signatures"][name]["inputs"] == specs(function.structured_input_signature[1])
        assert card["signatures"][name]["outputs"] == specs(function.structured_outputs)
    assert card["signatures"]["serving_default"]["inputs"] == {
        "text": {"dtype": "string", "shape": [None]}}
    markdown = model_card.render_markdown(card)
    assert "| input | `beam_width` | int32 | () |" in markdown
    assert "| output | `tokens` | int64 | (None, None) |" in markdown


def test_a_run_card_without_run_info_has_what_the_run_knows(trained_run_dir, tmp_path):
    for name in ("config.json", "history.json"):  # a run trained before run_info.json existed
        shutil.copy(trained_run_dir / name, tmp_path / name)
    card = model_card.read_model_card(tmp_path)
    assert card["training"]["steps"] == 200 and card["training"]["seconds"] is None
    assert "validation" not in card and "trained_with" not in card
    assert "## Validation" not in model_card.render_markdown(card)


def test_an_export_without_a_card_still_shows_its_signatures(exported, tmp_path):
    copy = tmp_path / "translator" / "7"
    shutil.copytree(exported[0], copy)
    for name in ("model_card.json", "model_card.md"):
        (copy / "assets.extra" / name).unlink()
    card = model_card.read_model_card(copy.parent)
    assert card["note"].startswith("exported without a model card")
    assert card["signatures"] == model_card.saved_model_signatures(exported[0])


def test_no_commit_outside_the_top_of_a_work_tree(tmp_path, monkeypatch):
    source_root = model_card.SOURCE_ROOT
    monkeypatch.setattr(model_card, "SOURCE_ROOT", tmp_path)  # not a git work tree
    assert model_card.git_commit() == ("unknown", None)
    # Inside a work tree but below its top, as site-packages of a venv within a checkout.
    monkeypatch.setattr(model_card, "SOURCE_ROOT", source_root / "keras_transformer")
    assert model_card.git_commit() == ("unknown", None)


def test_not_a_model_is_an_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        model_card.read_model_card(tmp_path)
