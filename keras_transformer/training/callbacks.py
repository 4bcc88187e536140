"""Callbacks of a training run: a wall-clock budget, the history / learning-curve writer and
checkpoint averaging."""

from __future__ import annotations

import json
import time
from collections import deque
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


class CheckpointAverage(keras.callbacks.Callback):
    """Averages the weights of the last `count` epochs when training ends, and keeps the average
    when it validates better than the best checkpoint (the paper's base models average the last
    5 checkpoints, section 6.1).

    The epoch-end weights are kept in memory, so after a resume only the epochs since the resume
    are averaged. The model's own weights are left as they were.

    Args:
        count: how many of the last epochs to average (at least 2 are needed).
        validation_data: dataset to validate the average on (the one `fit` validates on).
        path: where the best model is saved (the `ModelCheckpoint` file).
        best_val_loss: the best validation loss before this run (of an interrupted run), or None.
        save: False on workers that must take part in the validation but not write.
    """

    def __init__(self, count: int, validation_data, path: str | Path,
                 best_val_loss: float | None = None, save: bool = True):
        super().__init__()
        self.snapshots = deque(maxlen=count)
        self.validation_data = validation_data
        self.path = Path(path)
        self.best_val_loss = best_val_loss
        self.save = save
        self.average_val_loss = None

    def on_epoch_end(self, epoch, logs=None):
        self.snapshots.append(self.model.get_weights())
        val_loss = (logs or {}).get("val_loss")
        if val_loss is not None and (self.best_val_loss is None or val_loss < self.best_val_loss):
            self.best_val_loss = float(val_loss)

    def on_train_end(self, logs=None):
        if len(self.snapshots) < 2:
            return
        trained = self.model.get_weights()
        count = len(self.snapshots)
        epochs = zip(*self.snapshots, strict=True)
        self.model.set_weights([sum(weights) / count for weights in epochs])
        results = self.model.evaluate(self.validation_data, verbose=0, return_dict=True)
        self.average_val_loss = float(results["loss"])
        kept = self.best_val_loss is None or self.average_val_loss < self.best_val_loss
        best = "none" if self.best_val_loss is None else f"{self.best_val_loss:.4f}"
        print(f"Average of the last {count} epochs: val_loss {self.average_val_loss:.4f} "
              f"(best epoch: {best}); {'saved as the best model' if kept else 'not kept'}.")
        if kept and self.save:
            self.model.save(self.path)
        self.model.set_weights(trained)
