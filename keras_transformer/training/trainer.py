"""`train`: data -> vocabularies -> model -> `model.fit` -> run directory."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import time
import warnings
from pathlib import Path

import keras
import sacrebleu
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.inference.defaults import DEFAULT_BEAM_WIDTH, LENGTH_PENALTY_GRID
from keras_transformer.model import build_transformer
from keras_transformer.run_dir import (
    Run,
    RunPaths,
    load_run,
    load_run_config,
    load_run_tokenizers,
    read_history,
    run_decoding,
    save_run_config,
)
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.data import make_dataset
from keras_transformer.training.accumulation import TokenWeightedSteps
from keras_transformer.training.callbacks import (
    BestModel,
    CheckpointAverage,
    Cooldown,
    FirstStep,
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
from keras_transformer.training.evaluation import (
    BleuEvaluation,
    BleuScorer,
    LengthPenaltySearch,
)
from keras_transformer.training.inputs import (
    SHAPE_MULTIPLE,
    batch_options,
    load_corpora,
    make_tokenizers,
    pad_to_multiple,
    training_dataset,
    training_pairs,
    worker_training_dataset,
)
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.run_info import RunInfo
from keras_transformer.training.schedules import LinearCooldown, TransformerSchedule

# Settings that may change when an interrupted run is resumed; anything else would make the
# backed-up weights or the vocabularies mean something else.
RESUMABLE_CHANGES = frozenset({
    "epochs", "steps", "time_budget_minutes", "average_checkpoints", "patience", "shuffle_buffer",
    "tune_decoding",
})
# Where a run keeps the checkpoints it averages (`average_checkpoints`), in the run directory.
CHECKPOINTS = "checkpoints"


def compile_model(
    model: keras.Model, config: TransformerConfig, settings: TrainingSettings
) -> keras.optimizers.schedules.LearningRateSchedule:
    """Adam(0.9, 0.98, 1e-9) on the warm-up schedule, label-smoothed masked loss, masked
    accuracy (section 5.3 and 5.4 of the paper).

    Returns:
        the learning-rate schedule: `TransformerSchedule`, wrapped in a `LinearCooldown` (for
        the `Cooldown` callback to plan) with `settings.cooldown_fraction`.
    """
    schedule = TransformerSchedule(
        config.d_model, settings.warmup_steps, settings.learning_rate_scale
    )
    if settings.cooldown_fraction is not None:
        schedule = LinearCooldown(schedule)
    model.compile(
        optimizer=keras.optimizers.Adam(schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=config.label_smoothing),
        metrics=[MaskedAccuracy()],
        jit_compile=settings.jit_compile,
    )
    return schedule


@contextlib.contextmanager
def unknown_dataset_lengths():
    """Silences Keras' warning at the end of a dataset of unknown length: bucketed batches have
    no length known in advance, so Keras finds the end of the first epoch (or evaluation) by
    running out of data and warns about it, although nothing is wrong."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Your input ran out of data")
        yield


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


def backed_up_epoch(paths: RunPaths) -> int:
    """How many epochs (save intervals) the interrupted run in `paths` had backed up (0 if none).

    Read from `BackupAndRestore`'s metadata, which it writes after the weights.
    """
    try:
        return int(json.loads((paths.backup / "training_metadata.json").read_text())["epoch"])
    except (FileNotFoundError, json.JSONDecodeError, KeyError):
        return 0


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
    schedule: keras.optimizers.schedules.LearningRateSchedule,
    val_data: tf.data.Dataset,
    bleu: BleuScorer | None,
    search: LengthPenaltySearch | None,
    previous: dict,
    start: float,
    extra: list[keras.callbacks.Callback],
) -> list[keras.callbacks.Callback]:
    """The run's callbacks, in the order they must see each epoch's logs (`start`: when the
    run started, by `time.monotonic()`; `schedule`: the optimizer's, which `Cooldown` plans with
    `cooldown_fraction`; `search`: with `tune_decoding`, what the checkpoint
    average and the best save are compared by; `extra`: the caller's own, and the chief's
    run-info writer)."""
    chief = is_chief(strategy)
    agree = functools.partial(any_worker, strategy)
    best_val_loss = _best(previous, "val_loss", min)
    best_val_bleu = _best(previous, "val_bleu", max)
    # First: adds the optimizer step and tokens per second to the logs everyone else sees.
    callbacks = [Throughput(token_steps.source_tokens, token_steps.target_tokens),
                 FirstStep(start),
                 keras.callbacks.TerminateOnNaN()]
    if settings.steps is not None:
        callbacks.append(StepLimit(settings.steps))
    if settings.time_budget_minutes is not None:
        callbacks.append(TimeBudget(settings.time_budget_minutes, agree=agree))
    if settings.cooldown_fraction is not None:
        callbacks.append(Cooldown(schedule, settings.cooldown_fraction, steps=settings.steps,
                                  minutes=settings.time_budget_minutes, agree=agree))
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
            directory=paths.root / CHECKPOINTS, bleu=search or bleu, best_val_bleu=best_val_bleu,
            unit="epochs" if settings.steps is None else "checkpoints",
            rescore_best=search is not None,
        ))
    # After the run's own (they see the logs the history records), before the backup.
    callbacks += extra
    # Last, so that a backup of epoch k implies that epoch k's checkpoint and history are written.
    callbacks.append(keras.callbacks.BackupAndRestore(str(paths.backup)))
    return callbacks


def choose_decoding(run: Run, sources: list[str], references: list[str], *, chosen_on: int,
                    lowercase: bool) -> dict:
    """Chooses the length penalty of the run's kept model by beam-search BLEU on the first
    `chosen_on` validation pairs, over `LENGTH_PENALTY_GRID`, and scores that choice on all the
    pairs and on those it was not chosen on.

    Returns:
        `{"beam_width", "alpha", "bleu_by_alpha": {alpha: BLEU}, "chosen_on": sentences,
        "beam_bleu": BLEU on all, "beam_bleu_unseen": BLEU on the rest (None if none)}`.
    """
    def scorer(first: int, last: int | None) -> BleuScorer:
        return BleuScorer(run.model, run.source_tokenizer, run.target_tokenizer,
                          sources[first:last], references[first:last], lowercase=lowercase,
                          beam_width=DEFAULT_BEAM_WIDTH)

    search = LengthPenaltySearch(scorer(0, chosen_on), LENGTH_PENALTY_GRID)
    search()
    alpha = search.best_alpha
    unseen = scorer(chosen_on, None)(alpha) if len(sources) > chosen_on else None
    return {"beam_width": DEFAULT_BEAM_WIDTH, "alpha": alpha,
            "bleu_by_alpha": {str(key): value for key, value in search.scores.items()},
            "chosen_on": min(chosen_on, len(sources)),
            "beam_bleu": scorer(0, None)(alpha), "beam_bleu_unseen": unseen}


def validate_kept_model(
    run: Run, val_data: tf.data.Dataset, bleu: BleuScorer | None, *, trim: bool
) -> dict:
    """The validation of the model a run keeps (`model.keras`): its loss, token-weighted as the
    history's, and with `bleu` its sacreBLEU score and signature on the scorer's sentences.

    Returns:
        `{"val_loss": ...}`, with BLEU `{"val_bleu", "bleu_signature", "bleu_sentences"}` too.
    """
    TokenWeightedSteps(run.model, trim=trim).install()
    with unknown_dataset_lengths():
        results = run.model.evaluate(val_data, verbose=0, return_dict=True)
    validation = {"val_loss": float(results["loss"])}
    if bleu is not None:
        scorer = BleuScorer(run.model, run.source_tokenizer, run.target_tokenizer, bleu.sources,
                            bleu.references, lowercase=bleu.lowercase)
        metric = sacrebleu.metrics.BLEU(lowercase=bleu.lowercase)  # as BleuScorer scores
        score = metric.corpus_score(scorer.translate(scorer.sources), [scorer.references])
        validation.update(val_bleu=score.score, bleu_signature=str(metric.get_signature()),
                          bleu_sentences=len(scorer.sources))
    return validation


def train(
    config: TransformerConfig,
    settings: TrainingSettings,
    run_dir: str | Path,
    *,
    callbacks: list[keras.callbacks.Callback] | None = None,
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
    others keep their backups under `run_dir/workers/<task>/`. Each worker reads and batches only
    its own share of the training pairs (`worker_training_dataset`), its batches the global
    batch divided among the replicas; an epoch lasts until the last worker's data ends.

    `run_info.json` (see `RunInfo`) records the pair counts, the project version and git commit,
    the training time and, at the end, the kept model's validation loss and BLEU (with
    sacreBLEU's signature); the model card reads it.

    Args:
        config: model hyper-parameters; `source_vocab_size` and `target_vocab_size` are replaced
            by the sizes of the built vocabularies.
        settings: training settings.
        run_dir: the run directory (created if missing).
        callbacks: Keras callbacks of your own, added to `fit`'s after the run's own: at each
            epoch's end they see the logs the history records (`loss`, `val_loss`, `step`,
            tokens per second, `val_bleu`). Every worker runs them.
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
        >>> run = train(TransformerConfig(d_model=64, num_heads=4, d_ff=128),  # doctest: +SKIP
        ...             TrainingSettings(steps=2000, save_every=500, eval_every=1000,
        ...                              batch_tokens=4096), "runs/demo")
        >>> run.history["val_bleu"]  # doctest: +SKIP
    """
    start = time.monotonic()
    run_dir = Path(run_dir)
    strategy = make_strategy(settings.strategy)
    chief = is_chief(strategy)
    paths = RunPaths(worker_directory(run_dir, strategy))
    paths.root.mkdir(parents=True, exist_ok=True)
    resuming = paths.backup.is_dir()

    keras.utils.set_random_seed(settings.seed)
    data = load_corpora(settings)
    val_corpus = data.validation
    if resuming:
        source_tokenizer, target_tokenizer = load_run_tokenizers(paths.root)
    else:
        source_tokenizer, target_tokenizer = make_tokenizers(settings, data, paths.vocab)
    config = config.replace(
        source_vocab_size=source_tokenizer.vocab_size,
        target_vocab_size=target_tokenizer.vocab_size,
    )
    if resuming:
        _check_resumable(paths, config, settings)
    save_run_config(paths.config, config, settings)
    run_info = RunInfo(paths, data, start, resuming=resuming)
    if chief:
        run_info.save()

    start_epoch = backed_up_epoch(paths) if resuming else 0
    if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        # Each worker reads and batches only its own share of the pairs.
        train_data = strategy.distribute_datasets_from_function(functools.partial(
            worker_training_dataset, data, source_tokenizer, target_tokenizer, config, settings,
            start_epoch=start_epoch,
        ))
    else:
        train_data = training_dataset(
            training_pairs(data, settings, start_epoch=start_epoch), source_tokenizer,
            target_tokenizer, config, settings, start_epoch=start_epoch,
            replicas=strategy.num_replicas_in_sync,
        )
    val_data = make_dataset(val_corpus, source_tokenizer, target_tokenizer, shuffle=False,
                            **batch_options(config, settings))
    if settings.jit_compile:
        val_data = pad_to_multiple(val_data, SHAPE_MULTIPLE)

    with strategy.scope(), dtype_policy(settings.mixed_precision):
        model = build_transformer(config)
        schedule = compile_model(model, config, settings)
        token_steps = TokenWeightedSteps(model, settings.accumulate_steps,
                                         trim=not settings.jit_compile)
    token_steps.install()
    patch_for_strategy(model, strategy)
    print(f"Model: {model.count_params():,} parameters.", flush=True)

    count = settings.eval_sentences
    sample = dict(sources=val_corpus.sources[:count], references=val_corpus.targets[:count],
                  lowercase=settings.lower_case)
    bleu = search = None
    if settings.eval_every is not None:
        bleu = BleuScorer(model, source_tokenizer, target_tokenizer, **sample)
    if settings.tune_decoding:
        search = LengthPenaltySearch(
            BleuScorer(model, source_tokenizer, target_tokenizer, **sample,
                       beam_width=DEFAULT_BEAM_WIDTH),
            LENGTH_PENALTY_GRID,
        )
    previous = read_history(paths.root) if resuming else {}
    extra = list(callbacks or [])
    if chief:
        extra.append(run_info.callback())
    fit_callbacks = _callbacks(settings, paths, strategy, token_steps, schedule, val_data, bleu,
                               search, previous, start, extra)
    epochs, steps_per_epoch = fit_length(settings)
    with unknown_dataset_lengths():
        history = model.fit(
            train_data,
            validation_data=val_data,
            epochs=epochs,
            steps_per_epoch=steps_per_epoch,
            callbacks=fit_callbacks,
            shuffle=False,  # make_dataset shuffles (seeded) before bucketing
            verbose=verbose,
        )
    losses = history.history.get("loss", [])
    if losses and math.isnan(losses[-1]):
        raise RuntimeError(
            f"training diverged: the loss became NaN in epoch {len(losses)}; try a smaller "
            "learning_rate_scale or more warmup_steps"
        )
    if not chief:
        return None
    run = load_run(run_dir)
    validation = validate_kept_model(run, val_data, bleu, trim=not settings.jit_compile)
    decoding = None
    if search is not None:
        decoding = choose_decoding(run, val_corpus.sources, val_corpus.targets,
                                   chosen_on=settings.eval_sentences,
                                   lowercase=settings.lower_case)
    run_info.finish(validation, decoding)
    bleu_text = ("" if bleu is None else f", BLEU {validation['val_bleu']:.2f} "
                 f"({validation['bleu_signature']})")
    print(f"Kept model ({paths.model}): val_loss {validation['val_loss']:.4f}{bleu_text}.",
          flush=True)
    if decoding is not None:
        unseen = decoding["beam_bleu_unseen"]
        unseen_text = "" if unseen is None else f", {unseen:.2f} on the others"
        print(f"Decoding: beam {decoding['beam_width']}, alpha {decoding['alpha']} (chosen on "
              f"{decoding['chosen_on']} validation sentences): BLEU {decoding['beam_bleu']:.2f} "
              f"on all {len(val_corpus.sources)}{unseen_text}.", flush=True)
        run = dataclasses.replace(run, decoding=run_decoding(run_info.info))
    return run
