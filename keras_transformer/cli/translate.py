"""`keras-transformer translate`: translate sentences with a local model or a model server.

    keras-transformer translate --model models/translator "Ein Mann fährt Fahrrad."
    keras-transformer translate --model runs/multi30k --beam 8 < sentences.de
    keras-transformer translate --server grpc://127.0.0.1:8500 "Ein Hund läuft."
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from keras_transformer.cli.decoding_options import add_decoding_options


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "translate",
        help="translate sentences (arguments, or stdin lines) with a model or a server",
        description="Translate the given sentences, or each line of stdin when none is given, "
        "printing one translation per line.",
    )
    parser.add_argument("sentences", nargs="*", help="sentences to translate (default: stdin)")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--model", type=Path,
        help="export base directory (highest version), SavedModel version directory, or run "
        "directory",
    )
    source.add_argument(
        "--server", help="model server URL: http://host:8501 (REST) or grpc://host:8500"
    )
    parser.add_argument(
        "--model-name", default="translator",
        help="model name on the server (default: %(default)s)",
    )
    add_decoding_options(parser, batch_size=32, batch_unit="request")
    parser.set_defaults(run=run)


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def server_translate(args: argparse.Namespace):
    """`translate(sentences)` through `serving.client`; with --beam/--alpha it calls the
    `translate_with_options` signature."""
    from keras_transformer.inference.defaults import decoding_options
    from keras_transformer.inference.translator import OPTIONS_SIGNATURE
    from serving.client import client_for_url

    if args.beam is None and args.alpha is None:
        return client_for_url(args.server, args.model_name).translate
    client = client_for_url(args.server, args.model_name, signature_name=OPTIONS_SIGNATURE)
    beam_width, alpha = decoding_options(args.beam, args.alpha)
    options = dict(beam_width=beam_width, alpha=alpha)

    def translate(sentences):
        outputs = client.predict({"text": list(sentences), **options})
        return [_text(value) for value in outputs["translation"]]

    return translate


def run(args: argparse.Namespace) -> int:
    sentences = args.sentences or [line.rstrip("\r\n") for line in sys.stdin]
    if args.server:
        return _print_server_translations(args, sentences)
    from keras_transformer.inference.loading import load_translator

    try:
        translator = load_translator(
            args.model, beam_width=args.beam, alpha=args.alpha, batch_size=args.batch_size
        )
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    # All sentences in one call, as `load_translator(...).translate` gets them in a script, so
    # that the batches (sorted by length) and hence the translations are the same.
    for translation in translator.translate(sentences):
        print(translation)
    return 0


def _print_server_translations(args: argparse.Namespace, sentences: list[str]) -> int:
    """Sends the sentences `--batch-size` per request, printing each answer as it comes."""
    translate = server_translate(args)
    for start in range(0, len(sentences), args.batch_size):
        try:
            translations = translate(sentences[start : start + args.batch_size])
        # Unreachable server (requests' errors are OSErrors) or its error answer (ServerError).
        except (OSError, RuntimeError) as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        for translation in translations:
            print(translation, flush=True)
    return 0
