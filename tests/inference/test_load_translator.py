"""`load_translator`: one call opens a run directory or an export; its translations are exactly
the `translate` command's for the same path and options, per-call options work on both, and the
run and its export agree."""

import json
import shutil

import numpy as np
import pytest

import keras_transformer as kt
import keras_transformer.inference
from keras_transformer.cli import main
from keras_transformer.export import export_run
from keras_transformer.inference.defaults import DEFAULT_ALPHA, DEFAULT_BEAM_WIDTH
from keras_transformer.inference.loading import (
    ExportTranslator,
    RunTranslator,
    load_translator,
)
from keras_transformer.model_card import read_model_card
from keras_transformer.run_dir import RunPaths, load_run, read_run_info

EXPORTED_BEAM = 2


@pytest.fixture(scope="module")
def run(trained_run_dir):
    return load_run(trained_run_dir, compile=False)


@pytest.fixture(scope="module")
def sentences(run):
    """Two training sentences (learned) and three validation ones (numbers never seen), of
    different lengths, so that batches hold padding."""
    with open(run.settings.source_file, encoding="utf-8") as lines:
        learned = [next(lines).strip() for _ in range(2)]
    with open(run.settings.val_source_file, encoding="utf-8") as lines:
        unseen = [next(lines).strip() for _ in range(3)]
    return learned + unseen + ["We need ninety five chairs and forty one tables."]


@pytest.fixture(scope="module")
def base(trained_run_dir, tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "translator"
    export_run(trained_run_dir, base, beam_width=EXPORTED_BEAM)
    return base


def cli_translations(capsys, path, options, sentences) -> list[str]:
    capsys.readouterr()
    status = main(["translate", "--model", str(path), *options, *sentences])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    return captured.out.splitlines()


@pytest.mark.parametrize("where", ["run", "base", "version"])
@pytest.mark.parametrize("options", [
    {}, {"beam_width": 1}, {"beam_width": 3, "alpha": 1.0},
], ids=["default", "greedy", "beam3-alpha1"])
def test_translations_are_the_commands(where, options, trained_run_dir, base, sentences, capsys):
    path = {"run": trained_run_dir, "base": base, "version": base / "1"}[where]
    flags = [f"--{'beam' if name == 'beam_width' else name}={value}"
             for name, value in options.items()]
    translator = load_translator(path, **options)
    assert isinstance(translator, RunTranslator if where == "run" else ExportTranslator)
    assert translator.translate(sentences) == cli_translations(capsys, path, flags, sentences)


def test_greedy_translations_match_an_uncached_reference(
    trained_run_dir, base, run, sentences, uncached_greedy
):
    reference = uncached_greedy(run, sentences)
    assert load_translator(trained_run_dir, beam_width=1).translate(sentences) == reference
    assert load_translator(base).translate(sentences, beam_width=1) == reference
    # The demo model learned its training sentences.
    with open(run.settings.target_file, encoding="utf-8") as lines:
        assert reference[:2] == [next(lines).strip() for _ in range(2)]


def test_per_call_options_equal_constructor_options_and_run_equals_export(
    trained_run_dir, base, sentences
):
    from_run, from_export = load_translator(trained_run_dir), load_translator(base)
    for options in ({"beam_width": 3, "alpha": 1.0}, {"beam_width": 4, "alpha": 0.0}):
        expected = load_translator(trained_run_dir, **options).translate(sentences)
        assert from_run.translate(sentences, **options) == expected
        assert from_export.translate(sentences, **options) == expected
    # An export's own options are what it was exported with; a run's are the library defaults.
    assert from_export.translate(sentences) == from_run.translate(
        sentences, beam_width=EXPORTED_BEAM
    )
    assert from_run.translate(sentences) == from_run.translate(
        sentences, beam_width=DEFAULT_BEAM_WIDTH, alpha=DEFAULT_ALPHA
    )


def test_batches_do_not_change_the_translations(trained_run_dir, sentences):
    whole = load_translator(trained_run_dir, batch_size=64).translate(sentences)
    assert load_translator(trained_run_dir, batch_size=2).translate(sentences) == whole


def test_attention_of_a_run_and_of_its_export(trained_run_dir, base, sentences):
    from_run = load_translator(trained_run_dir, beam_width=EXPORTED_BEAM).attention(sentences[2])
    from_export = load_translator(base).attention(sentences[2])
    assert from_export.translation == from_run.translation
    assert from_export.source_pieces == from_run.source_pieces
    assert from_export.target_pieces == from_run.target_pieces
    assert from_run.target_pieces[-1] == "[END]"
    np.testing.assert_allclose(from_export.weights, from_run.weights, atol=1e-5)
    np.testing.assert_allclose(from_run.weights.sum(-1), 1.0, atol=1e-5)


def test_package_exports_it_lazily():
    assert kt.load_translator is load_translator
    assert keras_transformer.inference.load_translator is load_translator


def test_bad_paths_and_options_are_errors(tmp_path, trained_run_dir):
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        load_translator(tmp_path)
    with pytest.raises(ValueError, match="beam_width must be a positive integer, got 0"):
        load_translator(trained_run_dir, beam_width=0)
    with pytest.raises(ValueError, match="batch_size must be a positive integer, got 0"):
        load_translator(trained_run_dir, batch_size=0)


def test_the_decoding_a_run_chose_is_the_default_of_its_translator_and_export(
    trained_run_dir, sentences, tmp_path
):
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run_dir, run_dir)
    info = {**read_run_info(run_dir), "decoding": {"beam_width": 3, "alpha": 1.4}}
    RunPaths(run_dir).info.write_text(json.dumps(info), encoding="utf-8")
    assert load_run(run_dir, compile=False).decoding == {"beam_width": 3, "alpha": 1.4}
    assert load_translator(run_dir).translate(sentences) == load_translator(
        trained_run_dir, beam_width=3, alpha=1.4).translate(sentences)
    export_run(run_dir, tmp_path / "models")
    decoding = read_model_card(tmp_path / "models" / "1")["decoding"]
    assert (decoding["beam_width"], decoding["alpha"]) == (3, 1.4)
