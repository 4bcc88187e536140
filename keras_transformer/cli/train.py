"""`keras-transformer train`: train a model from text files (or the demo data) into a run directory.

Precedence: command-line flags > `--config` JSON > `--preset` > defaults. Without `--config` and
`--preset` the defaults are a CPU-sized model (the TensorFlow tutorial's 2+2 layers, d_model
128); with either, every key they leave out takes `TransformerConfig`'s / `TrainingSettings`'
default.
"""

from __future__ import annotations

import argparse
import dataclasses
import re

from keras_transformer.cli.dataclass_flags import DataclassFlags
from keras_transformer.config import TransformerConfig
from keras_transformer.presets import PRESETS
from keras_transformer.settings import TrainingSettings

# Model and schedule used without --config: trains on a CPU in minutes rather than days.
CPU_DEFAULTS = {
    "num_encoder_layers": 2,
    "num_decoder_layers": 2,
    "d_model": 128,
    "num_heads": 4,
    "d_ff": 512,
    "max_length": 128,
    "warmup_steps": 1000,
}
DEFAULT_RUN_DIR = "runs/train"

# Every field of TransformerConfig and TrainingSettings is a flag (`--d-model`,
# `--no-mixed-precision`); these are how `--help` groups and spells them.
FLAGS = DataclassFlags(
    (TransformerConfig, TrainingSettings),
    renamed={"tsv_file": "--tsv", "vocab_dir": "--vocab", "time_budget_minutes": "--time-budget"},
    metavars={
        "save_every": "STEPS", "eval_every": "STEPS", "warmup_steps": "STEPS",
        "batch_tokens": "TOKENS", "shuffle_buffer": "PAIRS", "vocab_sample_size": "PAIRS",
        "time_budget_minutes": "MINUTES", "tsv_file": "FILE",
    },
    groups=(
        ("model", [field.name for field in dataclasses.fields(TransformerConfig)]),
        ("data", ["source_file", "target_file", "val_source_file", "val_target_file",
                  "tsv_file", "validation_fraction"]),
        ("vocabulary", ["vocab_dir", "vocab_size", "vocab_sample_size", "shared_vocab",
                        "lower_case"]),
        ("run length and evaluation", ["epochs", "steps_per_epoch", "steps", "save_every",
                                       "eval_every", "eval_sentences", "patience",
                                       "time_budget_minutes", "average_checkpoints",
                                       "tune_decoding"]),
        ("batching", ["batch_size", "batch_tokens", "accumulate_steps", "shuffle_buffer"]),
        ("optimization", ["warmup_steps", "learning_rate_scale", "cooldown_fraction", "seed"]),
        ("hardware", ["mixed_precision", "jit_compile", "strategy"]),
    ),
)


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model into a run directory (resumes an interrupted run)",
        usage="keras-transformer train [--preset NAME] [--config FILE] [--run-dir DIR] "
        "[flags]",
        description=(
            "Trains a Transformer with model.fit and writes the run directory: config.json, "
            "vocab/, model.keras (best validation BLEU with --eval-every, else loss), "
            "history.json, learning_curve.png, logs/ (TensorBoard), checkpoints/ (with "
            "--average-checkpoints), backup/ (while unfinished). Run the same command again to "
            "resume an interrupted run. Without data files it trains on the built-in demo data "
            "(English -> German number words). Every field of TransformerConfig and "
            "TrainingSettings is a flag; flags override --config, which overrides --preset. "
            "The defaults shown are those without --preset and --config; with either, what "
            "they leave out takes the dataclasses' defaults. A run sets --source-vocab-size and "
            "--target-vocab-size to the sizes of the vocabularies it learns (--vocab-size) or "
            "reuses (--vocab)."
        ),
    )
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), metavar="NAME",
        help="named recipe (model and training settings) that --config and flags override: "
        + ", ".join(sorted(PRESETS)),
    )
    parser.add_argument(
        "--config", metavar="FILE",
        help="JSON object of TransformerConfig fields and training settings (e.g. a run's "
        "config.json)",
    )
    parser.add_argument(
        "--run-dir", default=DEFAULT_RUN_DIR, metavar="DIR",
        help=f"output directory (default {DEFAULT_RUN_DIR})",
    )
    FLAGS.add_to(parser, shown_defaults=CPU_DEFAULTS)
    parser.set_defaults(run=run)


def overrides(args: argparse.Namespace) -> dict:
    """The settings given as flags, by `TransformerConfig` / `TrainingSettings` field name."""
    return FLAGS.given(args)


def flag_error(error: ValueError, given: dict) -> ValueError:
    """`error` raised by the given flags' values, naming the flags whose fields it mentions (else
    "command line")."""
    named = [FLAGS.flags[name] for name in given if re.search(rf"\b{name}\b", str(error))]
    return ValueError(f"{', '.join(named) or 'command line'}: {error}")


def base_values(args: argparse.Namespace) -> tuple:
    """`(config, settings)` from `--config` over `--preset` over the defaults.

    Raises:
        FileNotFoundError, ValueError: naming the config file (and the preset) when they do not
            make a valid configuration.
    """
    from keras_transformer.presets import preset_values
    from keras_transformer.run_dir import load_run_config, read_config_values, split_values

    if args.preset is None:
        return load_run_config(args.config) if args.config else split_values(CPU_DEFAULTS)
    values = preset_values(args.preset)
    origin = f"preset {args.preset}"
    if args.config:
        # Read as plain values: the file need only make sense on top of the preset.
        values.update(read_config_values(args.config))
        origin = f"{args.config} over {origin}"
    try:
        return split_values(values)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{origin}: {error}") from error


def summary(history: dict) -> str:
    """The best validation result of a run's history, in one line."""

    def best_of(name, pick):
        scored = [(value, index) for index, value in enumerate(history.get(name, []))
                  if value is not None]
        return pick(scored)[1] if scored else None

    def where(index):
        steps = history.get("step") or []
        step = f", step {steps[index]}" if index < len(steps) and steps[index] else ""
        return f"at epoch {history['epoch'][index]}{step}"

    best = best_of("val_bleu", max)
    if best is not None:
        return (f"best val_bleu {history['val_bleu'][best]:.2f} "
                f"(val_loss {history['val_loss'][best]:.4f}) {where(best)}")
    best = best_of("val_loss", min)
    return (f"best val_loss {history['val_loss'][best]:.4f} "
            f"(val_masked_accuracy {history['val_masked_accuracy'][best]:.4f}) {where(best)}")


def run(args: argparse.Namespace) -> int:
    import logging
    import sys

    from keras_transformer.run_dir import split_values
    from keras_transformer.text.data import DataError
    from keras_transformer.training.trainer import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        config, settings = base_values(args)
        given = overrides(args)
        try:
            config, settings = split_values(given, config, settings)
        except ValueError as error:
            raise flag_error(error, given) from error
        run_ = train(config, settings, args.run_dir, verbose=1)
    except (DataError, FileNotFoundError, ValueError, RuntimeError) as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return 1
    if run_ is not None:
        print(f"{summary(run_.history)}; run directory: {run_.directory}")
    return 0
