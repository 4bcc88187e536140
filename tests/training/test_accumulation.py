"""Gradient accumulation: one update from N batches equals one update from their concatenation,
on one device and under MirroredStrategy over two logical CPUs, because every real target token
weighs the same whatever batch or replica it is in.

The two batches hold different numbers of rows, lengths and real tokens (6 and 15), so the mean of
the two batch means (what Keras' `gradient_accumulation_steps` and a per-replica mean compute)
gives a different update; a test checks that it does, so the comparison can fail. Plain SGD makes
the update proportional to the gradient (Adam's first step would hide a wrong scale).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.model import build_transformer
from keras_transformer.training.accumulation import (
    TokenWeightedSteps,
    group_batches,
    real_tokens,
)
from keras_transformer.training.distribution import patch_for_strategy
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy

REPO_ROOT = Path(__file__).resolve().parents[2]
CONFIG = TransformerConfig(
    source_vocab_size=20, target_vocab_size=20, num_encoder_layers=1, num_decoder_layers=1,
    d_model=16, num_heads=2, d_ff=32, dropout=0.0, max_length=16, label_smoothing=0.1,
)


def batch(source_lengths: list[int], target_lengths: list[int], seed: int):
    """A batch of random ids, each row padded (0) after its length."""
    rng = np.random.default_rng(seed)

    def ids(lengths):
        tokens = rng.integers(3, 20, size=(len(lengths), max(lengths)))
        return np.where(np.arange(max(lengths)) < np.array(lengths)[:, None], tokens, 0)

    target = ids(target_lengths)
    labels = np.where(target > 0, rng.integers(3, 20, size=target.shape), 0)
    return {"source_tokens": ids(source_lengths), "target_tokens": target}, labels


SMALL = batch([5, 3], [4, 2], seed=1)  # 6 real target tokens
LARGE = batch([7, 6, 2], [6, 5, 4], seed=2)  # 15


def join(arrays):
    """Row-wise concatenation, shorter rows zero-padded to the longest."""
    length = max(array.shape[1] for array in arrays)
    return np.concatenate([np.pad(array, [(0, 0), (0, length - array.shape[1])])
                           for array in arrays])


def concatenation(*batches):
    """The batches as one."""
    return (
        {name: join([inputs[name] for inputs, _ in batches])
         for name in ("source_tokens", "target_tokens")},
        join([labels for _, labels in batches]),
    )


def as_dataset(*batches) -> tf.data.Dataset:
    """The batches in order (they differ in shape, hence a generator)."""
    spec = ({"source_tokens": tf.TensorSpec([None, None], tf.int64),
             "target_tokens": tf.TensorSpec([None, None], tf.int64)},
            tf.TensorSpec([None, None], tf.int64))
    return tf.data.Dataset.from_generator(lambda: iter(batches), output_signature=spec)


@dataclasses.dataclass
class Update:
    deltas: list  # weight changes
    iterations: int  # optimizer iterations afterwards
    loss: float  # the logged loss
    steps: TokenWeightedSteps
    optimizer: keras.optimizers.Optimizer


def one_update(dataset, accumulate_steps, strategy=None, trim=True, policy=None) -> Update:
    """One `fit` step from the same initial weights (built under dtype `policy`)."""
    strategy = strategy or tf.distribute.get_strategy()
    previous_policy = keras.config.dtype_policy()
    with strategy.scope():
        keras.utils.set_random_seed(0)
        keras.config.set_dtype_policy(policy or previous_policy)
        try:
            model = build_transformer(CONFIG)
        finally:
            keras.config.set_dtype_policy(previous_policy)
        model.compile(optimizer=keras.optimizers.SGD(1.0),
                      loss=MaskedSparseCategoricalCrossentropy(label_smoothing=0.1),
                      metrics=[MaskedAccuracy()])
        steps = TokenWeightedSteps(model, accumulate_steps, trim=trim)
    steps.install()
    patch_for_strategy(model, strategy)
    before = model.get_weights()
    history = model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0, shuffle=False)
    return Update(
        deltas=[after - start for after, start in zip(model.get_weights(), before, strict=True)],
        iterations=int(model.optimizer.iterations.numpy()),
        loss=history.history["loss"][0],
        steps=steps,
        optimizer=model.optimizer,
    )


def largest_difference(deltas, reference) -> float:
    """Largest weight-change difference, relative to the largest reference change."""
    scale = max(float(np.abs(d).max()) for d in reference)
    return max(float(np.abs(a - b).max()) for a, b in zip(deltas, reference, strict=True)) / scale


def compare(strategy=None, replicas: int = 1) -> dict:
    """Accumulated update of (SMALL, LARGE) vs one device's update from their concatenation."""
    reference = one_update(as_dataset(concatenation(SMALL, LARGE)), 1)
    grouped = group_batches(as_dataset(SMALL, LARGE), 2, row_multiple=replicas)
    update = one_update(grouped, 2, strategy)
    return {
        "difference": largest_difference(update.deltas, reference.deltas),
        "iterations": update.iterations,
        "target_tokens": float(update.steps.target_tokens.result()),
        "source_tokens": float(update.steps.source_tokens.result()),
    }


def test_group_batches_pads_and_stacks_rows_first():
    grouped = next(iter(group_batches(as_dataset(SMALL, LARGE), 2, row_multiple=4)))
    inputs, labels = grouped
    assert inputs["source_tokens"].shape == (4, 2, 7)
    assert labels.shape == (4, 2, 6)
    np.testing.assert_array_equal(labels[:2, 0, :4], SMALL[1])
    np.testing.assert_array_equal(labels[:3, 1], LARGE[1])
    assert float(real_tokens(labels)) == 6 + 15  # padding only added


@pytest.mark.parametrize("trim", [True, False])
def test_accumulated_update_equals_the_concatenated_batch(trim):
    reference = one_update(as_dataset(concatenation(SMALL, LARGE)), 1)
    update = one_update(group_batches(as_dataset(SMALL, LARGE), 2), 2, trim=trim)
    assert largest_difference(update.deltas, reference.deltas) < 1e-5
    assert update.iterations == 1  # one optimizer update, not one per batch
    assert float(update.steps.target_tokens.result()) == 21
    assert float(update.steps.source_tokens.result()) == 8 + 15


def test_mean_of_batch_means_would_differ():
    # What a per-batch mean gives: the two batches' updates from the same start, averaged.
    reference = one_update(as_dataset(concatenation(SMALL, LARGE)), 1)
    small, large = (one_update(as_dataset(b), 1).deltas for b in (SMALL, LARGE))
    mean_of_means = [(a + b) / 2 for a, b in zip(small, large, strict=True)]
    assert largest_difference(mean_of_means, reference.deltas) > 0.05


def test_logged_loss_is_the_mean_over_real_tokens():
    small, large = (one_update(as_dataset(b), 1).loss for b in (SMALL, LARGE))
    update = one_update(group_batches(as_dataset(SMALL, LARGE), 2), 2)
    assert update.loss == pytest.approx((6 * small + 15 * large) / 21, rel=1e-5)


def test_accumulation_under_float16_loss_scaling():
    # mixed_float16 wraps the optimizer in a LossScaleOptimizer: the loss is scaled up before
    # the gradients and they are scaled down before the update, once per update.
    reference = one_update(as_dataset(concatenation(SMALL, LARGE)), 1, policy="mixed_float16")
    update = one_update(group_batches(as_dataset(SMALL, LARGE), 2), 2, policy="mixed_float16")
    assert isinstance(update.optimizer, keras.optimizers.LossScaleOptimizer)
    assert largest_difference(update.deltas, reference.deltas) < 1e-2  # float16 rounding


@pytest.mark.slow
def test_accumulation_under_mirrored_strategy_equals_one_device():
    # SMALL has 2 rows, LARGE 3: padded to 4 rows, each replica gets 2 of each batch, so one
    # replica's share of SMALL is padding only.
    script = textwrap.dedent(f"""
        import json, sys
        import tensorflow as tf
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_accumulation import compare
        from keras_transformer.training.distribution import make_strategy
        strategy = make_strategy("mirrored")
        print("RESULT", json.dumps({{"replicas": strategy.num_replicas_in_sync,
                                    **compare(strategy, replicas=2)}}))
    """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT "))
    outcome = json.loads(line.split(" ", 1)[1])
    assert outcome["replicas"] == 2
    assert outcome["difference"] < 1e-5
    assert outcome["iterations"] == 1
    assert outcome["target_tokens"] == 21  # summed over both replicas
