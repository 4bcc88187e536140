"""`train`: a tiny model learns the demo task; held-out validation; resuming is guarded."""

from __future__ import annotations

import shutil

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.run_dir import RunPaths, load_run
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.data import ParallelCorpus
from keras_transformer.training.trainer import dtype_policy, hold_out, pad_to_multiple, train


def greedy_translate(run, sentences: list[str], max_steps: int = 24) -> list[str]:
    """Uncached greedy decoding with the full model (independent of keras_transformer.inference)."""
    source = run.source_tokenizer.tokenize(tf.constant(sentences)).to_tensor().numpy()
    target = np.full((len(sentences), 1), run.target_tokenizer.start_id, dtype=np.int64)
    for _ in range(max_steps):
        logits = run.model({"source_tokens": source, "target_tokens": target}, training=False)
        target = np.concatenate([target, np.argmax(logits[:, -1], axis=-1)[:, None]], axis=1)
    ids = run.target_tokenizer.cut_at_end(tf.constant(target[:, 1:]))
    return [text.decode("utf-8") for text in run.target_tokenizer.detokenize(ids).numpy()]


def test_a_tiny_model_learns_the_demo_task(trained_run_dir):
    run = load_run(trained_run_dir, compile=False)
    assert run.history["loss"][-1] < run.history["loss"][0] / 5
    sources = open(run.settings.source_file, encoding="utf-8").read().splitlines()
    targets = open(run.settings.target_file, encoding="utf-8").read().splitlines()
    picked = list(range(0, len(sources), 9))  # 30 sentences spread over all numbers
    hypotheses = greedy_translate(run, [sources[i] for i in picked])
    exact = np.mean([hyp == targets[i] for hyp, i in zip(hypotheses, picked, strict=True)])
    assert exact >= 0.9, list(zip(hypotheses, [targets[i] for i in picked], strict=True))


def test_hold_out_is_seeded_disjoint_and_complete():
    corpus = ParallelCorpus([f"s{i}" for i in range(20)], [f"t{i}" for i in range(20)])
    rest, held = hold_out(corpus, 0.25, seed=1)
    assert (len(rest), len(held)) == (15, 5)
    assert sorted(rest.sources + held.sources) == sorted(corpus.sources)
    assert all(f"t{s[1:]}" == t for s, t in zip(held.sources, held.targets, strict=True))
    assert hold_out(corpus, 0.25, seed=1) == (rest, held)
    assert hold_out(corpus, 0.25, seed=2) != (rest, held)
    assert len(hold_out(corpus, 0.001, seed=0)[1]) == 1  # at least one pair
    with pytest.raises(ValueError, match="at least 2 sentence pairs"):
        hold_out(ParallelCorpus(["a"], ["b"]), 0.5, seed=0)


def test_resuming_with_other_settings_is_refused(trained_run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(trained_run_dir, copy)
    (copy / "backup").mkdir()  # as left by an interrupted run
    run = load_run(copy, compile=False)
    with pytest.raises(ValueError, match=r"config.json: cannot resume .*d_model: 64 -> 32"):
        train(run.config.replace(d_model=32), run.settings, copy, verbose=0)
    assert RunPaths(copy).model.stat().st_mtime == RunPaths(trained_run_dir).model.stat().st_mtime


def test_mixed_precision_policy_is_scoped():
    before = keras.config.dtype_policy().name
    with dtype_policy(mixed_precision=True):
        layer = keras.layers.Dense(2)
    gpu = bool(tf.config.list_logical_devices("GPU"))
    assert layer.dtype_policy.name == ("mixed_float16" if gpu else "mixed_bfloat16")
    assert layer.variable_dtype == "float32"
    assert keras.config.dtype_policy().name == before
    with dtype_policy(mixed_precision=False):
        assert keras.layers.Dense(2).dtype_policy.name == before


def test_pad_to_multiple_pads_every_batch_with_zeros():
    inputs = {"source_tokens": tf.ones((2, 5), tf.int64),
              "target_tokens": tf.ones((2, 9), tf.int64)}
    dataset = tf.data.Dataset.from_tensors((inputs, tf.ones((2, 9), tf.int64)))
    padded, labels = next(iter(pad_to_multiple(dataset, 8)))
    assert padded["source_tokens"].shape == (2, 8) and labels.shape == (2, 16)
    assert int(tf.reduce_sum(padded["target_tokens"])) == 18  # only zeros were added


def test_average_checkpoints_setting_averages_the_last_epochs(
    trained_run_dir, tiny_config, tmp_path, capsys
):
    data = load_run(trained_run_dir, compile=False).settings
    settings = TrainingSettings(
        source_file=data.source_file, target_file=data.target_file,
        val_source_file=data.val_source_file, val_target_file=data.val_target_file,
        epochs=3, steps_per_epoch=2, average_checkpoints=3,
    )
    train(tiny_config, settings, tmp_path / "run", verbose=0)
    assert "Average of the last 3 epochs: val_loss" in capsys.readouterr().out


@pytest.mark.slow
def test_jit_compiled_training_matches_the_graph_one(tiny_config, tmp_path):
    # XLA steps see batches padded to multiples of 8; the masks make that padding invisible, so
    # the same seed gives the same losses while they fall (up to XLA's float rounding, which
    # compounds over the 30 steps: 0.5% after the second epoch).
    histories = {}
    for jit_compile in (False, True):
        settings = TrainingSettings(
            epochs=2, steps_per_epoch=15, warmup_steps=20, vocab_size=200,
            jit_compile=jit_compile, seed=3,
        )
        keras.utils.set_random_seed(3)
        run = train(tiny_config.replace(max_length=32), settings, tmp_path / str(jit_compile),
                    verbose=0)
        histories[jit_compile] = run.history
    assert histories[False]["val_loss"][-1] < 0.8 * histories[False]["loss"][0]
    for key in ("loss", "val_loss"):
        np.testing.assert_allclose(histories[True][key], histories[False][key], rtol=1e-2)
