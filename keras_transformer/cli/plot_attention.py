"""`keras-transformer plot-attention`: heatmaps of where each translated piece looked.

    keras-transformer plot-attention --model models/translator "Ein Mann fährt Fahrrad."

Writes one PNG per decoder layer (a panel per head) of cross-attention weights, target pieces
down, source pieces across.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "plot-attention",
        help="draw the cross-attention of a translation, one PNG per decoder layer",
        description="Translate a sentence and write one PNG per decoder layer of its "
        "cross-attention weights (a panel per head; target pieces down, source pieces across).",
    )
    parser.add_argument("sentence", help="the source sentence to translate")
    parser.add_argument(
        "--model", type=Path, required=True,
        help="run directory, SavedModel version directory, or export base directory",
    )
    parser.add_argument(
        "--output-dir", type=Path, default=Path("attention"),
        help="where the PNGs go (default: %(default)s)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from keras_transformer.inference.loading import load_translator
    from keras_transformer.plots import plot_attention

    attention = load_translator(args.model).attention(args.sentence)
    print(f"{args.sentence}  ->  {attention.translation}")
    args.output_dir.mkdir(parents=True, exist_ok=True)
    for layer, weights in enumerate(attention.weights):
        path = args.output_dir / f"cross_attention_layer_{layer}.png"
        figure = plot_attention(
            weights,
            attention.source_pieces,
            attention.target_pieces,
            title=f"Cross-attention, decoder layer {layer}",
        )
        figure.savefig(path, dpi=120)
        print(f"wrote {path}")
    return 0
