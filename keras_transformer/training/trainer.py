"""`train`: data -> vocabularies -> model -> `model.fit` -> run directory."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import random
import shutil
import warnings
from pathlib import Path

import keras
import numpy as np
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
from keras_transformer.text.tokenizer_pair import load_tokenizers, tokenizers_from_vocabularies
from keras_transformer.text.vocabulary import build_tokenizers
from keras_transformer.training.accumulation import TokenWeightedSteps, group_batches
from keras_transformer.training.callbacks import (
    BestModel,
    CheckpointAverage,
    HistoryWriter,
    Patience,
    StepLimit,
    Throughput,
    TimeBudget,
)
from keras_transformer.training.distribution import (
    any_worker,
    is_chief,
    make_strategy,
    patch_for_strategy,
    worker_directory,
)
from keras_transformer.training.evaluation import BleuEvaluation, BleuScorer
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.schedules import TransformerSchedule

# Settings that may change when an interrupted run is resumed; anything else would make the
# backed-up weights or the vocabularies mean something else.
RESUMABLE_CHANGES = frozenset({
    "epochs", "steps", "time_budget_minutes", "average_checkpoints", "patience", "shuffle_buffer",
})
# Under XLA, batch lengths are padded to multiples of this (see `pad_to_multiple`).
SHAPE_MULTIPLE = 8
# Where a run keeps the checkpoints it averages (`average_checkpoints`), in the run directory.
CHECKPOINTS = "checkpoints"


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

    With `settings.vocab_dir`, that vocabulary directory is copied (nothing is learned).
    Otherwise they are learned from (a seeded sample of at most `settings.vocab_sample_size`
    pairs of) the training text with tensorflow-text's vocabulary builder; for the built-in demo
    data, the demo task's rule-made vocabularies are used instead (the builder needs minutes on
    its long German compounds and still spells small numbers letter by letter).

    Raises:
        FileNotFoundError: `vocab_dir` is missing or lacks a tokenizer file.
        ValueError: `vocab_dir` does not match `shared_vocab` / `lower_case`.
    """
    if settings.vocab_dir is not None:
        return reuse_vocabulary(settings, Path(settings.vocab_dir), directory)
    if settings.source_file is None and settings.tsv_file is None:
        english, german = demo_vocabularies()
        if settings.shared_vocab:
            known = set(english)
            return tokenizers_from_vocabularies(
                directory, english + [token for token in german if token not in known], None
            )
        return tokenizers_from_vocabularies(directory, english, german)
    return build_tokenizers(
        sample_pairs(corpus, settings.vocab_sample_size, settings.seed),
        directory,
        vocab_size=settings.vocab_size,
        lower_case=settings.lower_case,
        shared=settings.shared_vocab,
    )


def reuse_vocabulary(
    settings: TrainingSettings, source: Path, directory: Path
) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """Copies an existing vocabulary directory (e.g. another run's `vocab/`) to `directory` and
    loads it, after checking that it fits the settings.

    Raises:
        FileNotFoundError: `source` is missing or lacks a tokenizer file.
        ValueError: `source` is shared but `shared_vocab` is false (or the reverse), or was
            built with another `lower_case`.
    """
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such vocabulary directory")
    try:
        source_tokenizer, target_tokenizer = load_tokenizers(source)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{source}: missing tokenizer file {error.filename}") from error
    shared = source_tokenizer is target_tokenizer
    if shared != settings.shared_vocab:
        kind = "one shared vocabulary" if shared else "separate source and target vocabularies"
        raise ValueError(
            f"{source}: holds {kind}, but shared_vocab is {str(settings.shared_vocab).lower()}"
        )
    if source_tokenizer.lower_case != settings.lower_case:
        raise ValueError(
            f"{source}: was built with lower_case {str(source_tokenizer.lower_case).lower()}, "
            f"but lower_case is {str(settings.lower_case).lower()}"
        )
    if source.resolve() != directory.resolve():
        shutil.copytree(source, directory, dirs_exist_ok=True)
    return load_tokenizers(directory)


def sample_pairs(corpus: ParallelCorpus, size: int, seed: int) -> ParallelCorpus:
    """A seeded random sample of at most `size` pairs (in corpus order), or the whole corpus."""
    if len(corpus) <= size:
        return corpus
    picked = sorted(random.Random(seed).sample(range(len(corpus)), size))
    return ParallelCorpus([corpus.sources[i] for i in picked], [corpus.targets[i] for i in picked])


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


def _check_step_settings(settings: TrainingSettings) -> None:
    if settings.steps is None:
        for name in ("save_every", "eval_every"):
            if getattr(settings, name) is not None:
                raise ValueError(f"{name} needs steps (it counts optimizer steps of a run)")
    if settings.batch_tokens is not None and settings.batch_tokens < settings.accumulate_steps:
        raise ValueError(
            f"batch_tokens ({settings.batch_tokens}) must be at least accumulate_steps "
            f"({settings.accumulate_steps}): each accumulated batch gets "
            "batch_tokens // accumulate_steps target tokens"
        )


def backed_up_epoch(paths: RunPaths) -> int:
    """How many epochs (save intervals) the interrupted run in `paths` had backed up (0 if none).

    Read from `BackupAndRestore`'s metadata, which it writes after the weights.
    """
    try:
        return int(json.loads((paths.backup / "training_metadata.json").read_text())["epoch"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


def data_seed(seed: int, start_epoch: int) -> int:
    """The shuffle seed of a run that starts (or resumes) at epoch `start_epoch`.

    A resumed run must not replay the data order of the run's start: its position mixes into
    the seed (a fresh run keeps `seed` itself).
    """
    if start_epoch == 0:
        return seed
    return int(np.random.SeedSequence([seed, start_epoch]).generate_state(1)[0])


def batch_options(config: TransformerConfig, settings: TrainingSettings) -> dict:
    """`make_dataset` batching keywords: each (accumulated) batch gets
    `batch_tokens // accumulate_steps` target tokens, or `batch_size` pairs."""
    options = dict(batch_size=settings.batch_size, max_length=config.max_length)
    if settings.batch_tokens is not None:
        options["batch_tokens"] = settings.batch_tokens // settings.accumulate_steps
    return options


def training_dataset(
    corpus: ParallelCorpus,
    source_tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer,
    config: TransformerConfig,
    settings: TrainingSettings,
    *,
    start_epoch: int = 0,
    replicas: int = 1,
) -> tf.data.Dataset:
    """The batches `fit` trains on: shuffled and bucketed by `make_dataset` (global batches,
    which `fit` splits over replicas), repeated for step-based runs and fixed-length epochs,
    padded to `SHAPE_MULTIPLE` under XLA, grouped for gradient accumulation.

    Args:
        corpus: training pairs.
        source_tokenizer: source tokenizer.
        target_tokenizer: target tokenizer.
        config: the model's config (`max_length`).
        settings: batching, accumulation, seed, XLA.
        start_epoch: the epoch a resumed run starts at (reseeds the shuffle, see `data_seed`).
        replicas: replicas in sync (groups get a multiple of this many rows).
    """
    dataset = make_dataset(
        corpus, source_tokenizer, target_tokenizer,
        seed=data_seed(settings.seed, start_epoch), **batch_options(config, settings),
    )
    if settings.steps is not None or settings.steps_per_epoch is not None:
        dataset = dataset.repeat()
    if settings.jit_compile:
        dataset = pad_to_multiple(dataset, SHAPE_MULTIPLE)
    if settings.accumulate_steps > 1:
        dataset = group_batches(dataset, settings.accumulate_steps, row_multiple=replicas)
    return dataset


def fit_length(settings: TrainingSettings) -> tuple[int, int | None]:
    """`(epochs, steps_per_epoch)` for `fit`: a step-based run's epochs are save intervals."""
    if settings.steps is None:
        return settings.epochs, settings.steps_per_epoch
    interval = settings.checkpoint_interval
    return math.ceil(settings.steps / interval), interval


def _best(history: dict, name: str, pick) -> float | None:
    return pick((value for value in history.get(name, []) if value is not None), default=None)


def _callbacks(
    settings: TrainingSettings,
    paths: RunPaths,
    strategy: tf.distribute.Strategy,
    token_steps: TokenWeightedSteps,
    val_data: tf.data.Dataset,
    bleu: BleuScorer | None,
    previous: dict,
) -> list[keras.callbacks.Callback]:
    """The run's callbacks, in the order they must see each epoch's logs."""
    chief = is_chief(strategy)
    agree = functools.partial(any_worker, strategy)
    best_val_loss = _best(previous, "val_loss", min)
    best_val_bleu = _best(previous, "val_bleu", max)
    # First: adds the optimizer step and tokens per second to the logs everyone else sees.
    callbacks = [Throughput(token_steps.source_tokens, token_steps.target_tokens),
                 keras.callbacks.TerminateOnNaN()]
    if settings.steps is not None:
        callbacks.append(StepLimit(settings.steps))
    if settings.time_budget_minutes is not None:
        callbacks.append(TimeBudget(settings.time_budget_minutes, agree=agree))
    if bleu is not None:
        every = settings.eval_every // settings.checkpoint_interval
        callbacks.append(BleuEvaluation(bleu, every))
    monitor, mode, best = (
        ("val_bleu", "max", best_val_bleu) if bleu else ("val_loss", "min", best_val_loss)
    )
    if chief:
        callbacks += [
            BestModel(paths.model, monitor, mode=mode, best=best),
            keras.callbacks.TensorBoard(str(paths.logs), write_graph=False),
            HistoryWriter(paths.history, paths.learning_curve, previous),
        ]
    if settings.patience is not None:
        callbacks.append(
            Patience(monitor, settings.patience, mode=mode, previous=previous, agree=agree)
        )
    if settings.average_checkpoints > 1:
        callbacks.append(CheckpointAverage(
            settings.average_checkpoints, val_data, paths.model, best_val_loss, save=chief,
            directory=paths.root / CHECKPOINTS, bleu=bleu, best_val_bleu=best_val_bleu,
            unit="epochs" if settings.steps is None else "checkpoints",
        ))
    # Last, so that a backup of epoch k implies that epoch k's checkpoint and history are written.
    callbacks.append(keras.callbacks.BackupAndRestore(str(paths.backup)))
    return callbacks


def train(
    config: TransformerConfig,
    settings: TrainingSettings,
    run_dir: str | Path,
    *,
    verbose: int | str = "auto",
) -> Run | None:
    """Trains a Transformer with `model.fit` and fills the run directory (see `run_dir`).

    Steps: read the data (demo data set without files), build the WordPiece vocabularies (or
    reuse `settings.vocab_dir`, or the run's own when resuming), set the config's vocabulary
    sizes from them, write `config.json`, then `fit` with BackupAndRestore, the best-validation
    model, TensorBoard, TerminateOnNaN, the time budget, the history / learning-curve
    writer and, as the settings ask, BLEU evaluation, early stopping and checkpoint averaging.

    Runs count epochs (`settings.epochs`) or optimizer steps (`settings.steps`). A step-based
    run is cut into save intervals of `settings.checkpoint_interval` steps over the repeated
    data, which `fit` sees as epochs: backups, checkpoints, validation, history and TensorBoard
    happen once per interval, so an interrupted run loses at most one. One `fit` step is one
    optimizer update, over `settings.accumulate_steps` batches (see `TokenWeightedSteps`).

    An interrupted run (`backup/` present) resumes from its last backed-up epoch or interval
    when started again with the same settings, with a reseeded shuffle (see `data_seed`).

    In a multi-worker cluster every worker calls `train`; only the chief writes `run_dir`, the
    others keep their backups under `run_dir/workers/<task>/`.

    Args:
        config: model hyper-parameters; `source_vocab_size` and `target_vocab_size` are replaced
            by the sizes of the built vocabularies.
        settings: training settings.
        run_dir: the run directory (created if missing).
        verbose: `model.fit` verbosity (1: progress bars).

    Returns:
        the run as `load_run` reads it back (best model: by validation BLEU with
        `settings.eval_every`, else by validation loss), or None on a worker that is not the
        chief.

    Raises:
        DataError: unusable training data (names the file and line).
        ValueError: a resumed run whose settings differ from the interrupted one, or settings
            that do not fit together.
        RuntimeError: the loss became NaN.

    Example:
        >>> run = train(TransformerConfig(d_model=64, num_heads=4, d_ff=128),
        ...             TrainingSettings(steps=2000, save_every=500, eval_every=1000,
        ...                              batch_tokens=4096), "runs/demo")
        >>> run.history["val_bleu"]
    """
    _check_step_settings(settings)
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

    train_data = training_dataset(
        train_corpus, source_tokenizer, target_tokenizer, config, settings,
        start_epoch=backed_up_epoch(paths) if resuming else 0,
        replicas=strategy.num_replicas_in_sync,
    )
    val_data = make_dataset(val_corpus, source_tokenizer, target_tokenizer, shuffle=False,
                            **batch_options(config, settings))
    if settings.jit_compile:
        val_data = pad_to_multiple(val_data, SHAPE_MULTIPLE)

    with strategy.scope(), dtype_policy(settings.mixed_precision):
        model = build_transformer(config)
        compile_model(model, config, settings)
        token_steps = TokenWeightedSteps(model, settings.accumulate_steps,
                                         trim=not settings.jit_compile)
    token_steps.install()
    patch_for_strategy(model, strategy)
    print(f"Model: {model.count_params():,} parameters.", flush=True)

    bleu = None
    if settings.eval_every is not None:
        count = settings.eval_sentences
        bleu = BleuScorer(model, source_tokenizer, target_tokenizer, val_corpus.sources[:count],
                          val_corpus.targets[:count], lowercase=settings.lower_case)
    previous = read_history(paths.root) if resuming else {}
    callbacks = _callbacks(settings, paths, strategy, token_steps, val_data, bleu, previous)
    epochs, steps_per_epoch = fit_length(settings)
    with warnings.catch_warnings():
        # Bucketed batches have no length known in advance; Keras finds the end of the first
        # epoch by running out of data and warns about it, although nothing is wrong.
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        history = model.fit(
            train_data,
            validation_data=val_data,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
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
