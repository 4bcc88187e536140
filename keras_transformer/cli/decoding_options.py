"""The decoding flags that `evaluate` and `translate` share."""

from __future__ import annotations

import argparse

from keras_transformer.inference.defaults import DEFAULT_ALPHA, DEFAULT_BEAM_WIDTH


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (anything else is a usage error, exit status 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_decoding_options(parser: argparse.ArgumentParser, batch_size: int, batch_unit: str):
    """Adds `--beam`, `--alpha` and `--batch-size` (default `batch_size` sentences per
    `batch_unit`)."""
    parser.add_argument(
        "--beam", type=positive_int,
        help="beam width, 1 = greedy (default: an export's own if --alpha is not given "
        f"either, else {DEFAULT_BEAM_WIDTH})",
    )
    parser.add_argument(
        "--alpha", type=float,
        help="length-penalty exponent (default: an export's own if --beam is not given "
        f"either, else {DEFAULT_ALPHA})",
    )
    parser.add_argument(
        "--batch-size", type=positive_int, default=batch_size,
        help=f"sentences per {batch_unit} (default: %(default)s)",
    )
