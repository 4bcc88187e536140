"""`run_info.json`: what a run records about itself for its model card: the code it was trained
with (project version, git commit), the pairs it trained and validated on, its training time,
and at the end the kept model's validation."""

from __future__ import annotations

import time

import keras

from keras_transformer.model_card import software
from keras_transformer.run_dir import RunPaths, read_run_info, write_run_info
from keras_transformer.training.inputs import RunData


def data_counts(data: RunData) -> dict:
    """The pairs a run trains and validates on: `{"train": {"pairs", "skipped_empty",
    "skipped_too_long"}, "validation": {"pairs", "held_out_fraction"}}` (skipped pairs are
    counted for training files only)."""
    validation = {"pairs": len(data.validation), "held_out_fraction": data.held_out}
    if data.scanned is None:  # the built-in demo data, in memory
        return {"train": {"pairs": len(data.train)}, "validation": validation}
    held_out = len(data.validation) if data.held_out is not None else 0
    train = {"pairs": data.scanned.pairs - held_out, "skipped_empty": data.scanned.empty,
             "skipped_too_long": data.scanned.too_long}
    return {"train": train, "validation": validation}


class RunInfo:
    """Keeps a run's `run_info.json` up to date.

    `training_seconds` is the wall time of `train` up to the last save, summed over the
    sessions of a resumed run (time spent after the last save of an interrupted session is not
    counted).

    Args:
        paths: the run directory.
        data: what the run trains and validates on.
        start: when this session started, by `time.monotonic()`.
        resuming: whether this session resumes an interrupted run (whose time it adds to).
    """

    def __init__(self, paths: RunPaths, data: RunData, start: float, *, resuming: bool):
        self.paths = paths
        self.start = start
        self.before = read_run_info(paths.root).get("training_seconds", 0.0) if resuming else 0.0
        self.info = {"software": software(), "data": data_counts(data)}

    def save(self, *_) -> None:
        """Writes the file with the time so far (takes and ignores a callback's arguments)."""
        self.info["training_seconds"] = round(self.before + time.monotonic() - self.start, 1)
        write_run_info(self.paths.root, self.info)

    def callback(self) -> keras.callbacks.Callback:
        """Saves at the end of every epoch (save interval)."""
        return keras.callbacks.LambdaCallback(on_epoch_end=self.save)

    def finish(self, validation: dict, decoding: dict | None = None) -> None:
        """Saves the kept model's validation (see `trainer.validate_kept_model`), the decoding
        chosen for it (`trainer.choose_decoding`), if any, and the time."""
        self.info["validation"] = validation
        if decoding is not None:
            self.info["decoding"] = decoding
        self.save()
