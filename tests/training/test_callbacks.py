"""Time budget, history / learning-curve and checkpoint-averaging callbacks."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training.callbacks import CheckpointAverage, HistoryWriter, TimeBudget


class StepCounter(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1


def fit_with(callback, epochs=2, steps=10):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    counter = StepCounter()
    x, y = np.ones((steps * 2, 3), "float32"), np.zeros((steps * 2, 1), "float32")
    history = model.fit(x, y, batch_size=2, epochs=epochs, callbacks=[callback, counter],
                        verbose=0)
    return counter.steps, history


def test_time_budget_stops_after_the_step_that_used_it_up(capsys):
    budget = TimeBudget(minutes=1e-9)
    steps, history = fit_with(budget)
    assert steps == 1
    assert len(history.history["loss"]) == 1  # the epoch is still closed (logged, validated)
    assert budget.stopped_at_epoch == 0
    assert "Time budget of 1e-09 min used up: stopping after epoch 1." in capsys.readouterr().out


def test_time_budget_leaves_short_runs_alone():
    budget = TimeBudget(minutes=10)
    steps, _ = fit_with(budget)
    assert steps == 20 and budget.stopped_at_epoch is None


@pytest.mark.parametrize("others_say, expected_steps", [(True, 1), (False, 20)])
def test_time_budget_follows_the_workers_agreement(others_say, expected_steps):
    # "agree" stands for the all-reduce between workers: its answer decides, not the local clock.
    seen = []

    def agree(flag):
        seen.append(flag)
        return others_say

    steps, _ = fit_with(TimeBudget(minutes=1e-9 if not others_say else 10, agree=agree))
    assert steps == expected_steps
    assert seen[0] is (not others_say)


def test_history_writer_continues_an_interrupted_history(tmp_path):
    previous = {"epoch": [1, 2, 3], "loss": [3.0, 2.0, 1.5], "val_loss": [3.1, 2.2, 1.9]}
    writer = HistoryWriter(tmp_path / "history.json", tmp_path / "curve.png", previous)
    # Resumed from the backup of epoch 2: the third epoch is trained again and replaces the old.
    writer.on_epoch_end(2, {"loss": 1.25, "val_loss": 1.75})
    writer.on_epoch_end(3, {"loss": 1.0, "val_loss": 1.5})
    history = json.loads((tmp_path / "history.json").read_text())
    assert history == {
        "epoch": [1, 2, 3, 4],
        "loss": [3.0, 2.0, 1.25, 1.0],
        "val_loss": [3.1, 2.2, 1.75, 1.5],
    }
    assert (tmp_path / "curve.png").read_bytes().startswith(b"\x89PNG\r\n\x1a\n")


class EpochWeights(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.weights = []

    def on_epoch_end(self, epoch, logs=None):
        self.weights.append(self.model.get_weights()[0].item())


def fit_oscillating(tmp_path, count):
    """y = w x by full-batch SGD that overshoots: w - 2 halves and flips sign every epoch, so
    the average of the last epochs lies closer to w = 2 than any single epoch."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False,
                                                                    kernel_initializer="zeros")])
    model.compile(keras.optimizers.SGD(0.75), "mse")
    x, y = np.ones((4, 1), "float32"), np.full((4, 1), 2.0, "float32")
    validation = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)
    average = CheckpointAverage(count, validation, tmp_path / "best.keras")
    epochs = EpochWeights()
    model.fit(x, y, batch_size=4, epochs=5, validation_data=(x, y), callbacks=[average, epochs],
              verbose=0)
    return model, average, epochs.weights


def test_checkpoint_average_keeps_a_better_average(tmp_path, capsys):
    model, average, weights = fit_oscillating(tmp_path, count=2)
    np.testing.assert_allclose(weights, [3.0, 1.5, 2.25, 1.875, 2.0625], atol=1e-6)
    expected = (weights[-1] + weights[-2]) / 2
    assert average.best_val_loss == pytest.approx((weights[-1] - 2) ** 2, rel=1e-4)
    assert average.average_val_loss == pytest.approx((expected - 2) ** 2, rel=1e-4)
    saved = keras.saving.load_model(tmp_path / "best.keras")
    assert saved.get_weights()[0].item() == pytest.approx(expected)
    assert model.get_weights()[0].item() == pytest.approx(weights[-1])  # left as trained
    assert "Average of the last 2 epochs" in capsys.readouterr().out


def test_checkpoint_average_drops_a_worse_average(tmp_path):
    # All five epochs average to 2.1375, farther from 2 than the last epoch's 2.0625.
    _, average, weights = fit_oscillating(tmp_path, count=5)
    assert average.average_val_loss == pytest.approx((np.mean(weights) - 2) ** 2, rel=1e-4)
    assert average.average_val_loss > average.best_val_loss
    assert not (tmp_path / "best.keras").exists()
