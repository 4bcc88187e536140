"""`keras-transformer train`: train a model from text files (or the demo data) into a run directory.

Precedence: command-line flags > `--config` JSON > defaults. Without `--config` the defaults are
a CPU-sized model (the TensorFlow tutorial's 2+2 layers, d_model 128); with it, every key the
JSON leaves out takes `TransformerConfig`'s / `TrainingSettings`' default.
"""

from __future__ import annotations

import argparse

from keras_transformer.settings import STRATEGIES

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


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a model into a run directory (resumes an interrupted run)",
        description=(
            "Trains a Transformer with model.fit and writes the run directory: config.json, "
            "vocab/, model.keras (best validation loss), history.json, learning_curve.png, "
            "logs/ (TensorBoard), backup/ (while unfinished). Run the same command again to "
            "resume an interrupted run. Without data files it trains on the built-in demo data "
            "(English -> German number words)."
        ),
    )
    data = parser.add_argument_group("data")
    data.add_argument("--source-file", help="training source sentences, one per line")
    data.add_argument("--target-file", help="training target sentences, line-aligned")
    data.add_argument("--val-source-file", help="validation source sentences")
    data.add_argument("--val-target-file", help="validation target sentences")
    data.add_argument("--tsv", help="training pairs as source<TAB>target lines")
    parser.add_argument(
        "--config",
        help="JSON object of TransformerConfig fields and training settings (e.g. a run's "
        "config.json)",
    )
    parser.add_argument(
        "--run-dir", default=DEFAULT_RUN_DIR, help=f"output directory (default {DEFAULT_RUN_DIR})"
    )
    parser.add_argument("--epochs", type=int, help="number of epochs")
    parser.add_argument(
        "--time-budget", type=float, metavar="MINUTES", help="stop training after this long"
    )
    parser.add_argument(
        "--average-checkpoints", type=int, metavar="N",
        help="at the end, average the last N epochs' weights; kept if they validate better",
    )
    parser.add_argument(
        "--mixed-precision", action="store_true", default=None,
        help="float16 (GPU) / bfloat16 (CPU) compute, float32 variables",
    )
    parser.add_argument(
        "--jit-compile", action="store_true", default=None, help="compile steps with XLA"
    )
    parser.add_argument(
        "--strategy", choices=STRATEGIES,
        help="default: one device; mirrored: all local GPUs (or logical CPUs); multi_worker: "
        "MultiWorkerMirroredStrategy over the TF_CONFIG cluster",
    )
    parser.set_defaults(run=run)


def overrides(args: argparse.Namespace) -> dict:
    """The settings given as flags, by `TrainingSettings` field name."""
    names = {
        "source_file": args.source_file,
        "target_file": args.target_file,
        "val_source_file": args.val_source_file,
        "val_target_file": args.val_target_file,
        "tsv_file": args.tsv,
        "epochs": args.epochs,
        "time_budget_minutes": args.time_budget,
        "mixed_precision": args.mixed_precision,
        "jit_compile": args.jit_compile,
        "strategy": args.strategy,
        "average_checkpoints": args.average_checkpoints,
    }
    return {name: value for name, value in names.items() if value is not None}


def run(args: argparse.Namespace) -> int:
    import logging
    import sys

    from keras_transformer.run_dir import load_run_config, split_values
    from keras_transformer.text.data import DataError
    from keras_transformer.training.trainer import train

    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        if args.config:
            config, settings = load_run_config(args.config)
        else:
            config, settings = split_values(CPU_DEFAULTS)
        try:
            config, settings = split_values(overrides(args), config, settings)
        except ValueError as error:
            raise ValueError(f"command line: {error}") from error
        run_ = train(config, settings, args.run_dir, verbose=1)
    except (DataError, FileNotFoundError, ValueError, RuntimeError) as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return 1
    if run_ is not None:
        history = run_.history
        best = min(range(len(history["val_loss"])), key=history["val_loss"].__getitem__)
        print(
            f"best val_loss {history['val_loss'][best]:.4f} "
            f"(val_masked_accuracy {history['val_masked_accuracy'][best]:.4f}) "
            f"at epoch {history['epoch'][best]}; run directory: {run_.directory}"
        )
    return 0
