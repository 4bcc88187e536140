"""`keras-transformer` command line: one module per sub-command.

Each module in `COMMANDS` defines `add_parser(subparsers)` (registers its arguments) and
`run(args) -> int` (does the work, returns the exit status). Modules are imported lazily so that
`keras-transformer serve` does not pay for importing the training stack and vice versa.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = (
    "train",
    "serve",
    "export",
    "translate",
    "evaluate",
    "plot_attention",
    "info",
    "demo",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="keras-transformer",
        description="Train, evaluate, export, translate with and serve a Keras Transformer.",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"keras_transformer.cli.{name}")
        module.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
