"""`keras-transformer train`: train a model from text files (or the demo data) into a run directory.

Precedence: command-line flags > `--config` JSON > `--preset` > defaults. Without `--config` and
`--preset` the defaults are a CPU-sized model (the TensorFlow tutorial's 2+2 layers, d_model
128); with either, every key they leave out takes `TransformerConfig`'s / `TrainingSettings`'
default.
"""

from __future__ import annotations

import argparse

from keras_transformer.presets import PRESETS
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
            "vocab/, model.keras (best validation BLEU with --eval-every, else loss), "
            "history.json, learning_curve.png, logs/ (TensorBoard), checkpoints/ (with "
            "--average-checkpoints), backup/ (while unfinished). Run the same command again to "
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
    parser.add_argument(
        "--preset", choices=sorted(PRESETS),
        help="named recipe (model and training settings) that --config and flags override",
    )
    parser.add_argument("--vocab", metavar="DIR",
                        help="reuse this vocabulary directory (e.g. another run's vocab/): "
                        "copied into the run, nothing is learned")
    parser.add_argument("--vocab-sample-size", type=int, metavar="PAIRS",
                        help="learn the vocabulary from at most this many training pairs")
    length = parser.add_argument_group("run length and evaluation")
    length.add_argument("--epochs", type=int, help="number of epochs (without --steps)")
    length.add_argument("--steps", type=int,
                        help="total optimizer steps; replaces --epochs (the data repeats)")
    length.add_argument("--save-every", type=int, metavar="STEPS",
                        help="back up, checkpoint and validate every this many steps")
    length.add_argument("--eval-every", type=int, metavar="STEPS",
                        help="also score greedy translations of validation sentences with "
                        "sacreBLEU every this many steps; the best model is then the best BLEU")
    length.add_argument("--eval-sentences", type=int, metavar="N",
                        help="how many (first) validation sentences --eval-every translates")
    length.add_argument("--patience", type=int, metavar="N",
                        help="stop after N validations (BLEU with --eval-every, else loss) "
                        "without improvement")
    length.add_argument(
        "--time-budget", type=float, metavar="MINUTES", help="stop training after this long"
    )
    length.add_argument(
        "--average-checkpoints", type=int, metavar="N",
        help="at the end, average the last N checkpoints' weights (one per epoch or save "
        "interval); kept if they validate better",
    )
    batching = parser.add_argument_group("batching")
    batching.add_argument("--batch-tokens", type=int, metavar="TOKENS",
                          help="target tokens (padding included) per optimizer step, over all "
                          "replicas and accumulated batches; replaces batch_size")
    batching.add_argument("--accumulate-steps", type=int, metavar="N",
                          help="add up the gradients of N batches per optimizer step")
    batching.add_argument("--shuffle-buffer", type=int, metavar="PAIRS",
                          help="pairs held in the shuffle buffer")
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
        "vocab_dir": args.vocab,
        "vocab_sample_size": args.vocab_sample_size,
        "epochs": args.epochs,
        "steps": args.steps,
        "save_every": args.save_every,
        "eval_every": args.eval_every,
        "eval_sentences": args.eval_sentences,
        "patience": args.patience,
        "time_budget_minutes": args.time_budget,
        "average_checkpoints": args.average_checkpoints,
        "batch_tokens": args.batch_tokens,
        "accumulate_steps": args.accumulate_steps,
        "shuffle_buffer": args.shuffle_buffer,
        "mixed_precision": args.mixed_precision,
        "jit_compile": args.jit_compile,
        "strategy": args.strategy,
    }
    return {name: value for name, value in names.items() if value is not None}


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
        try:
            config, settings = split_values(overrides(args), config, settings)
        except ValueError as error:
            raise ValueError(f"command line: {error}") from error
        run_ = train(config, settings, args.run_dir, verbose=1)
    except (DataError, FileNotFoundError, ValueError, RuntimeError) as error:
        print(f"keras-transformer train: error: {error}", file=sys.stderr)
        return 1
    if run_ is not None:
        print(f"{summary(run_.history)}; run directory: {run_.directory}")
    return 0
