"""`keras-transformer info PATH`: the model card of an export or a run directory.

    keras-transformer info models/translator          # the card the highest version carries
    keras-transformer info runs/multi30k --json       # built from the run directory's files
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "info",
        help="print the model card of an export or a run directory",
        description="Print the model card: the model's configuration, vocabularies, training "
        "data and pair counts, steps and training time, validation loss and BLEU (with "
        "sacreBLEU's signature), the project version and git commit, and for an export its "
        "decoding options and serving signatures.",
    )
    parser.add_argument(
        "path", type=Path,
        help="export base directory (highest version), SavedModel version directory, or run "
        "directory",
    )
    parser.add_argument("--json", action="store_true", help="print the card as JSON")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from keras_transformer.model_card import read_model_card, render_markdown

    try:
        card = read_model_card(args.path)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(card, indent=2) if args.json else render_markdown(card))
    return 0
