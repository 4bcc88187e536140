"""`train`: data -> vocabularies -> model -> `model.fit` -> run directory."""

from __future__ import annotations

import contextlib
import functools
import math
import random
import warnings
from pathlib import Path

import keras
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.model import build_transformer
from keras_transformer.run_dir import (
    Run,
    RunPaths,
    load_run,
    load_run_config,
    load_run_tokenizers,
    read_history,
    save_run_config,
)
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.data import (
    ParallelCorpus,
    make_dataset,
    read_parallel_files,
    read_tsv,
)
from keras_transformer.text.demo_data import demo_vocabularies, make_demo_corpus
from keras_transformer.text.tokenizer import SubwordTokenizer
from keras_transformer.text.tokenizer_pair import tokenizers_from_vocabularies
from keras_transformer.text.vocabulary import build_tokenizers
from keras_transformer.training.callbacks import (
    CheckpointAverage,
    HistoryWriter,
    TimeBudget,
)
from keras_transformer.training.distribution import (
    any_worker,
    is_chief,
    make_strategy,
    patch_for_multi_worker,
    worker_directory,
)
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.schedules import TransformerSchedule

# Settings that may change when an interrupted run is resumed; anything else would make the
# backed-up weights or the vocabularies mean something else.
RESUMABLE_CHANGES = frozenset({"epochs", "time_budget_minutes", "average_checkpoints"})
# Under XLA, batch lengths are padded to multiples of this (see `pad_to_multiple`).
SHAPE_MULTIPLE = 8


def load_corpora(settings: TrainingSettings) -> tuple[ParallelCorpus, ParallelCorpus]:
    """Reads the training and validation pairs the settings name.

    Without data files this is the built-in demo data set (English -> German number words) with
    its own validation split. Without validation files, a seeded random
    `settings.validation_fraction` of the training pairs (at least one) is held out.

    Returns:
        `(train, validation)`.

    Raises:
        DataError: naming the file and line of unusable data.
    """
    if settings.tsv_file is not None:
        train = read_tsv(settings.tsv_file)
    elif settings.source_file is not None:
        train = read_parallel_files(settings.source_file, settings.target_file)
    else:
        train, validation = make_demo_corpus(seed=settings.seed)
        if settings.val_source_file is None:
            return train, validation
    if settings.val_source_file is not None:
        return train, read_parallel_files(settings.val_source_file, settings.val_target_file)
    return hold_out(train, settings.validation_fraction, settings.seed)


def make_tokenizers(
    settings: TrainingSettings, corpus: ParallelCorpus, directory: Path
) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """The run's WordPiece tokenizers, saved in `directory`.

    Learned from the training text with tensorflow-text's vocabulary builder; for the built-in
    demo data, the demo task's rule-made vocabularies instead (the builder needs minutes on its
    long German compounds and still spells small numbers letter by letter).
    """
    if settings.source_file is None and settings.tsv_file is None:
        english, german = demo_vocabularies()
        if settings.shared_vocab:
            known = set(english)
            return tokenizers_from_vocabularies(
                directory, english + [token for token in german if token not in known], None
            )
        return tokenizers_from_vocabularies(directory, english, german)
    return build_tokenizers(
        corpus,
        directory,
        vocab_size=settings.vocab_size,
        lower_case=settings.lower_case,
        shared=settings.shared_vocab,
    )


def hold_out(
    corpus: ParallelCorpus, fraction: float, seed: int
) -> tuple[ParallelCorpus, ParallelCorpus]:
    """Splits a seeded random `fraction` (at least one pair, never all) off `corpus`.

    Returns:
        `(rest, held_out)`.
    """
    if len(corpus) < 2:
        raise ValueError("need at least 2 sentence pairs to hold some out for validation")
    count = min(len(corpus) - 1, max(1, round(fraction * len(corpus))))
    order = list(range(len(corpus)))
    random.Random(seed).shuffle(order)
    held, kept = sorted(order[:count]), sorted(order[count:])

    def subset(indices):
        return ParallelCorpus(
            [corpus.sources[i] for i in indices], [corpus.targets[i] for i in indices]
        )

    return subset(kept), subset(held)


def pad_to_multiple(dataset: tf.data.Dataset, multiple: int) -> tf.data.Dataset:
    """Pads the token dimension of every batch up to a multiple of `multiple` (with id 0).

    With XLA every new input shape is a new compilation; bucketed batches come in every length,
    padded ones in `max_length / multiple` lengths per side, for a little more padding.

    Args:
        dataset: `({"source_tokens", "target_tokens"}, labels)` batches, `(batch, length)` each.
        multiple: the length quantum.

    Returns:
        the same batches, zero-padded on the right.
    """

    def pad(tokens):
        length = tf.shape(tokens)[1]
        return tf.pad(tokens, [[0, 0], [0, (-length) % multiple]])

    return dataset.map(
        lambda inputs, labels: ({name: pad(ids) for name, ids in inputs.items()}, pad(labels)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def compile_model(
    model: keras.Model, config: TransformerConfig, settings: TrainingSettings
) -> None:
    """Adam(0.9, 0.98, 1e-9) on the warm-up schedule, label-smoothed masked loss, masked
    accuracy (section 5.3 and 5.4 of the paper)."""
    schedule = TransformerSchedule(
        config.d_model, settings.warmup_steps, settings.learning_rate_scale
    )
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=config.label_smoothing),
        metrics=[MaskedAccuracy()],
        jit_compile=settings.jit_compile,
    )


@contextlib.contextmanager
def dtype_policy(mixed_precision: bool):
    """Builds layers under a mixed policy (float16 on GPU, bfloat16 on CPU) and restores the
    global policy afterwards: the layers keep the policy they were built with."""
    previous = keras.config.dtype_policy()
    if mixed_precision:
        gpu = bool(tf.config.list_logical_devices("GPU"))
        keras.config.set_dtype_policy("mixed_float16" if gpu else "mixed_bfloat16")
    try:
        yield
    finally:
        keras.config.set_dtype_policy(previous)


def _check_resumable(paths: RunPaths, config: TransformerConfig, settings: TrainingSettings):
    """Raises if the interrupted run in `paths` used a different model, data or vocabulary."""
    old_config, old_settings = load_run_config(paths.config)
    old = {**old_config.to_dict(), **old_settings.to_dict()}
    new = {**config.to_dict(), **settings.to_dict()}
    changed = sorted(key for key in new if key not in RESUMABLE_CHANGES and old[key] != new[key])
    if changed:
        details = ", ".join(f"{key}: {old[key]!r} -> {new[key]!r}" for key in changed)
        raise ValueError(
            f"{paths.config}: cannot resume the interrupted run in {paths.root} with different "
            f"settings ({details}); use another run directory or delete {paths.backup}"
        )


def train(
    config: TransformerConfig,
    settings: TrainingSettings,
    run_dir: str | Path,
    *,
    verbose: int | str = "auto",
) -> Run | None:
    """Trains a Transformer with `model.fit` and fills the run directory (see `run_dir`).

    Steps: read the data (demo data set without files), build the WordPiece vocabularies (or
    reuse them when resuming), set the config's vocabulary sizes from them, write
    `config.json`, then `fit` with BackupAndRestore, best-validation checkpoint, TensorBoard,
    TerminateOnNaN, the time budget and the history / learning-curve writer. An interrupted run
    (`backup/` present) resumes from its last finished epoch when started again with the same
    settings.

    In a multi-worker cluster every worker calls `train`; only the chief writes `run_dir`, the
    others keep their backups under `run_dir/workers/<task>/`.

    Args:
        config: model hyper-parameters; `source_vocab_size` and `target_vocab_size` are replaced
            by the sizes of the built vocabularies.
        settings: training settings.
        run_dir: the run directory (created if missing).
        verbose: `model.fit` verbosity (1: progress bars).

    Returns:
        the run as `load_run` reads it back (best-validation model), or None on a worker that
        is not the chief.

    Raises:
        DataError: unusable training data (names the file and line).
        ValueError: a resumed run whose settings differ from the interrupted one.
        RuntimeError: the loss became NaN.

    Example:
        >>> run = train(TransformerConfig(d_model=64, num_heads=4, d_ff=128),
        ...             TrainingSettings(epochs=5, vocab_size=1000), "runs/demo")
        >>> run.history["val_loss"][-1]
    """
    run_dir = Path(run_dir)
    strategy = make_strategy(settings.strategy)
    chief = is_chief(strategy)
    paths = RunPaths(worker_directory(run_dir, strategy))
    paths.root.mkdir(parents=True, exist_ok=True)
    resuming = paths.backup.is_dir()

    keras.utils.set_random_seed(settings.seed)
    train_corpus, val_corpus = load_corpora(settings)
    if resuming:
        source_tokenizer, target_tokenizer = load_run_tokenizers(paths.root)
    else:
        source_tokenizer, target_tokenizer = make_tokenizers(settings, train_corpus, paths.vocab)
    config = config.replace(
        source_vocab_size=source_tokenizer.vocab_size,
        target_vocab_size=target_tokenizer.vocab_size,
    )
    if resuming:
        _check_resumable(paths, config, settings)
    save_run_config(paths.config, config, settings)

    # model.fit splits each batch across replicas (and workers): batch_size is the global batch.
    dataset_options = dict(batch_size=settings.batch_size, max_length=config.max_length)
    train_data = make_dataset(
        train_corpus, source_tokenizer, target_tokenizer, seed=settings.seed, **dataset_options
    )
    if settings.steps_per_epoch is not None:
        train_data = train_data.repeat()
    val_data = make_dataset(
        val_corpus, source_tokenizer, target_tokenizer, shuffle=False, **dataset_options
    )
    if settings.jit_compile:
        train_data = pad_to_multiple(train_data, SHAPE_MULTIPLE)
        val_data = pad_to_multiple(val_data, SHAPE_MULTIPLE)

    with strategy.scope(), dtype_policy(settings.mixed_precision):
        model = build_transformer(config)
        compile_model(model, config, settings)
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        patch_for_multi_worker(model, strategy)

    previous = read_history(paths.root) if resuming else {}
    best_val_loss = min(previous.get("val_loss", []), default=None)
    callbacks = [keras.callbacks.TerminateOnNaN()]
    if settings.time_budget_minutes is not None:
        agree = functools.partial(any_worker, strategy)
        callbacks.append(TimeBudget(settings.time_budget_minutes, agree=agree))
    if chief:
        callbacks += [
            keras.callbacks.ModelCheckpoint(
                str(paths.model),
                monitor="val_loss",
                save_best_only=True,
                initial_value_threshold=best_val_loss,
            ),
            keras.callbacks.TensorBoard(str(paths.logs), write_graph=False),
            HistoryWriter(paths.history, paths.learning_curve, previous),
        ]
    if settings.average_checkpoints > 1:
        callbacks.append(CheckpointAverage(
            settings.average_checkpoints, val_data, paths.model, best_val_loss, save=chief
        ))
    # Last, so that a backup of epoch k implies that epoch k's checkpoint and history are written.
    callbacks.append(keras.callbacks.BackupAndRestore(str(paths.backup)))
    with warnings.catch_warnings():
        # Bucketed batches have no length known in advance; Keras finds the end of the first
        # epoch by running out of data and warns about it, although nothing is wrong.
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        history = model.fit(
            train_data,
            validation_data=val_data,
            epochs=settings.epochs,
            steps_per_epoch=settings.steps_per_epoch,
            callbacks=callbacks,
            shuffle=False,  # make_dataset shuffles (seeded) before bucketing
            verbose=verbose,
        )
    losses = history.history.get("loss", [])
    if losses and math.isnan(losses[-1]):
        raise RuntimeError(
            f"training diverged: the loss became NaN in epoch {len(losses)}; try a smaller "
            "learning_rate_scale or more warmup_steps"
        )
    return load_run(run_dir) if chief else None
