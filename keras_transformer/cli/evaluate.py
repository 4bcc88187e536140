"""`keras-transformer evaluate MODEL --source-file F --target-file F`: sacreBLEU and chrF."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from keras_transformer.cli.decoding_options import add_decoding_options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="translate a test set and score it with sacreBLEU (BLEU and chrF)",
        description="Translate every line of --source-file, write the hypotheses, and print "
        "sacreBLEU's BLEU and chrF against --target-file.",
    )
    parser.add_argument(
        "model", type=Path,
        help="run directory, export base directory (highest version) or SavedModel directory",
    )
    parser.add_argument("--source-file", type=Path, required=True, help="source sentences")
    parser.add_argument(
        "--target-file", type=Path, required=True, help="reference translations, line-aligned"
    )
    parser.add_argument(
        "--output", type=Path, default=Path("hypotheses.txt"),
        help="where to write the translations, one per line (default: %(default)s)",
    )
    add_decoding_options(parser, batch_size=64, batch_unit="batch")
    parser.set_defaults(run=run)


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 file, without line endings."""
    return path.read_text(encoding="utf-8").splitlines()


def run(args: argparse.Namespace) -> int:
    import sacrebleu

    from keras_transformer.inference.loading import LocalTranslator

    try:
        sources, references = read_lines(args.source_file), read_lines(args.target_file)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.source_file} has {len(sources)} lines but {args.target_file} has "
                f"{len(references)}; they must be line-aligned"
            )
        translator = LocalTranslator(
            args.model, beam_width=args.beam, alpha=args.alpha, batch_size=args.batch_size
        )
    except (OSError, UnicodeDecodeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    hypotheses = translator.translate(sources)
    elapsed = time.perf_counter() - started
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("".join(f"{line}\n" for line in hypotheses), encoding="utf-8")

    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    print(f"{translator.description}: {len(sources)} sentences in {elapsed:.1f} s "
          f"({len(sources) / max(elapsed, 1e-9):.1f} sentences/s); hypotheses in {args.output}")
    print(bleu.corpus_score(hypotheses, [references]))
    print(f"  {bleu.get_signature()}")
    print(chrf.corpus_score(hypotheses, [references]))
    print(f"  {chrf.get_signature()}")
    return 0
