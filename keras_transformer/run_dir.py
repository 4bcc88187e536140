"""The run directory: what a training run leaves behind, its `config.json` format, and
`load_run` to read it back. Training writes it; evaluation, export and loading read it.

`config.json` is one flat JSON object: `TransformerConfig`'s field names plus `TrainingSettings`'
field names, side by side, written with exactly what the run used, so it can be passed back with
`--config` to repeat the run. It is the only JSON format of hyper-parameters.

Layout:

    <run_dir>/
      config.json          flat: TransformerConfig fields + training settings the run used
      vocab/               tokenizers: source/ and target/, or shared/ (vocab.txt, tokenizer.json)
      model.keras          the best model (validation BLEU with `eval_every`, else loss), full
                           Keras file
      run_info.json        what the run found and measured: pair counts, training time, the kept
                           model's validation loss (and BLEU with sacreBLEU's signature), the
                           project version and git commit it was trained with
      history.json         one entry per epoch (save interval of a step-based run):
                           {"epoch": [1, 2, ...], "step": [...], "loss": [...], "val_loss": [...],
                           "val_bleu": [..., null, ...], "target_tokens_per_second": [...], ...}
      learning_curve.png   loss, accuracy and BLEU against epoch or optimizer step
      logs/                TensorBoard event files
      checkpoints/         the last `average_checkpoints` saved weights, averaged at the end
      backup/              BackupAndRestore state while a run is unfinished
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import keras

# The modules whose classes a `model.keras` file names (the package imports lazily, so in a
# fresh process nothing else may have registered them with Keras yet).
import keras_transformer.layers  # noqa: F401
import keras_transformer.training.losses  # noqa: F401
import keras_transformer.training.metrics  # noqa: F401
import keras_transformer.training.schedules  # noqa: F401
from keras_transformer.config import TransformerConfig
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.tokenizer import SubwordTokenizer
from keras_transformer.text.tokenizer_pair import load_tokenizers


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
    def info(self) -> Path:
        return self.root / "run_info.json"

    @property
    def learning_curve(self) -> Path:
        return self.root / "learning_curve.png"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def backup(self) -> Path:
        return self.root / "backup"

    def has_model(self) -> bool:
        """Whether this is a run directory with a saved model (`config.json` + `model.keras`)."""
        return self.config.is_file() and self.model.is_file()


CONFIG_FIELDS = frozenset(field.name for field in dataclasses.fields(TransformerConfig))
SETTINGS_FIELDS = frozenset(field.name for field in dataclasses.fields(TrainingSettings))


def split_values(
    values: dict,
    config: TransformerConfig | None = None,
    settings: TrainingSettings | None = None,
) -> tuple[TransformerConfig, TrainingSettings]:
    """Builds a config and settings from one flat dict of their field names.

    Args:
        values: `TransformerConfig` and `TrainingSettings` fields, mixed.
        config: defaults for the config fields not in `values`.
        settings: defaults for the settings fields not in `values`.

    Returns:
        `(config, settings)`.

    Raises:
        ValueError: naming the first unknown key, or the field whose value is bad.
    """
    unknown = sorted(set(values) - CONFIG_FIELDS - SETTINGS_FIELDS)
    if unknown:
        raise ValueError(
            f"unknown key {unknown[0]!r} (neither a TransformerConfig field nor a training "
            "setting)"
        )
    config_values = {key: value for key, value in values.items() if key in CONFIG_FIELDS}
    settings_values = {key: value for key, value in values.items() if key in SETTINGS_FIELDS}
    config = (config or TransformerConfig()).replace(**config_values)
    try:
        settings = (settings or TrainingSettings()).replace(**settings_values)
    except ValueError as error:
        raise ValueError(f"training setting {error}") from error
    return config, settings


def read_config_values(path: str | Path) -> dict:
    """The JSON object of a config file, unchecked; errors name the file (and the line of bad
    JSON)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such config file")
    try:
        values = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: invalid JSON: {error.msg}") from error
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a JSON object of config fields and training settings")
    return values


def load_run_config(path: str | Path) -> tuple[TransformerConfig, TrainingSettings]:
    """Reads a flat JSON run configuration; every error names the file and the key.

    Args:
        path: JSON object of `TransformerConfig` and `TrainingSettings` fields; missing ones
            take their defaults.

    Returns:
        `(config, settings)`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: `"<path>: ..."` for bad JSON (with its line), an unknown key, or a bad value.

    Example:
        >>> config, settings = load_run_config("runs/demo/config.json")  # doctest: +SKIP
    """
    path = Path(path)
    values = read_config_values(path)
    try:
        return split_values(values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path}: {error}") from error


def save_run_config(
    path: str | Path, config: TransformerConfig, settings: TrainingSettings
) -> None:
    """Writes `config` and `settings` as one flat, sorted JSON object (what `load_run_config`
    reads)."""
    values = {**config.to_dict(), **settings.to_dict()}
    Path(path).write_text(json.dumps(values, indent=2, sort_keys=True) + "\n", encoding="utf-8")


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
        decoding: the decoding chosen on validation at the end of training (`tune_decoding`),
            `{"beam_width": ..., "alpha": ...}`, or empty: the library's defaults.
    """

    directory: Path
    config: TransformerConfig
    settings: TrainingSettings
    model: keras.Model
    source_tokenizer: SubwordTokenizer
    target_tokenizer: SubwordTokenizer
    history: dict
    decoding: dict = dataclasses.field(default_factory=dict)


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


def _read_json(path: Path) -> dict:
    """A JSON file of the run, or an empty dict if it is not written yet; errors name the file
    and line."""
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ValueError(f"{path}:{error.lineno}: invalid JSON: {error.msg}") from error


def read_history(run_dir: str | Path) -> dict:
    """Reads `history.json`; an empty dict if the run has not finished an epoch yet."""
    return _read_json(RunPaths(Path(run_dir)).history)


def read_run_info(run_dir: str | Path) -> dict:
    """Reads `run_info.json`; an empty dict for a run that has not written it yet (or trained
    before it existed)."""
    return _read_json(RunPaths(Path(run_dir)).info)


def write_run_info(run_dir: str | Path, info: dict) -> None:
    """Writes `run_info.json` whole (replacing it in one rename, so a reader never sees half)."""
    path = RunPaths(Path(run_dir)).info
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def run_decoding(info: dict) -> dict:
    """`{"beam_width", "alpha"}` chosen for a run's kept model, from its `run_info.json`
    contents, or `{}` if none was chosen (`tune_decoding`)."""
    decoding = info.get("decoding") or {}
    return {key: decoding[key] for key in ("beam_width", "alpha") if key in decoding}


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
        >>> run = load_run("runs/demo")  # doctest: +SKIP
        >>> ids = run.source_tokenizer.tokenize(tf.constant(["twenty one"]))  # doctest: +SKIP
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
        decoding=run_decoding(read_run_info(paths.root)),
    )

