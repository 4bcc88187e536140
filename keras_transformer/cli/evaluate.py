"""`keras-transformer evaluate MODEL --source-file F --target-file F`: sacreBLEU's BLEU and chrF.

`--lowercase` and `--tokenize` are sacreBLEU's own options, so `evaluate --lowercase` prints the
BLEU that `sacrebleu REF -i HYPOTHESES -lc` gives for the hypotheses it writes, with the same
signature; `--json` adds one JSON object as the last line of stdout.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from keras_transformer.cli.decoding_options import add_decoding_options

DEFAULT_OUTPUT = Path("hypotheses.txt")


@functools.cache
def _tokenizer_names() -> tuple[str, ...]:
    from sacrebleu.metrics import BLEU

    return tuple(BLEU.TOKENIZERS)


class SacrebleuTokenizers(Sequence):
    """sacreBLEU's BLEU tokenizer names, read from sacreBLEU when first needed: importing it
    costs more than the rest of `keras-transformer --help`."""

    def __getitem__(self, index):
        return _tokenizer_names()[index]

    def __len__(self) -> int:
        return len(_tokenizer_names())


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evaluate",
        help="translate a test set and score it with sacreBLEU (BLEU and chrF)",
        description="Translate every line of --source-file, write the hypotheses, and print "
        "sacreBLEU's BLEU and chrF against --target-file. The scores are sacreBLEU's on the "
        "written file: `sacrebleu TARGET -i OUTPUT` (with -lc for --lowercase, -tok for "
        "--tokenize) prints the same BLEU and signature.",
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
        "--output", type=Path, default=DEFAULT_OUTPUT,
        help="where to write the translations, one per line (default: %(default)s); an "
        "existing file is an error unless --overwrite",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --output")
    add_decoding_options(parser, batch_size=64, batch_unit="batch")
    scoring = parser.add_argument_group("scoring (sacreBLEU's options)")
    scoring.add_argument(
        "--lowercase", action="store_true",
        help="case-insensitive BLEU and chrF (sacrebleu -lc and --chrf-lowercase)",
    )
    scoring.add_argument(
        "--tokenize", choices=SacrebleuTokenizers(), metavar="NAME",
        help="BLEU's tokenizer (sacrebleu -tok): %(choices)s (default: 13a)",
    )
    scoring.add_argument(
        "--json", action="store_true",
        help="also print one JSON object as the last line: bleu, chrf, signature, "
        "chrf_signature, sentences, lowercase, tokenize, beam and alpha (null: the model's "
        "own), seconds, hypotheses",
    )
    parser.set_defaults(run=run)


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 file, without line endings."""
    return path.read_text(encoding="utf-8").splitlines()


def translate_with_progress(translator, sentences: Sequence[str]) -> list[str]:
    """`translator.translate(sentences)` one batch at a time, with a Keras progress bar on
    stderr (stdout keeps only the scores).

    Batches are cut from the sentences in length order, as `translate` cuts them itself, so
    the translations are those of one `translate` call.
    """
    import keras

    order = sorted(range(len(sentences)), key=lambda index: len(sentences[index]))
    translations = [""] * len(sentences)
    progress = keras.utils.Progbar(len(sentences), unit_name="sentence")
    with contextlib.redirect_stdout(sys.stderr):
        for start in range(0, len(order), translator.batch_size):
            batch = order[start : start + translator.batch_size]
            outputs = translator.translate([sentences[index] for index in batch])
            for index, translation in zip(batch, outputs, strict=True):
                translations[index] = translation
            progress.add(len(batch))
    return translations


def run(args: argparse.Namespace) -> int:
    from sacrebleu.metrics import BLEU, CHRF

    from keras_transformer.inference.loading import load_translator

    if args.output.exists() and not args.overwrite:
        print(f"error: {args.output} exists; pass --overwrite to replace it, or --output to write "
              "elsewhere", file=sys.stderr)
        return 2
    try:
        bleu = BLEU(lowercase=args.lowercase, tokenize=args.tokenize)
    except ImportError as error:  # tokenizers with optional dependencies (ja-mecab, ko-mecab...)
        print(f"error: --tokenize {args.tokenize}: {error}", file=sys.stderr)
        return 2
    chrf = CHRF(lowercase=args.lowercase)
    try:
        sources, references = read_lines(args.source_file), read_lines(args.target_file)
        if len(sources) != len(references):
            raise ValueError(
                f"{args.source_file} has {len(sources)} lines but {args.target_file} has "
                f"{len(references)}; they must be line-aligned"
            )
        translator = load_translator(
            args.model, beam_width=args.beam, alpha=args.alpha, batch_size=args.batch_size
        )
    except (OSError, UnicodeDecodeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    hypotheses = translate_with_progress(translator, sources)
    elapsed = time.perf_counter() - started
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text("".join(f"{line}\n" for line in hypotheses), encoding="utf-8")

    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    print(f"{translator.description}: {len(sources)} sentences in {elapsed:.1f} s "
          f"({len(sources) / max(elapsed, 1e-9):.1f} sentences/s); hypotheses in {args.output}")
    print(bleu_score)
    print(f"  {bleu.get_signature()}")
    print(chrf_score)
    print(f"  {chrf.get_signature()}")
    if args.json:
        print(json.dumps({
            "bleu": bleu_score.score,
            "chrf": chrf_score.score,
            "signature": str(bleu.get_signature()),
            "chrf_signature": str(chrf.get_signature()),
            "sentences": len(sources),
            "lowercase": args.lowercase,
            "tokenize": bleu.get_signature().info["tok"],
            "beam": args.beam,
            "alpha": args.alpha,
            "seconds": round(elapsed, 3),
            "hypotheses": str(args.output),
        }))
    return 0
