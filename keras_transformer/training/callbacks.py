"""Callbacks of a training run: a wall-clock budget, a step limit, a learning-rate cooldown,
the best model, early stopping, throughput, the history / learning-curve writer and checkpoint
averaging."""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
from matplotlib.figure import Figure

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


def optimizer_step(model: keras.Model) -> int:
    """Updates the model's optimizer has made (`optimizer.iterations`)."""
    return int(model.optimizer.iterations.numpy())


class StepLimit(keras.callbacks.Callback):
    """Stops `fit` once the optimizer has made `steps` updates, wherever that is in an epoch.

    The epoch is then closed as usual (validation, checkpoint, backup). The count is the
    optimizer's, which `BackupAndRestore` restores, so a resumed run ends at exactly `steps`.

    Args:
        steps: total optimizer updates of the run.
    """

    def __init__(self, steps: int):
        super().__init__()
        self.steps = steps

    def on_train_batch_end(self, batch, logs=None):
        if optimizer_step(self.model) >= self.steps:
            self.model.stop_training = True


class Cooldown(keras.callbacks.Callback):
    """Plans a `LinearCooldown`: the learning rate falls linearly to zero over the last
    `fraction` of the run.

    With `steps`, the cooldown is the last `fraction * steps` optimizer steps, planned when
    training begins (the same on a resumed run). With a time budget of `minutes`, it begins once
    `1 - fraction` of the budget has passed and lasts as many steps as the rest of the budget is
    expected to take at the pace of this `fit` so far; `fit` stops when the rate reaches zero.
    With both, the one that ends first is kept. Like `TimeBudget`, the budget counts from the
    start of `fit`, so a resumed run plans its time-based cooldown afresh.

    Args:
        schedule: the optimizer's learning-rate schedule.
        fraction: share of the run to cool down over, in (0, 1).
        steps: total optimizer steps of the run, or None.
        minutes: the run's time budget, or None.
        agree: optional function mapping this process's "the cooldown is due" to the decision
            of all workers (see `TimeBudget`); each then plans the same steps.
    """

    def __init__(self, schedule, fraction: float, *, steps: int | None = None,
                 minutes: float | None = None, agree: Callable[[bool], bool] | None = None):
        super().__init__()
        if steps is None and minutes is None:
            raise ValueError("a cooldown needs the run's steps or its time budget")
        self.schedule = schedule
        self.fraction = fraction
        self.steps = steps
        self.seconds = None if minutes is None else 60.0 * minutes
        self.agree = agree
        self._start = None
        self._first_step = None
        self._timed = False

    def on_train_begin(self, logs=None):
        self._start = time.monotonic()
        self._first_step = None  # read at the first epoch, once a backup has been restored
        self._timed = self.seconds is None
        if self.steps is None:
            self.schedule.plan(None)
        else:
            self.schedule.plan(self.steps, max(1, round(self.fraction * self.steps)))

    def on_epoch_begin(self, epoch, logs=None):
        if self._first_step is None:
            self._first_step = optimizer_step(self.model)

    def on_train_batch_end(self, batch, logs=None):
        step = optimizer_step(self.model)
        end = self.schedule.end
        if end is not None and step >= end:
            self.model.stop_training = True
            return
        if self._timed:
            return
        due = time.monotonic() - self._start >= (1.0 - self.fraction) * self.seconds
        if self.agree is not None:
            due = self.agree(due)
        if not due:
            return
        self._timed = True
        length = max(1, round((step - self._first_step) * self.fraction / (1.0 - self.fraction)))
        if end is None or step + length < end:
            self.schedule.plan(step + length, length)
            print(f"\nCooldown: the learning rate falls to zero over steps {step} to "
                  f"{step + length} (the last {self.fraction:.0%} of the time budget).",
                  flush=True)


def _better(mode: str) -> Callable[[float, float], bool]:
    if mode not in ("min", "max"):
        raise ValueError(f"mode must be 'min' or 'max', got {mode!r}")
    return (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)


class BestModel(keras.callbacks.Callback):
    """Saves the model (a full `.keras` file) whenever `monitor` beats its best value so far.

    Epochs whose logs lack `monitor` (no BLEU evaluation that epoch) are skipped; Keras'
    `ModelCheckpoint(save_best_only=True)` would save those. The file is written next to `path`
    and renamed over it, so an interruption never leaves half a model.

    Args:
        path: the model file (`.keras`).
        monitor: log to watch, e.g. "val_loss" or "val_bleu".
        mode: "min" (lower is better) or "max".
        best: the best value before this run (of an interrupted run), or None.
    """

    def __init__(self, path: str | Path, monitor: str = "val_loss", *, mode: str = "min",
                 best: float | None = None):
        super().__init__()
        self.path = Path(path)
        self.monitor = monitor
        self.better = _better(mode)
        self.best = best

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None or (self.best is not None and not self.better(value, self.best)):
            return
        self.best = float(value)
        partial = self.path.with_name(f"{self.path.stem}.partial.keras")
        self.model.save(partial)
        os.replace(partial, self.path)


class Patience(keras.callbacks.Callback):
    """Stops `fit` after `patience` validations of `monitor` without improvement.

    Epochs whose logs lack `monitor` (no evaluation that epoch) do not count. The state is
    recomputed from the run's history at every epoch, so it survives a resume: pass the history
    of the interrupted run as `previous` (entries after the epoch the run resumes from are
    ignored, as `HistoryWriter` drops them).

    Args:
        monitor: log to watch, e.g. "val_bleu" or "val_loss".
        patience: validations without improvement before stopping.
        mode: "max" (higher is better) or "min".
        previous: history to continue, `{"epoch": [...], monitor: [...]}` (None where not
            validated).
        agree: optional function mapping this process's decision to all workers' (see
            `TimeBudget`).
    """

    def __init__(self, monitor: str, patience: int, *, mode: str = "min",
                 previous: dict | None = None,
                 agree: Callable[[bool], bool] | None = None):
        super().__init__()
        self.monitor = monitor
        self.patience = patience
        self.better = _better(mode)
        previous = previous or {}
        self.values = [
            (number, value)
            for number, value in zip(previous.get("epoch", []), previous.get(monitor, []),
                                     strict=False)
            if value is not None
        ]
        self.agree = agree
        self.stopped_at_epoch = None

    def validations_without_improvement(self) -> int:
        """Validations since the best one so far (0 right after an improvement)."""
        best, since = None, 0
        for _, value in self.values:
            if best is None or self.better(value, best):
                best, since = value, 0
            else:
                since += 1
        return since

    def on_epoch_end(self, epoch, logs=None):
        self.values = [(number, value) for number, value in self.values if number <= epoch]
        value = (logs or {}).get(self.monitor)
        if value is not None:
            self.values.append((epoch + 1, float(value)))
        stop = self.validations_without_improvement() >= self.patience
        if self.agree is not None:
            stop = self.agree(stop)
        if stop:
            self.model.stop_training = True
            self.stopped_at_epoch = epoch
            print(f"No better {self.monitor} in {self.patience} validations: stopping after "
                  f"epoch {epoch + 1}.")


class Throughput(keras.callbacks.Callback):
    """Adds the optimizer step, its learning rate and the real tokens trained on per second to
    every epoch's logs.

    Logs `step` (optimizer updates so far), `learning_rate` (of the next update),
    `source_tokens_per_second` and
    `target_tokens_per_second`: non-padding tokens over the training time of the epoch (the
    save interval of a step-based run), validation excluded. Put it first, so that history,
    TensorBoard and the progress bar get the numbers.

    Args:
        source_tokens: a metric counting real source tokens as they are trained on (reset here
            at every epoch), e.g. `TokenWeightedSteps.source_tokens`.
        target_tokens: the same for target tokens.
    """

    def __init__(self, source_tokens: keras.metrics.Metric, target_tokens: keras.metrics.Metric):
        super().__init__()
        self.counters = {"source": source_tokens, "target": target_tokens}
        self._start = self._end = None

    def on_epoch_begin(self, epoch, logs=None):
        for counter in self.counters.values():
            counter.reset_state()
        self._start = self._end = time.monotonic()

    def on_train_batch_end(self, batch, logs=None):
        self._end = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        logs["step"] = optimizer_step(self.model)
        logs["learning_rate"] = float(self.model.optimizer.learning_rate.numpy())
        seconds = max(self._end - self._start, 1e-9)
        for side, counter in self.counters.items():
            logs[f"{side}_tokens_per_second"] = float(counter.result()) / seconds


def learning_curve(history: dict) -> Figure:
    """`plot_learning_curve` against the optimizer step (when the history has one), with the
    validation BLEU on a second axis of the loss panel and the learning rate on a second axis of
    the accuracy panel (each when the history has it)."""
    steps = history.get("step") or []
    by_step = len(steps) == len(history.get("epoch", [])) and None not in steps
    figure = plot_learning_curve({**history, "epoch": steps} if by_step else history)
    positions = steps if by_step else history.get("epoch", [])
    if by_step:
        for axes in figure.axes:
            axes.set_xlabel("optimizer step")
    bleu = [(x, value) for x, value in zip(positions, history.get("val_bleu", []), strict=False)
            if value is not None]
    if bleu:
        axes = figure.axes[0].twinx()
        axes.plot(*zip(*bleu, strict=True), marker="s", color="tab:green",
                  label="validation BLEU")
        axes.set(ylabel="BLEU", ylim=(0, None))
        axes.legend(loc="center right")
    rates = [(x, value) for x, value in zip(positions, history.get("learning_rate", []),
                                            strict=False) if value is not None]
    if rates:
        axes = figure.axes[1].twinx()
        axes.plot(*zip(*rates, strict=True), color="tab:gray", linestyle="--",
                  label="learning rate")
        axes.set(ylabel="learning rate", ylim=(0, None))
        axes.legend(loc="lower center")
    return figure


class FirstStep(keras.callbacks.Callback):
    """Prints when the first optimizer step has finished: how long the run took to start (data
    checks, vocabulary, model, tracing) and the process's peak memory until then.

    Args:
        start: `time.monotonic()` when the run started.
    """

    def __init__(self, start: float):
        super().__init__()
        self.start = start
        self._done = False

    def on_train_batch_end(self, batch, logs=None):
        if self._done:
            return
        self._done = True
        # ru_maxrss is in KiB on Linux.
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"\nfirst optimizer step done {time.monotonic() - self.start:.1f} s after the run "
              f"started (peak RSS {peak:,.0f} MB)", flush=True)


class HistoryWriter(keras.callbacks.Callback):
    """After every epoch, writes the run's history as JSON and draws its learning curve.

    The history survives restarts: `previous` (the history of an interrupted run, up to the
    epoch `BackupAndRestore` resumes from) is continued rather than overwritten. Every series
    has one entry per epoch: a log missing from an epoch (`val_bleu` between evaluations) is
    written as null.

    Args:
        history_path: JSON file, `{"epoch": [1, 2, ...], "loss": [...], "val_loss": [...], ...}`
            (epochs count from 1).
        curve_path: PNG file with loss and accuracy (and BLEU) against epoch or optimizer step.
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
        logs = logs or {}
        for name in sorted((set(self.history) | set(logs)) - {"epoch"}):
            values = self.history.setdefault(name, [None] * len(kept))
            value = logs.get(name)
            values.append(value if value is None or isinstance(value, int) else float(value))
        self.history_path.write_text(json.dumps(self.history, indent=2) + "\n", encoding="utf-8")
        learning_curve(self.history).savefig(self.curve_path, dpi=100)


class CheckpointAverage(keras.callbacks.Callback):
    """Averages the weights of the last `count` checkpoints when training ends, and keeps the
    average when it validates better than the best checkpoint (the paper's base models average
    the last 5 checkpoints, section 6.1).

    A checkpoint is taken at the end of every epoch (every save interval of a step-based run):
    the model's weights, in `directory`, named by optimizer step and pruned to the last `count`.
    On disk they survive an interruption, so a resumed run averages checkpoints from before and
    after the resume (ones written after the epoch it resumes from are dropped). The model's
    own weights are left as they were.

    "Better" is a lower validation loss, or with `bleu` a higher validation BLEU: the average's
    against the best `val_bleu` of the run, or with `rescore_best` against the best model's
    own score by the same `bleu` (for a scorer other than the one the best was chosen by, such
    as beam search over length penalties, `LengthPenaltySearch`).

    Args:
        count: how many of the last checkpoints to average (at least 2 are needed).
        validation_data: dataset to validate the average on (the one `fit` validates on).
        path: where the best model is saved (the `BestModel` file).
        best_val_loss: the best validation loss before this run (of an interrupted run), or None.
        save: False on workers that must take part in the validation but not write.
        directory: where to keep the checkpoints; None: a temporary directory, removed at the
            end (nothing survives an interruption).
        bleu: optional scorer, `() -> float`, of the model's current weights (`BleuScorer`).
        best_val_bleu: with `bleu`, the best validation BLEU before this run, or None.
        unit: what the message calls the checkpoints ("epochs", "checkpoints").
        rescore_best: with `bleu`, score the best model (its weights loaded from `path`) with
            `bleu` too, and compare the average with that.
    """

    def __init__(self, count: int, validation_data, path: str | Path,
                 best_val_loss: float | None = None, save: bool = True, *,
                 directory: str | Path | None = None,
                 bleu: Callable[[], float] | None = None, best_val_bleu: float | None = None,
                 unit: str = "epochs", rescore_best: bool = False):
        super().__init__()
        self.count = count
        self.validation_data = validation_data
        self.path = Path(path)
        self.best_val_loss = best_val_loss
        self.save = save
        self.directory = None if directory is None else Path(directory)
        self.bleu = bleu
        self.best_val_bleu = best_val_bleu
        self.unit = unit
        self.rescore_best = rescore_best
        self.average_val_loss = None
        self.average_val_bleu = None
        self._temporary = None
        self._pruned = False

    def checkpoints(self) -> list[Path]:
        """The checkpoint files, oldest first."""
        return sorted(self._directory().glob("step-*.npz"))

    def _directory(self) -> Path:
        if self.directory is not None:
            return self.directory
        if self._temporary is None:
            self._temporary = Path(tempfile.mkdtemp(prefix="checkpoints-"))
        return self._temporary

    def on_epoch_begin(self, epoch, logs=None):
        if self._pruned:
            return
        # The weights were restored (or fresh): checkpoints past them are from a lost epoch.
        self._pruned = True
        step = optimizer_step(self.model)
        for checkpoint in self.checkpoints():
            if _checkpoint_step(checkpoint) > step:
                checkpoint.unlink()

    def on_epoch_end(self, epoch, logs=None):
        directory = self._directory()
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"step-{optimizer_step(self.model):010d}.npz"
        partial = path.with_suffix(".partial")
        with open(partial, "wb") as file:
            np.savez(file, *self.model.get_weights())
        os.replace(partial, path)  # a kill leaves the old checkpoint or the new, never half
        for old in self.checkpoints()[: -self.count]:
            old.unlink()
        logs = logs or {}
        val_loss, val_bleu = logs.get("val_loss"), logs.get("val_bleu")
        if val_loss is not None and (self.best_val_loss is None or val_loss < self.best_val_loss):
            self.best_val_loss = float(val_loss)
        if val_bleu is not None and (self.best_val_bleu is None or val_bleu > self.best_val_bleu):
            self.best_val_bleu = float(val_bleu)

    def on_train_end(self, logs=None):
        try:
            checkpoints = self.checkpoints()[-self.count :]
            if len(checkpoints) >= 2:
                self._average(checkpoints)
        finally:
            if self._temporary is not None:
                shutil.rmtree(self._temporary, ignore_errors=True)
                self._temporary = None

    def _average(self, checkpoints: list[Path]) -> None:
        trained = self.model.get_weights()
        total = None
        for checkpoint in checkpoints:
            with np.load(checkpoint) as arrays:
                weights = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
            total = weights if total is None else [a + b for a, b in zip(total, weights,
                                                                         strict=True)]
        average = [weights / len(checkpoints) for weights in total]
        self.model.set_weights(average)
        results = self.model.evaluate(self.validation_data, verbose=0, return_dict=True)
        self.average_val_loss = float(results["loss"])
        if self.bleu is None:
            kept = self.best_val_loss is None or self.average_val_loss < self.best_val_loss
            best = _format(self.best_val_loss, "val_loss", ".4f")
            bleu = ""
        else:
            name = "rescored BLEU" if self.rescore_best else "val_bleu"
            self.average_val_bleu = self.bleu()
            if self.rescore_best:
                self.best_val_bleu = None
                if self.path.is_file():
                    self.model.load_weights(self.path)
                    self.best_val_bleu = self.bleu()
            kept = self.best_val_bleu is None or self.average_val_bleu > self.best_val_bleu
            best = _format(self.best_val_bleu, name, ".2f")
            bleu = f", {name} {self.average_val_bleu:.2f}"
        first, last = (_checkpoint_step(c) for c in (checkpoints[0], checkpoints[-1]))
        print(f"Average of the last {len(checkpoints)} {self.unit}: val_loss "
              f"{self.average_val_loss:.4f}{bleu} (best: {best}; averaged steps {first} to "
              f"{last}); {'saved as the best model' if kept else 'not kept'}.")
        if kept and self.save:
            self.model.set_weights(average)
            self.model.save(self.path)
        self.model.set_weights(trained)


def _checkpoint_step(path: Path) -> int:
    return int(path.stem.split("-")[1])


def _format(value: float | None, name: str, spec: str) -> str:
    return "none" if value is None else f"{name} {value:{spec}}"
