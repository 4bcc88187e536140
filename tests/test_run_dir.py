"""`load_run` reads back everything a run directory holds, and names what is missing or bad."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

from keras_transformer.run_dir import RunPaths, load_run
from keras_transformer.training.accumulation import TokenWeightedSteps


# Bucketed data has no known length: Keras warns when `evaluate` finds its end.
@pytest.mark.filterwarnings("ignore:Your input ran out of data")
def test_load_run_reads_back_the_trained_run(
    trained_run_dir, trained_run_config, trained_run_settings
):
    run = load_run(trained_run_dir)
    assert run.directory == trained_run_dir
    assert run.config == trained_run_config.replace(
        source_vocab_size=run.source_tokenizer.vocab_size,
        target_vocab_size=run.target_tokenizer.vocab_size,
    )
    for key, value in trained_run_settings.items():
        assert getattr(run.settings, key) == value
    assert run.model.get_layer("logits").units == run.target_tokenizer.vocab_size
    assert run.history["epoch"] == list(range(1, trained_run_settings["epochs"] + 1))
    # The saved model is the best-validation one. Training logs the loss as a mean over real
    # target tokens (`TokenWeightedSteps`), so the model is evaluated the same way.
    best = int(np.argmin(run.history["val_loss"]))
    TokenWeightedSteps(run.model).install()
    val_logs = run.model.evaluate(_validation_data(run), verbose=0, return_dict=True)
    assert val_logs["loss"] == pytest.approx(run.history["val_loss"][best], rel=1e-4)


def _validation_data(run):
    from keras_transformer.text.data import make_dataset, read_parallel_files

    corpus = read_parallel_files(run.settings.val_source_file, run.settings.val_target_file)
    return make_dataset(
        corpus, run.source_tokenizer, run.target_tokenizer, shuffle=False,
        batch_size=run.settings.batch_size, max_length=run.config.max_length,
    )


@pytest.mark.parametrize(
    "remove, message",
    [
        ("config.json", "config.json: no such config file"),
        ("vocab", "vocab: missing vocabulary directory"),
        ("vocab/source/tokenizer.json", "tokenizer.json: missing tokenizer file"),
        ("model.keras", "model.keras: missing"),
    ],
)
def test_missing_files_are_named(trained_run_dir, tmp_path, remove, message):
    copy = tmp_path / "run"
    shutil.copytree(trained_run_dir, copy)
    target = copy / remove
    shutil.rmtree(target) if target.is_dir() else target.unlink()
    with pytest.raises(FileNotFoundError, match=message):
        load_run(copy)


def test_bad_files_are_named(trained_run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained_run_dir, copy)
    paths = RunPaths(copy)
    paths.model.write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="model.keras: cannot load the model"):
        load_run(copy)
    values = json.loads(paths.config.read_text())
    paths.config.write_text(json.dumps({**values, "d_model": -1}))
    with pytest.raises(ValueError, match=r"config.json: TransformerConfig.d_model"):
        load_run(copy)
    paths.config.write_text("{\n  oops")
    with pytest.raises(ValueError, match=r"config.json:2: invalid JSON"):
        load_run(copy)


def test_load_run_works_in_a_fresh_process(trained_run_dir):
    # The package imports lazily: nothing but `load_run` itself may have to register the layers,
    # loss, metric and schedule that `model.keras` names.
    script = ("import sys; from keras_transformer.run_dir import load_run; "
              "print(load_run(sys.argv[1]).model.name)")
    result = subprocess.run([sys.executable, "-c", script, str(trained_run_dir)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
