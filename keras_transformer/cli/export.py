"""`keras-transformer export RUN_DIR --base models/translator`: write a TF Serving version."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from keras_transformer.inference.defaults import DEFAULT_ALPHA, DEFAULT_BEAM_WIDTH


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a trained run as a SavedModel in TF Serving's <base>/<version>/ layout",
        description="Export the best model of a run, with its tokenizers and the decoding loop, "
        "as <base>/<version>/ (written aside, then renamed into place), with a warmup file.",
    )
    parser.add_argument("run_dir", type=Path, help="run directory written by `train`")
    parser.add_argument(
        "--base", type=Path, default=Path("models/translator"),
        help="model base path, the directory holding the versions (default: %(default)s)",
    )
    parser.add_argument(
        "--version", type=int, help="version number (default: one more than the highest)"
    )
    parser.add_argument(
        "--beam", type=int,
        help="beam width, 1 = greedy (default: the run's chosen on validation if --alpha is "
        f"not given either, else {DEFAULT_BEAM_WIDTH})",
    )
    parser.add_argument(
        "--alpha", type=float,
        help="length-penalty exponent (default: the run's chosen on validation if --beam is "
        f"not given either, else {DEFAULT_ALPHA})",
    )
    parser.add_argument(
        "--max-length", type=int,
        help="most target tokens (default: source length + 50, capped at the model's)",
    )
    parser.add_argument(
        "--xla-max-batch", type=int, default=0, metavar="N",
        help="decode calls of at most N sentences under XLA: ~2x faster at batch 1 on CPU, one "
        "compilation per batch size and source length multiple of 16 at load (warmup); "
        "TF Serving then needs --xla_cpu_compilation_enabled=true (default: 0, no XLA)",
    )
    parser.add_argument(
        "--warmup-file", type=Path,
        help="source sentences (one per line) for the warmup requests "
        "(default: a few made of vocabulary words)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from keras_transformer.export import export_run

    if args.beam is not None and args.beam < 1:
        print("error: --beam must be at least 1", file=sys.stderr)
        return 2
    sentences = None
    if args.warmup_file is not None:
        lines = args.warmup_file.read_text(encoding="utf-8").splitlines()
        sentences = [line.strip() for line in lines if line.strip()][:10]
    try:
        path = export_run(
            args.run_dir,
            args.base,
            version=args.version,
            beam_width=args.beam,
            alpha=args.alpha,
            max_length=args.max_length,
            xla_max_batch=args.xla_max_batch,
            warmup_sentences=sentences,
        )
    except (FileNotFoundError, FileExistsError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    print(path)
    return 0
