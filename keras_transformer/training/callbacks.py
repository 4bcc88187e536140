"""Callbacks of a training run: a wall-clock budget and the history / learning-curve writer."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import keras

from keras_transformer.plots import plot_learning_curve


class TimeBudget(keras.callbacks.Callback):
    """Stops `fit` after the step during which `minutes` of training have passed.

    The epoch is then closed as usual (validation, checkpoint, backup), so a budgeted run ends
    with a validated best model.

    Args:
        minutes: wall-clock budget, counted from the start of `fit`.
        agree: optional function mapping this process's "time is up" to the decision of all
            workers (multi-worker training must stop every worker at the same step, or the
            others wait forever in their next all-reduce).
    """

    def __init__(self, minutes: float, agree: Callable[[bool], bool] | None = None):
        super().__init__()
        self.seconds = 60.0 * minutes
        self.agree = agree
        self.stopped_at_epoch = None
        self._start = None
        self._time_is_up = False

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        time_is_up = time.monotonic() - self._start >= self.seconds
        if self.agree is not None:
            time_is_up = self.agree(time_is_up)
        if time_is_up:
            self._time_is_up = True
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if self._time_is_up and self.stopped_at_epoch is None:
            self.stopped_at_epoch = epoch
            minutes = self.seconds / 60.0
            print(f"Time budget of {minutes:g} min used up: stopping after epoch {epoch + 1}.")


class HistoryWriter(keras.callbacks.Callback):
    """After every epoch, writes the run's history as JSON and draws its learning curve.

    The history survives restarts: `previous` (the history of an interrupted run, up to the
    epoch `BackupAndRestore` resumes from) is continued rather than overwritten.

    Args:
        history_path: JSON file, `{"epoch": [1, 2, ...], "loss": [...], "val_loss": [...], ...}`
            (epochs count from 1).
        curve_path: PNG file with loss and accuracy against epoch, training and validation.
        previous: history to continue, in the same format.
    """

    def __init__(self, history_path: str | Path, curve_path: str | Path, previous: dict | None):
        super().__init__()
        self.history_path = Path(history_path)
        self.curve_path = Path(curve_path)
        self.history = {key: list(values) for key, values in (previous or {}).items()}

    def on_epoch_end(self, epoch, logs=None):
        # Epochs at or after this one come from a run that was interrupted before backing up.
        kept = [index for index, number in enumerate(self.history.get("epoch", []))
                if number <= epoch]
        self.history = {key: [values[i] for i in kept] for key, values in self.history.items()}
        self.history.setdefault("epoch", []).append(epoch + 1)
        for name, value in (logs or {}).items():
            self.history.setdefault(name, []).append(float(value))
        self.history_path.write_text(json.dumps(self.history, indent=2) + "\n", encoding="utf-8")
        plot_learning_curve(self.history).savefig(self.curve_path, dpi=100)
