"""The run directory: what a training run leaves behind, and `load_run` to read it back.

Layout:

    <run_dir>/
      config.json          flat: TransformerConfig fields + training settings the run used
      vocab/               tokenizers: source/ and target/, or shared/ (vocab.txt, tokenizer.json)
      model.keras          the best-validation model, full Keras file
      history.json         per-epoch losses and metrics, {"epoch": [1, 2, ...], ...}
      learning_curve.png   loss and accuracy against epoch
      logs/                TensorBoard event files
      backup/              BackupAndRestore state while a run is unfinished
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.text.tokenizer import SubwordTokenizer
from keras_transformer.text.vocabulary import load_tokenizers
from keras_transformer.training.settings import TrainingSettings, load_run_config


@dataclasses.dataclass(frozen=True)
class RunPaths:
    """Paths of the files in a run directory.

    Args:
        root: the run directory.
    """

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.json"

    @property
    def vocab(self) -> Path:
        return self.root / "vocab"

    @property
    def model(self) -> Path:
        return self.root / "model.keras"

    @property
    def history(self) -> Path:
        return self.root / "history.json"

    @property
    def learning_curve(self) -> Path:
        return self.root / "learning_curve.png"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def backup(self) -> Path:
        return self.root / "backup"


@dataclasses.dataclass(frozen=True)
class Run:
    """A trained run, as read back from its directory.

    Attributes:
        directory: the run directory.
        config: the model's hyper-parameters (vocabulary sizes are the built vocabularies').
        settings: the training settings the run used.
        model: the best-validation `keras.Model` (compiled with the run's loss and metrics).
        source_tokenizer: `SubwordTokenizer` of the source language.
        target_tokenizer: `SubwordTokenizer` of the target language.
        history: per-epoch logs, `{"epoch": [...], "loss": [...], "val_loss": [...], ...}`.
    """

    directory: Path
    config: TransformerConfig
    settings: TrainingSettings
    model: keras.Model
    source_tokenizer: SubwordTokenizer
    target_tokenizer: SubwordTokenizer
    history: dict


def load_run_tokenizers(run_dir: str | Path) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """Reads the run's `(source, target)` tokenizers; errors name the file that is missing/bad."""
    directory = RunPaths(Path(run_dir)).vocab
    if not directory.is_dir():
        raise FileNotFoundError(f"{directory}: missing vocabulary directory")
    try:
        return load_tokenizers(directory)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{error.filename}: missing tokenizer file") from error
    except (OSError, ValueError, KeyError) as error:
        raise ValueError(f"{directory}: cannot load the tokenizers: {error}") from error


def read_history(run_dir: str | Path) -> dict:
    """Reads `history.json`; an empty dict if the run has not finished an epoch yet."""
    path = RunPaths(Path(run_dir)).history
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: invalid JSON: {error.msg}") from error


def load_run(run_dir: str | Path, compile: bool = True) -> Run:
    """Loads a finished (or interrupted, once it has saved a best model) training run.

    Args:
        run_dir: the directory `keras-transformer train --run-dir` wrote.
        compile: restore the model's optimizer, loss and metrics too.

    Returns:
        a `Run`.

    Raises:
        FileNotFoundError: naming the file or directory that is missing.
        ValueError: naming the file that cannot be read.

    Example:
        >>> run = load_run("runs/demo")
        >>> ids = run.source_tokenizer.tokenize(tf.constant(["twenty one"]))
    """
    paths = RunPaths(Path(run_dir))
    if not paths.root.is_dir():
        raise FileNotFoundError(f"{paths.root}: no such run directory")
    config, settings = load_run_config(paths.config)
    source_tokenizer, target_tokenizer = load_run_tokenizers(paths.root)
    if not paths.model.is_file():
        raise FileNotFoundError(
            f"{paths.model}: missing (the run has not finished an epoch with validation yet)"
        )
    try:
        model = keras.saving.load_model(paths.model, compile=compile)
    except (OSError, ValueError) as error:
        raise ValueError(f"{paths.model}: cannot load the model: {error}") from error
    return Run(
        directory=paths.root,
        config=config,
        settings=settings,
        model=model,
        source_tokenizer=source_tokenizer,
        target_tokenizer=target_tokenizer,
        history=read_history(paths.root),
    )
