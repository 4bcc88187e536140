"""Time budget, step limit, cooldown, patience, throughput, history / learning-curve and
checkpoint-averaging callbacks."""

from __future__ import annotations

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.training import callbacks as callbacks_module
from keras_transformer.training.callbacks import (
    BestModel,
    CheckpointAverage,
    Cooldown,
    HistoryWriter,
    Patience,
    StepLimit,
    Throughput,
    TimeBudget,
    learning_curve,
)
from keras_transformer.training.schedules import LinearCooldown, TransformerSchedule


class StepCounter(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.steps = 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1


def fit_with(callbacks, epochs=2, steps=10, initial_epoch=0, validation=False):
    """Fits y = 0 on `steps` batches per epoch; returns the steps taken and the history."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile("sgd", "mse")
    counter = StepCounter()
    x, y = np.ones((steps * 2, 3), "float32"), np.zeros((steps * 2, 1), "float32")
    callbacks = callbacks if isinstance(callbacks, list) else [callbacks]
    history = model.fit(x, y, batch_size=2, epochs=epochs, initial_epoch=initial_epoch,
                        callbacks=[*callbacks, counter], verbose=0,
                        validation_data=(x, y) if validation else None)
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


def oscillating_model():
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False,
                                                                    kernel_initializer="zeros")])
    model.compile(keras.optimizers.SGD(0.75), "mse")
    return model


X, Y = np.ones((4, 1), "float32"), np.full((4, 1), 2.0, "float32")
VALIDATION = tf.data.Dataset.from_tensor_slices((X, Y)).batch(4)


def fit_oscillating(tmp_path, count, model=None, epochs=5, initial_epoch=0, **options):
    """y = w x by full-batch SGD that overshoots: w - 2 halves and flips sign every epoch, so
    the average of the last epochs lies closer to w = 2 than any single epoch."""
    model = model or oscillating_model()
    average = CheckpointAverage(count, VALIDATION, tmp_path / "best.keras", **options)
    weights = EpochWeights()
    model.fit(X, Y, batch_size=4, epochs=epochs, initial_epoch=initial_epoch,
              validation_data=(X, Y), callbacks=[average, weights], verbose=0)
    return model, average, weights.weights


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


def test_checkpoints_on_disk_are_pruned_and_survive_a_resume(tmp_path, capsys):
    directory = tmp_path / "checkpoints"
    model, _, before = fit_oscillating(tmp_path, 3, epochs=3, directory=directory)
    assert [path.name for path in sorted(directory.iterdir())] == [
        "step-0000000001.npz", "step-0000000002.npz", "step-0000000003.npz"]
    # A resumed run (the same weights and optimizer step) averages across the resume.
    model, average, after = fit_oscillating(tmp_path, 3, model=model, epochs=5,
                                            initial_epoch=3, directory=directory)
    weights = before + after
    np.testing.assert_allclose(weights, [3.0, 1.5, 2.25, 1.875, 2.0625], atol=1e-6)
    assert sorted(path.name for path in directory.iterdir()) == [
        "step-0000000003.npz", "step-0000000004.npz", "step-0000000005.npz"]
    expected = np.mean(weights[-3:])
    assert average.average_val_loss == pytest.approx((expected - 2) ** 2, rel=1e-4)
    printed = capsys.readouterr().out
    assert "Average of the last 3 epochs" in printed and "averaged steps 3 to 5" in printed


def test_checkpoints_after_the_resumed_step_are_dropped(tmp_path):
    directory = tmp_path / "checkpoints"
    model, _, _ = fit_oscillating(tmp_path, 5, epochs=2, directory=directory)
    # As if the run had written epochs 3-4 and been killed before backing them up.
    for step in (3, 4):
        np.savez(directory / f"step-{step:010d}.npz", np.full((1, 1), 100.0, "float32"))
    _, average, after = fit_oscillating(tmp_path, 5, model=model, epochs=3, initial_epoch=2,
                                        directory=directory)
    assert sorted(path.name for path in directory.iterdir()) == [
        "step-0000000001.npz", "step-0000000002.npz", "step-0000000003.npz"]
    expected = np.mean([3.0, 1.5, after[0]])
    assert average.average_val_loss == pytest.approx((expected - 2) ** 2, rel=1e-4)


def test_checkpoint_average_by_bleu_keeps_a_better_bleu(tmp_path, capsys):
    # A stand-in BLEU that is highest for w = 2: the average of the last two epochs wins.
    model = oscillating_model()

    def bleu():
        return 100.0 - abs(model.get_weights()[0].item() - 2.0)

    logger = BleuLogger(bleu)
    average = CheckpointAverage(2, VALIDATION, tmp_path / "best.keras", bleu=bleu,
                                best_val_bleu=None)
    model.fit(X, Y, batch_size=4, epochs=5, validation_data=(X, Y),
              callbacks=[logger, average], verbose=0)
    assert average.best_val_bleu == pytest.approx(100 - 0.0625)
    assert average.average_val_bleu == pytest.approx(100 - abs((1.875 + 2.0625) / 2 - 2))
    assert (tmp_path / "best.keras").exists()
    assert "val_bleu" in capsys.readouterr().out


def test_checkpoint_average_by_bleu_ignores_a_better_loss(tmp_path):
    # BLEU decides: the average validates better by loss but worse by this stand-in BLEU.
    model = oscillating_model()

    def bleu():
        return abs(model.get_weights()[0].item() - 2.0)

    average = CheckpointAverage(2, VALIDATION, tmp_path / "best.keras", bleu=bleu)
    model.fit(X, Y, batch_size=4, epochs=5, validation_data=(X, Y),
              callbacks=[BleuLogger(bleu), average], verbose=0)
    assert average.average_val_loss < average.best_val_loss
    assert average.average_val_bleu < average.best_val_bleu
    assert not (tmp_path / "best.keras").exists()


@pytest.mark.parametrize("best_weight, average_kept", [(2.25, True), (2.0, False)])
def test_checkpoint_average_rescoring_scores_the_saved_best_model_again(
    tmp_path, capsys, best_weight, average_kept
):
    # The recorded best BLEU (1000, by another scorer) is ignored: the saved best model is
    # scored again with the same stand-in BLEU as the average, highest for w = 2.
    best = oscillating_model()
    best.set_weights([np.full((1, 1), best_weight, "float32")])
    best.save(tmp_path / "best.keras")
    model = oscillating_model()

    def bleu():
        return 100.0 - abs(model.get_weights()[0].item() - 2.0)

    average = CheckpointAverage(2, VALIDATION, tmp_path / "best.keras", bleu=bleu,
                                best_val_bleu=1000.0, rescore_best=True)
    model.fit(X, Y, batch_size=4, epochs=5, validation_data=(X, Y), callbacks=[average],
              verbose=0)
    averaged = (1.875 + 2.0625) / 2
    assert average.average_val_bleu == pytest.approx(100 - abs(averaged - 2))
    assert average.best_val_bleu == pytest.approx(100 - abs(best_weight - 2))
    saved = keras.saving.load_model(tmp_path / "best.keras").get_weights()[0].item()
    assert saved == pytest.approx(averaged if average_kept else best_weight)
    assert model.get_weights()[0].item() == pytest.approx(2.0625)  # left as trained
    printed = capsys.readouterr().out
    assert "rescored BLEU" in printed
    assert ("saved as the best model" if average_kept else "not kept") in printed


class BleuLogger(keras.callbacks.Callback):
    def __init__(self, bleu):
        super().__init__()
        self.bleu = bleu

    def on_epoch_end(self, epoch, logs=None):
        logs["val_bleu"] = self.bleu()


def test_step_limit_stops_inside_an_epoch():
    steps, history = fit_with(StepLimit(13), epochs=3, steps=10)
    assert steps == 13
    assert len(history.history["loss"]) == 2  # the second epoch is closed after its 3rd step


class ScriptedLogs(keras.callbacks.Callback):
    """Puts the next scripted value (None: none) into each epoch's logs as `val_bleu`."""

    def __init__(self, values):
        super().__init__()
        self.values = list(values)

    def on_epoch_end(self, epoch, logs=None):
        if self.values[epoch] is not None:
            logs["val_bleu"] = self.values[epoch]


def test_patience_counts_validations_without_improvement(capsys):
    # Evaluated every other epoch: 10 (best), 12 (best), 12 (equal: no), 11 (no) -> stop.
    scripted = ScriptedLogs([None, 10, None, 12, None, 12, None, 11, None, 20])
    patience = Patience("val_bleu", 2, mode="max")
    _, history = fit_with([scripted, patience], epochs=10, steps=1)
    assert len(history.history["loss"]) == 8
    assert patience.stopped_at_epoch == 7
    assert "No better val_bleu in 2 validations: stopping after epoch 8." in (
        capsys.readouterr().out)


def test_patience_continues_the_interrupted_history():
    # The interrupted run saw 30 then 25 (one validation without improvement) before the
    # backup of epoch 2; its epoch 3 (35) was lost and is ignored.
    previous = {"epoch": [1, 2, 3], "val_loss": [30.0, 25.0, 35.0], "val_bleu": [30, 25, 35]}
    patience = Patience("val_bleu", 2, mode="max", previous=previous)
    scripted = ScriptedLogs([None, None, 20, 40])
    _, history = fit_with([scripted, patience], epochs=4, steps=1, initial_epoch=2)
    assert len(history.history["loss"]) == 1  # stopped after epoch 3: 25, 20 after the 30
    assert patience.stopped_at_epoch == 2


def test_patience_in_min_mode_follows_the_loss():
    patience = Patience("val_loss", 1, mode="min")
    _, history = fit_with(patience, epochs=5, steps=1, validation=True)
    # The loss falls every epoch here, so nothing stops the run.
    assert len(history.history["loss"]) == 5
    assert patience.stopped_at_epoch is None


class CountTokens(keras.callbacks.Callback):
    def __init__(self, source, target):
        super().__init__()
        self.source, self.target = source, target

    def on_train_batch_end(self, batch, logs=None):
        self.source.update_state(10.0)
        self.target.update_state(30.0)


def test_throughput_logs_the_step_learning_rate_and_tokens_per_second_of_each_epoch():
    source, target = keras.metrics.Sum(), keras.metrics.Sum()
    logged = []

    class Keep(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            logged.append(dict(logs))

    callbacks = [Throughput(source, target), CountTokens(source, target), Keep()]
    fit_with(callbacks, epochs=2, steps=10)
    assert [logs["step"] for logs in logged] == [10, 20]
    assert [logs["learning_rate"] for logs in logged] == pytest.approx([0.01, 0.01])  # SGD's
    for logs in logged:
        assert logs["source_tokens_per_second"] > 0
        ratio = logs["target_tokens_per_second"] / logs["source_tokens_per_second"]
        assert ratio == pytest.approx(3.0)
    assert float(source.result()) == 100.0  # reset at every epoch: the second epoch's count


def test_history_writer_writes_null_where_a_log_is_missing(tmp_path):
    writer = HistoryWriter(tmp_path / "history.json", tmp_path / "curve.png", None)
    writer.on_epoch_end(0, {"loss": 2.0, "step": 5})
    writer.on_epoch_end(1, {"loss": 1.5, "step": 10, "val_bleu": 12.5})
    writer.on_epoch_end(2, {"loss": 1.0, "step": 15})
    history = json.loads((tmp_path / "history.json").read_text())
    assert history == {"epoch": [1, 2, 3], "loss": [2.0, 1.5, 1.0], "step": [5, 10, 15],
                       "val_bleu": [None, 12.5, None]}


def test_learning_curve_plots_against_steps_with_bleu_and_learning_rate_on_second_axes():
    history = {"epoch": [1, 2, 3], "step": [5, 10, 15], "loss": [2.0, 1.5, 1.0],
               "val_loss": [2.1, 1.7, 1.2], "val_bleu": [None, 12.5, 20.0],
               "learning_rate": [1e-3, 5e-4, 0.0]}
    figure = learning_curve(history)
    loss_axes, accuracy_axes, bleu_axes, rate_axes = figure.axes
    assert rate_axes.bbox.bounds == accuracy_axes.bbox.bounds
    assert list(rate_axes.lines[0].get_ydata()) == [1e-3, 5e-4, 0.0]
    assert loss_axes.get_xlabel() == "optimizer step"
    assert list(loss_axes.lines[0].get_xdata()) == [5, 10, 15]
    assert list(bleu_axes.lines[0].get_xdata()) == [10, 15]
    assert list(bleu_axes.lines[0].get_ydata()) == [12.5, 20.0]
    assert len(learning_curve({"epoch": [1], "loss": [1.0]}).axes) == 2  # no BLEU, no axis


def test_best_model_saves_improvements_only_and_skips_epochs_without_the_monitor(tmp_path):
    saved = []

    class Record(BestModel):
        def on_epoch_end(self, epoch, logs=None):
            before = self.best
            super().on_epoch_end(epoch, logs)
            if self.best != before:
                saved.append(epoch + 1)

    # BLEU every other epoch: 5 (save), 4, 7 (save), 7 (equal: no); none of the others saves.
    scripted = ScriptedLogs([None, 5.0, None, 4.0, None, 7.0, None, 7.0])
    best = Record(tmp_path / "model.keras", "val_bleu", mode="max")
    fit_with([scripted, best], epochs=8, steps=1)
    assert saved == [2, 6] and best.best == 7.0
    assert keras.saving.load_model(tmp_path / "model.keras").get_weights()
    assert not list(tmp_path.glob("*.partial.keras"))
    # A resumed run does not save what its interrupted part had beaten.
    resumed = Record(tmp_path / "again.keras", "val_bleu", mode="max", best=6.0)
    fit_with([ScriptedLogs([5.0, 6.0, 6.5]), resumed], epochs=3, steps=1)
    assert saved[2:] == [3]


class SteppedClock(keras.callbacks.Callback):
    """A clock for the callbacks module that advances `seconds` with each training step, and
    the learning rate of each optimizer iteration, read after the step before it."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds
        self.now = 0.0
        self.rates = {}

    def monotonic(self) -> float:
        return self.now

    def on_train_batch_end(self, batch, logs=None):
        self.now += self.seconds
        iteration = int(self.model.optimizer.iterations.numpy())
        self.rates[iteration] = float(self.model.optimizer.learning_rate.numpy())


class RestoreStep(keras.callbacks.Callback):
    """Sets the optimizer's step when training begins, as `BackupAndRestore` does on a resume."""

    def __init__(self, step: int):
        super().__init__()
        self.step = step

    def on_train_begin(self, logs=None):
        self.model.optimizer.iterations.assign(self.step)


def fit_cooling(monkeypatch, *, fraction, steps=None, minutes=None, agree=None,
                seconds_per_step=5.0, resumed_at=0):
    """Fits 2 epochs of 10 steps with SGD on a `LinearCooldown` that `Cooldown` plans (from
    optimizer step `resumed_at`, restored after `Cooldown` sees the training begin); returns
    the steps taken, the schedule and the learning rate of every iteration after the first."""
    clock = SteppedClock(seconds_per_step)
    monkeypatch.setattr(callbacks_module, "time", clock)
    schedule = LinearCooldown(TransformerSchedule(d_model=16, warmup_steps=2))
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(schedule), "mse")
    cooldown = Cooldown(schedule, fraction, steps=steps, minutes=minutes, agree=agree)
    counter = StepCounter()
    x, y = np.ones((20, 3), "float32"), np.zeros((20, 1), "float32")
    model.fit(x, y, batch_size=2, epochs=2,
              callbacks=[clock, cooldown, RestoreStep(resumed_at), counter], verbose=0)
    return counter.steps, schedule, clock.rates


def factors(schedule, rates):
    return {i: rate / float(schedule.schedule(i)) for i, rate in sorted(rates.items())}


def test_a_step_cooldown_ends_the_run_at_zero_learning_rate(monkeypatch):
    steps, schedule, rates = fit_cooling(monkeypatch, fraction=0.25, steps=12)
    assert steps == 12  # the cooldown stops fit itself, inside the second epoch
    assert (schedule.start, schedule.end) == (9, 12)
    assert factors(schedule, rates) == pytest.approx(
        {**{i: 1.0 for i in range(1, 10)}, 10: 2 / 3, 11: 1 / 3, 12: 0.0})


def test_a_time_cooldown_lasts_the_rest_of_the_budget_at_the_pace_so_far(monkeypatch, capsys):
    # 5 s a step, 60 s budget: at 45 s (after step 9) the last quarter begins; 9 steps in 45 s
    # say that the remaining 15 s hold 3 steps.
    steps, schedule, rates = fit_cooling(monkeypatch, fraction=0.25, minutes=1.0)
    assert (schedule.start, schedule.end) == (9, 12)
    assert steps == 12
    assert factors(schedule, rates)[11] == pytest.approx(1 / 3)
    assert "falls to zero over steps 9 to 12" in capsys.readouterr().out


def test_a_resumed_time_cooldown_counts_the_pace_from_the_restored_step(monkeypatch):
    # Resumed at step 100: 9 steps in the first 45 s of this fit, 3 more in the last 15 s.
    steps, schedule, _ = fit_cooling(monkeypatch, fraction=0.25, minutes=1.0, resumed_at=100)
    assert (schedule.start, schedule.end, steps) == (109, 112, 12)


def test_the_earlier_end_of_steps_and_time_budget_wins(monkeypatch):
    # steps=100 would cool from step 75: the time budget ends first and is planned instead.
    _, schedule, _ = fit_cooling(monkeypatch, fraction=0.25, steps=100, minutes=1.0)
    assert (schedule.start, schedule.end) == (9, 12)
    # steps=10 cools from step 8 (round(2.5) == 2) and ends before the budget's step 12.
    steps, schedule, _ = fit_cooling(monkeypatch, fraction=0.25, steps=10, minutes=1.0)
    assert (schedule.start, schedule.end, steps) == (8, 10, 10)


def test_a_time_cooldown_follows_the_workers_agreement(monkeypatch):
    steps, schedule, rates = fit_cooling(monkeypatch, fraction=0.25, minutes=1.0,
                                         agree=lambda due: False)
    assert steps == 20 and schedule.end is None
    assert list(factors(schedule, rates).values()) == pytest.approx([1.0] * 20)
