"""Training settings: everything about a run that is not the model's shape.

`run_dir.load_run_config` / `save_run_config` keep them, with `TransformerConfig`'s fields, in
one flat JSON object (the run directory's `config.json`).
"""

from __future__ import annotations

import dataclasses
import typing

# The `tf.distribute` strategies a run can use; the flag `--strategy` takes its choices from here.
Strategy = typing.Literal["default", "mirrored", "multi_worker"]
STRATEGIES: tuple[str, ...] = typing.get_args(Strategy)


@dataclasses.dataclass(frozen=True)
class TrainingSettings:
    """Everything about a run that is not the model's shape: data, batching, schedule, hardware.

    Args:
        source_file: training source sentences, one per line (with `target_file`); a glob
            pattern (`news.*.en.gz`) names several shards, read in sorted order; `.gz` files
            are decompressed while read.
        target_file: training target sentences, line-aligned with `source_file` (shard by shard).
        val_source_file: validation source sentences (with `val_target_file`).
        val_target_file: validation target sentences.
        tsv_file: training pairs as `source<TAB>target` lines, instead of the two files (a glob
            too).
        validation_fraction: share of the training pairs held out for validation when no
            validation files are given.
        epochs: passes over the training data (or of `steps_per_epoch` steps each).
        steps_per_epoch: optional fixed number of steps per epoch (the data repeats).
        steps: total optimizer steps; replaces `epochs` (the data repeats as needed).
        save_every: with `steps`, back up, checkpoint and validate (loss) every this many
            optimizer steps, so an interrupted run loses at most this many (default:
            `eval_every`, else 1000; see `checkpoint_interval`).
        eval_every: with `steps`, every this many optimizer steps (a multiple of `save_every`)
            also translate `eval_sentences` validation sentences greedily and score them with
            sacreBLEU; the best model is then the one with the best BLEU.
        eval_sentences: how many validation sentences (the first ones) `eval_every` and
            `tune_decoding` translate.
        patience: stop after this many evaluations (BLEU with `eval_every`, else validation
            loss) without improvement; None never stops early.
        batch_size: sentence pairs per step, over all replicas and workers.
        batch_tokens: if set, replaces `batch_size`: target tokens (padding included) per
            optimizer step, over all replicas and accumulated batches.
        accumulate_steps: add up the gradients of this many batches before each optimizer step
            (a step of N batches updates like one batch N times larger).
        shuffle_buffer: pairs held in the shuffle buffer (the corpus is streamed, never held
            whole).
        warmup_steps: linear warm-up steps of the learning-rate schedule (section 5.3).
        learning_rate_scale: multiplier on the whole schedule.
        cooldown_fraction: if set, the learning rate falls linearly to zero over this share of
            the run at its end: of `steps`, or of the time budget (see `Cooldown`); None keeps
            the paper's schedule to the end.
        seed: seeds weights, dropout and shuffling.
        time_budget_minutes: stop training (cleanly, after the current step) after this long.
        mixed_precision: compute in float16 (bfloat16 on CPU), keep variables in float32.
        jit_compile: compile the train step with XLA.
        strategy: "default" (one device), "mirrored" (all local GPUs, or all logical CPUs) or
            "multi_worker" (MultiWorkerMirroredStrategy, cluster from `TF_CONFIG`).
        vocab_size: target size of each WordPiece vocabulary built from the training data.
        vocab_sample_size: the vocabulary is learned from at most this many training pairs.
        vocab_dir: reuse this vocabulary directory (a run's `vocab/`) instead of learning one.
        lower_case: lower-case (and strip accents from) text before tokenizing.
        shared_vocab: one vocabulary built from both languages and used on both sides.
        average_checkpoints: at the end, average the weights of this many last epochs (or saved
            step checkpoints) and keep the average if it validates better than the best one
            (1: no averaging).
        tune_decoding: at the end choose the kept model (the best save or the checkpoint
            average) and the length-penalty exponent by beam-search BLEU (the default beam) on
            the first `eval_sentences` validation sentences, over `LENGTH_PENALTY_GRID`; the
            chosen alpha becomes the run's default for translate, evaluate and export.
    """

    source_file: str | None = None
    target_file: str | None = None
    val_source_file: str | None = None
    val_target_file: str | None = None
    tsv_file: str | None = None
    validation_fraction: float = 0.05
    epochs: int = 10
    steps_per_epoch: int | None = None
    steps: int | None = None
    save_every: int | None = None
    eval_every: int | None = None
    eval_sentences: int = 500
    patience: int | None = None
    batch_size: int = 64
    batch_tokens: int | None = None
    accumulate_steps: int = 1
    shuffle_buffer: int = 100_000
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    cooldown_fraction: float | None = None
    seed: int = 0
    time_budget_minutes: float | None = None
    mixed_precision: bool = False
    jit_compile: bool = False
    strategy: Strategy = "default"
    vocab_size: int = 8000
    vocab_sample_size: int = 500_000
    vocab_dir: str | None = None
    lower_case: bool = False
    shared_vocab: bool = False
    average_checkpoints: int = 1
    tune_decoding: bool = False

    def __post_init__(self) -> None:
        for name in ("source_file", "target_file", "val_source_file", "val_target_file",
                     "tsv_file", "vocab_dir"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{name} must be a file path (a non-empty string), got {value!r}")
        for name in ("epochs", "batch_size", "warmup_steps", "vocab_size", "average_checkpoints",
                     "eval_sentences", "accumulate_steps", "shuffle_buffer",
                     "vocab_sample_size"):
            _check_positive_int(name, getattr(self, name))
        for name in ("steps_per_epoch", "steps", "save_every", "eval_every", "patience",
                     "batch_tokens"):
            if getattr(self, name) is not None:
                _check_positive_int(name, getattr(self, name))
        if self.steps is None:
            for name in ("save_every", "eval_every"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name} needs steps (it counts optimizer steps of a run)")
        if self.batch_tokens is not None and self.batch_tokens < self.accumulate_steps:
            raise ValueError(
                f"batch_tokens ({self.batch_tokens}) must be at least accumulate_steps "
                f"({self.accumulate_steps}): each accumulated batch gets "
                "batch_tokens // accumulate_steps target tokens"
            )
        if self.save_every and self.eval_every and self.eval_every % self.save_every:
            raise ValueError(
                f"eval_every ({self.eval_every}) must be a multiple of save_every "
                f"({self.save_every})"
            )
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {self.seed!r}")
        _check_positive_number("learning_rate_scale", self.learning_rate_scale)
        if self.time_budget_minutes is not None:
            _check_positive_number("time_budget_minutes", self.time_budget_minutes)
        _check_fraction("validation_fraction", self.validation_fraction)
        if self.cooldown_fraction is not None:
            _check_fraction("cooldown_fraction", self.cooldown_fraction)
            if self.steps is None and self.time_budget_minutes is None:
                raise ValueError(
                    "cooldown_fraction needs steps or time_budget_minutes (the end of the run "
                    "it cools down towards)"
                )
        for name in ("mixed_precision", "jit_compile", "lower_case", "shared_vocab",
                     "tune_decoding"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.strategy not in STRATEGIES:
            raise ValueError(
                f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}"
            )
        if (self.source_file is None) != (self.target_file is None):
            raise ValueError("source_file and target_file must be given together")
        if (self.val_source_file is None) != (self.val_target_file is None):
            raise ValueError("val_source_file and val_target_file must be given together")
        if self.tsv_file is not None and self.source_file is not None:
            raise ValueError("give either tsv_file or source_file/target_file, not both")

    @property
    def checkpoint_interval(self) -> int:
        """Optimizer steps between backups, checkpoints and validations of a `steps` run."""
        return self.save_every or self.eval_every or 1000

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def replace(self, **changes) -> TrainingSettings:
        return dataclasses.replace(self, **changes)


def _check_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _check_fraction(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")


def _check_positive_number(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number, got {value!r}")
