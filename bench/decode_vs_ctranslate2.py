"""Decoding speed: the project's export, as served, against CTranslate2 on the same weights.

Prints figures, asserts nothing. Steps, in one process:

1. The model: a trained run (`--run`; its weights rebuilt in float32), or random weights of the
   paper's base shape (`--random-base`, d_model 512, 6+6 layers, 8 heads, d_ff 2048, with a
   vocabulary from `--vocab`; for speed only).
2. Conversion to CTranslate2 with `ctranslate2.specs.TransformerSpec`, weight by weight: post-LN
   (pre-LN for `norm_first` models), ReLU, fused query/key/value projections, embeddings scaled
   by sqrt(d_model) plus the project's own sinusoidal table (interleaved sin/cos, position 0 at
   the first token of each side), tied or untied output projection, the project's layer-norm
   epsilon, START/END/UNK of its vocabulary. PAD and START are suppressed, as the project never
   generates them.
3. Exports to a work directory with `keras_transformer.export.export_translator` (float32; greedy
   and beam 4 as two exports, each with its warmup file), and for a mixed-precision run
   also the run as shipped (`export_run`, what `keras-transformer export` writes); with
   `--xla-max-batch N`, also float32 exports that decode calls of up to N sentences under XLA
   (`project fp32 XLA`). The project is timed through `serving.servable`: the exported SavedModel
   loaded, its warmup file replayed, and called exactly as the model server does (strings in,
   tokenizer and search inside the graph; TensorFlow uses both cores).
4. Agreement: greedy float32 outputs of both, token for token, on `--check-sentences` sentences.
5. Speed on the same `--sentences` sentences (`--sentences-file`, Multi30k's validation German by
   default) for greedy and beam 4 at batch 1 and 32, in alternating rounds of `--round-sentences`
   sentences per system: sentences/s, CTranslate2 float32 on one thread and on two (and int8 on one
   with `--int8`), and the ratios. CTranslate2 gets pre-tokenized pieces (untimed); the project
   tokenizes and detokenizes inside its graph, as served. Beam search: the project uses the GNMT
   length penalty (alpha 0.6), CTranslate2 its own (length ** 0.6). Each CTranslate2 batch may
   generate as many tokens as the project's limit (longest source + 50, capped at the model's
   max_length), and the mean output length of every system is printed beside its speed.
6. First call after loading, each in a fresh process: the project's beam-4 exports (the export's
   default) loaded by `Servable` (a cold first call, and the first call after replaying the
   export's warmup file, as TF Serving and the local server do at load), and CTranslate2's model.

    python bench/decode_vs_ctranslate2.py --run runs/m30k_60min [--xla-max-batch 1]
    python bench/decode_vs_ctranslate2.py --random-base --vocab runs/m30k_60min/vocab \
        --sentences 32 --check-sentences 32

Needs the `bench` extra (`pip install -e ".[bench]"`) for ctranslate2.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

BEAM_WIDTH = 4
ALPHA = 0.6
SETTINGS = ((1, 1), (1, 32), (BEAM_WIDTH, 1), (BEAM_WIDTH, 32))  # (beam width, batch size)
PROJECT, SHIPPED, PROJECT_XLA = "project fp32", "project as shipped", "project fp32 XLA"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--run", type=Path, help="a trained run directory")
    model.add_argument("--random-base", action="store_true",
                       help="random weights of the base shape (speed only); needs --vocab")
    model.add_argument("--first-call", type=Path, help=argparse.SUPPRESS)  # child process
    model.add_argument("--first-call-ct2", type=Path, help=argparse.SUPPRESS)  # child process
    parser.add_argument("--vocab", type=Path, help="vocabulary directory for --random-base "
                        "(a run's vocab/)")
    parser.add_argument("--sentences-file", type=Path,
                        default=REPO_ROOT.parent / "shared/data/multi30k/val.de")
    parser.add_argument("--sentences", type=int, default=256, help="timed sentences per setting")
    parser.add_argument("--check-sentences", type=int, default=96,
                        help="sentences of the greedy agreement check")
    parser.add_argument("--round-sentences", type=int, default=32,
                        help="sentences per system in each alternating round")
    parser.add_argument("--int8", action="store_true", help="also CTranslate2 int8, one thread")
    parser.add_argument("--xla-max-batch", type=int, default=0, metavar="N",
                        help="also a float32 export decoding calls of up to N sentences under "
                        "XLA (`keras-transformer export --xla-max-batch`), timed and compared "
                        "as another project system")
    parser.add_argument("--no-shipped", action="store_true",
                        help="skip the run's own export when its precision is not float32")
    parser.add_argument("--work-dir", type=Path, help="where exports and the CTranslate2 model "
                        "go (default: a new directory under /tmp); exports found there from "
                        "an earlier run of the same model are reused")
    parser.add_argument("--warm", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--text", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.random_base and args.vocab is None:
        parser.error("--random-base needs --vocab (a vocabulary directory, e.g. a run's vocab/)")
    if args.run is not None or args.random_base:
        if not args.sentences_file.is_file():
            parser.error(f"--sentences-file {args.sentences_file}: no such file")
        if min(args.sentences, args.check_sentences, args.round_sentences) < 1:
            parser.error("--sentences, --check-sentences and --round-sentences must be >= 1")
    return args


def load_model(args):
    """`(float32 model, source tokenizer, target tokenizer, run or None)`."""
    import keras

    from keras_transformer.config import TransformerConfig
    from keras_transformer.model import build_transformer
    from keras_transformer.run_dir import load_run
    from keras_transformer.text.tokenizer_pair import load_tokenizers

    if args.run is not None:
        run = load_run(args.run, compile=False)
        model = build_transformer(run.config)  # float32, whatever the run trained in
        model.set_weights(run.model.get_weights())
        return model, run.source_tokenizer, run.target_tokenizer, run
    source_tokenizer, target_tokenizer = load_tokenizers(args.vocab)
    shared = source_tokenizer is target_tokenizer
    config = TransformerConfig(
        source_vocab_size=source_tokenizer.vocab_size,
        target_vocab_size=target_tokenizer.vocab_size,
        share_embeddings=shared, tie_output_embedding=shared, max_length=128,
    )
    keras.utils.set_random_seed(0)
    return build_transformer(config), source_tokenizer, target_tokenizer, None


def transformer_spec(model, source_tokenizer, target_tokenizer):
    """The model's weights as a `ctranslate2.specs.TransformerSpec` (see the module docstring)."""
    import numpy as np
    from ctranslate2.specs import common_spec, transformer_spec

    from keras_transformer.inference.decoding import SequenceDecoder

    layers = SequenceDecoder(model, target_tokenizer.start_id, target_tokenizer.end_id)
    encoder, decoder = layers.encoder, layers.decoder
    if encoder.activation != "relu":
        raise ValueError(f"only ReLU converts here, not {encoder.activation!r}")
    spec = transformer_spec.TransformerSpec.from_config(
        (encoder.num_layers, decoder.num_layers), encoder.num_heads,
        pre_norm=encoder.norm_first, activation=common_spec.Activation.RELU,
    )

    def linear(target, denses):
        target.weight = np.concatenate([dense.kernel.numpy().T for dense in denses])
        target.bias = np.concatenate([dense.bias.numpy() for dense in denses])

    def norm(target, layer):
        target.gamma, target.beta = layer.gamma.numpy(), layer.beta.numpy()

    def attention(target, add_norm, fuse_keys_with_queries):
        heads = add_norm.sublayer
        if fuse_keys_with_queries:  # self-attention: one [Q; K; V] projection
            linear(target.linear[0], [heads.query_dense, heads.key_dense, heads.value_dense])
        else:  # cross-attention: Q from the decoder, [K; V] from the encoder output
            linear(target.linear[0], [heads.query_dense])
            linear(target.linear[1], [heads.key_dense, heads.value_dense])
        linear(target.linear[-1], [heads.output_dense])
        norm(target.layer_norm, add_norm.norm)

    def feed_forward(target, add_norm):
        linear(target.linear_0, [add_norm.sublayer.inner_dense])
        linear(target.linear_1, [add_norm.sublayer.output_dense])
        norm(target.layer_norm, add_norm.norm)

    def embedding(side, layer):
        side.position_encodings.encodings = layer.encoding  # (max_length, d_model), from 0
        return layer.token_embedding.embeddings.numpy()

    spec.encoder.embeddings[0].weight = embedding(spec.encoder, layers.source_embedding)
    spec.decoder.embeddings.weight = embedding(spec.decoder, layers.target_embedding)
    for target, layer in zip(spec.encoder.layer, encoder.blocks, strict=True):
        attention(target.self_attention, layer.self_attention, True)
        feed_forward(target.ffn, layer.feed_forward)
    for target, layer in zip(spec.decoder.layer, decoder.blocks, strict=True):
        attention(target.self_attention, layer.self_attention, True)
        attention(target.attention, layer.cross_attention, False)
        feed_forward(target.ffn, layer.feed_forward)
    if encoder.norm_first:
        norm(spec.encoder.layer_norm, encoder.final_norm)
        norm(spec.decoder.layer_norm, decoder.final_norm)
    if layers.to_logits is not None:
        linear(spec.decoder.projection, [layers.to_logits])
    else:  # tied: logits = hidden @ embedding^T, no bias
        spec.decoder.projection.weight = spec.decoder.embeddings.weight
    spec.config.layer_norm_epsilon = float(encoder.layer_norm_epsilon)
    target_tokens = target_tokenizer.vocabulary
    spec.config.bos_token = spec.config.decoder_start_token = target_tokens[
        target_tokenizer.start_id]
    spec.config.eos_token = target_tokens[target_tokenizer.end_id]
    spec.config.unk_token = target_tokens[target_tokenizer.unk_id]
    spec.register_source_vocabulary(source_tokenizer.vocabulary)
    spec.register_target_vocabulary(target_tokens)
    return spec


def convert(spec, output_dir: Path) -> Path:
    """Writes `spec` as a float32 CTranslate2 model directory."""
    from ctranslate2.converters.converter import Converter

    class SpecConverter(Converter):
        def _load(self):
            return spec

    return Path(SpecConverter().convert(str(output_dir), quantization="float32", force=True))


def export(model, source_tokenizer, target_tokenizer, base: Path, beam_width: int, warmup,
           xla_max_batch: int = 0):
    """A float32 export of `model` with `beam_width` (and `xla_max_batch`) baked in:
    `base/1/`."""
    from keras_transformer.export import export_translator
    from keras_transformer.inference.translator import Translator

    translator = Translator(model, source_tokenizer, target_tokenizer, beam_width=beam_width,
                            alpha=ALPHA, xla_max_batch=xla_max_batch)
    return export_translator(translator, base, version=1, warmup_sentences=warmup)


def pieces(source_tokenizer, sentences, max_length: int) -> list[list[str]]:
    """The source word pieces the project's export feeds its encoder (cut to `max_length`)."""
    import tensorflow as tf

    ids = source_tokenizer.tokenize(tf.constant(sentences))[:, :max_length].to_list()
    vocabulary = source_tokenizer.vocabulary
    return [[vocabulary[i] for i in row] for row in ids]


class Systems:
    """Everything timed, behind one call: `translate(name, beam_width, indices)` returns each
    sentence's output tokens (ids, without START/END).

    Args:
        servables: `{(name, beam_width): Servable}` for the project's exports.
        translators: `{name: ctranslate2.Translator}`.
        sentences: the source sentences.
        source_pieces: their word pieces (CTranslate2's input).
        target_vocabulary: target tokens, index = id.
        max_length: the model's max_length (the project's limit is source length + 50, at most
            this).
    """

    def __init__(self, servables, translators, sentences, source_pieces, target_vocabulary,
                 max_length):
        from keras_transformer.inference.defaults import DEFAULT_EXTRA_LENGTH

        self.servables, self.translators = servables, translators
        self.sentences, self.source_pieces = sentences, source_pieces
        self.target_ids = {token: index for index, token in enumerate(target_vocabulary)}
        self.suppressed = [[target_vocabulary[0]], [target_vocabulary[2]]]  # PAD, START
        self.extra, self.max_length = DEFAULT_EXTRA_LENGTH, max_length
        self.names = sorted({name for name, _ in servables}) + list(translators)

    def translate(self, name: str, beam_width: int, indices) -> list[list[int]]:
        import numpy as np

        if name in self.translators:
            batch = [self.source_pieces[i] for i in indices]
            limit = min(max(map(len, batch)) + self.extra, self.max_length)
            results = self.translators[name].translate_batch(
                batch, beam_size=beam_width, length_penalty=ALPHA, max_decoding_length=limit,
                suppress_sequences=self.suppressed,
            )
            return [[self.target_ids[t] for t in result.hypotheses[0]] for result in results]
        text = np.array([self.sentences[i] for i in indices], dtype=object)
        tokens = self.servables[name, beam_width].run("", {"text": text})["tokens"]
        return [[int(t) for t in row if t] for row in tokens]


def agreement(systems: Systems, count: int, reference: str) -> tuple[int, int, list]:
    """Greedy outputs of the project's float32 export and `reference`, batches of 32:
    `(identical, compared, first mismatches)`."""
    identical, mismatches = 0, []
    for start in range(0, count, 32):
        indices = list(range(start, min(start + 32, count)))
        ours = systems.translate(PROJECT, 1, indices)
        theirs = systems.translate(reference, 1, indices)
        for index, a, b in zip(indices, ours, theirs, strict=True):
            identical += a == b
            if a != b and len(mismatches) < 3:
                mismatches.append((index, a, b))
    return identical, count, mismatches


def time_setting(systems: Systems, beam_width: int, batch_size: int, count: int,
                 round_sentences: int) -> dict:
    """`{name: (sentences/s, mean output tokens)}` for one setting, in alternating rounds."""
    batches = [list(range(start, min(start + batch_size, count)))
               for start in range(0, count, batch_size)]
    per_round = max(1, round_sentences // batch_size)
    rounds = [batches[i: i + per_round] for i in range(0, len(batches), per_round)]
    seconds = dict.fromkeys(systems.names, 0.0)
    tokens = dict.fromkeys(systems.names, 0)
    for name in systems.names:  # warm-up: one untimed batch each
        systems.translate(name, beam_width, batches[0])
    for round_batches in rounds:
        for name in systems.names:
            start = time.perf_counter()
            outputs = [systems.translate(name, beam_width, batch) for batch in round_batches]
            seconds[name] += time.perf_counter() - start
            tokens[name] += sum(len(row) for output in outputs for row in output)
    return {name: (count / seconds[name], tokens[name] / count) for name in systems.names}


def first_call(path: Path, text: str, warm: bool) -> dict:
    """Child process: seconds to load an export with `Servable`, (replay its warmup file,) and
    answer its first and second request."""
    start = time.perf_counter()
    import numpy as np

    from serving.servable import Servable

    imported = time.perf_counter()
    servable = Servable("bench", 1, str(path))
    loaded = time.perf_counter()
    if warm:
        servable.warm_up()
    warmed = time.perf_counter()
    request = {"text": np.array([text], dtype=object)}
    servable.run("", request)
    first = time.perf_counter()
    servable.run("", request)
    second = time.perf_counter()
    return {"import": imported - start, "load": loaded - imported, "warmup": warmed - loaded,
            "first": first - warmed, "second": second - first}


def first_call_ct2(path: Path, text: str) -> dict:
    """Child process: the same for a CTranslate2 model (`text`: space-separated pieces)."""
    start = time.perf_counter()
    import ctranslate2

    imported = time.perf_counter()
    translator = ctranslate2.Translator(str(path), device="cpu", compute_type="float32",
                                        inter_threads=1, intra_threads=1)
    loaded = time.perf_counter()
    from keras_transformer.inference.defaults import DEFAULT_EXTRA_LENGTH

    # The project's limit for this sentence (a random model never ends; the table has an end).
    options = dict(max_decoding_length=len(text.split()) + DEFAULT_EXTRA_LENGTH)
    translator.translate_batch([text.split()], **options)
    first = time.perf_counter()
    translator.translate_batch([text.split()], **options)
    second = time.perf_counter()
    return {"import": imported - start, "load": loaded - imported, "warmup": 0.0,
            "first": first - loaded, "second": second - first}


def child(arguments: list[str]) -> dict:
    """Runs this script as a child process for a first-call measurement; returns its JSON."""
    result = subprocess.run([sys.executable, __file__, *arguments], capture_output=True,
                            text=True)
    if result.returncode:
        raise RuntimeError(f"{arguments[:2]} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def print_speed(table: dict, names: list[str], ct2_names: list[str],
                references: list[str]) -> None:
    """The speed table: every system's sentences/s, and each CTranslate2 system's against
    each of the project's `references`."""
    pairs = [(ct2, reference) for reference in references for ct2 in ct2_names]
    header = " | ".join(f"{name} sent/s (tokens/sent)" for name in names)
    ratios = " | ".join(f"{ct2} / {reference}" for ct2, reference in pairs)
    print(f"\n| setting | {header} | {ratios} |")
    print("|---" * (1 + len(names) + len(pairs)) + "|")
    for (beam_width, batch_size), speeds in table.items():
        setting = f"{'greedy' if beam_width == 1 else f'beam {beam_width}'}, batch {batch_size}"
        cells = " | ".join(f"{speeds[name][0]:,.1f} ({speeds[name][1]:.1f})" for name in names)
        ratio = " | ".join(f"{speeds[ct2][0] / speeds[reference][0]:.2f}x"
                           for ct2, reference in pairs)
        print(f"| {setting} | {cells} | {ratio} |")


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.first_call is not None:
        print(json.dumps(first_call(args.first_call, args.text, args.warm)))
        return 0
    if args.first_call_ct2 is not None:
        print(json.dumps(first_call_ct2(args.first_call_ct2, args.text)))
        return 0

    import ctranslate2
    import tensorflow as tf

    from keras_transformer.export import export_run
    from keras_transformer.inference.decoding import SequenceDecoder
    from keras_transformer.model import ENCODER
    from serving.servable import load_servable

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="decode-vs-ct2-"))
    lines = args.sentences_file.read_text(encoding="utf-8").splitlines()
    sentences = [line.strip() for line in lines if line.strip()]
    count = max(args.sentences, args.check_sentences)
    if len(sentences) < count:
        raise SystemExit(f"{args.sentences_file}: {len(sentences)} sentences, {count} needed")
    sentences = sentences[:count]
    print(f"TensorFlow {tf.__version__}, CTranslate2 {ctranslate2.__version__}; work dir {work}")

    model, source_tokenizer, target_tokenizer, run = load_model(args)
    max_length = SequenceDecoder(model, target_tokenizer.start_id,
                                 target_tokenizer.end_id).max_length
    print(f"model: {'random base shape' if run is None else args.run}, "
          f"{model.count_params():,} parameters, max_length {max_length}")

    start = time.perf_counter()
    ct2_dir = convert(transformer_spec(model, source_tokenizer, target_tokenizer),
                      work / "ctranslate2")
    print(f"converted to CTranslate2 in {time.perf_counter() - start:.1f} s: {ct2_dir}")
    shipped_dtype = None if run is None else run.model.get_layer(ENCODER).compute_dtype
    shipped = shipped_dtype not in (None, "float32") and not args.no_shipped
    exporters = {PROJECT: lambda base, beam_width: export(
        model, source_tokenizer, target_tokenizer, base, beam_width, sentences[:3])}
    if args.xla_max_batch:
        exporters[PROJECT_XLA] = lambda base, beam_width: export(
            model, source_tokenizer, target_tokenizer, base, beam_width, sentences[:3],
            xla_max_batch=args.xla_max_batch)
    if shipped:  # what `keras-transformer export` writes
        exporters[SHIPPED] = lambda base, beam_width: export_run(
            args.run, base, version=1, beam_width=beam_width, alpha=ALPHA,
            warmup_sentences=sentences[:3])
    exports = {}
    for name, exporter in exporters.items():
        for beam_width in (1, BEAM_WIDTH):
            base = work / f"{name.split()[-1]}_beam{beam_width}"
            if (base / "1" / "saved_model.pb").is_file():  # a rerun with the same --work-dir
                exports[name, beam_width] = base / "1"
                print(f"reusing {base / '1'}")
                continue
            start = time.perf_counter()
            exports[name, beam_width] = exporter(base, beam_width)
            print(f"exported {exports[name, beam_width]} in {time.perf_counter() - start:.1f} s")

    # Loaded as the server loads them, warmup replayed (an XLA export compiles its shapes there).
    servables = {key: load_servable("bench", 1, str(path)) for key, path in exports.items()}
    translators = {
        f"CT2 fp32 {threads}T": ctranslate2.Translator(
            str(ct2_dir), device="cpu", compute_type="float32", inter_threads=1,
            intra_threads=threads)
        for threads in (1, 2)
    }
    if args.int8:
        translators["CT2 int8 1T"] = ctranslate2.Translator(
            str(ct2_dir), device="cpu", compute_type="int8", inter_threads=1, intra_threads=1)
    source_pieces = pieces(source_tokenizer, sentences, max_length)
    systems = Systems(servables, translators, sentences, source_pieces,
                      target_tokenizer.vocabulary, max_length)

    identical, compared, mismatches = agreement(systems, args.check_sentences, "CT2 fp32 1T")
    print(f"\nagreement, greedy float32, batches of 32: {identical}/{compared} sentences "
          "token-identical (project export vs CTranslate2)")
    for index, ours, theirs in mismatches:
        print(f"  sentence {index}: project {ours}\n  {' ' * len(str(index))}"
              f"          CTranslate2 {theirs}")

    table = {}
    for beam_width, batch_size in SETTINGS:
        table[beam_width, batch_size] = time_setting(systems, beam_width, batch_size,
                                                     args.sentences, args.round_sentences)
        print(f"timed beam {beam_width}, batch {batch_size}", flush=True)
    del servables, systems, translators
    ct2_names = [name for name in table[SETTINGS[0]] if name.startswith("CT2")]
    references = [PROJECT] + ([PROJECT_XLA] if args.xla_max_batch else [])
    names = references + ([SHIPPED] if shipped else []) + ct2_names
    print(f"\n{args.sentences} sentences of {args.sentences_file.name} per setting, alternating "
          f"rounds of {args.round_sentences}; TensorFlow on all cores, CTranslate2 on the "
          "threads named (T)")
    print_speed(table, names, ct2_names, references)

    text = sentences[0]
    print(f"\nfirst call after loading, fresh process each (one sentence: {text!r}):")
    print("| model | import s | load s | warmup replay s | first call s | second call s |")
    print("|---|---|---|---|---|---|")
    for (name, beam_width), path in exports.items():
        if beam_width != BEAM_WIDTH:
            continue  # exports default to beam 4; a greedy one loads the same way
        for warm in (False, True):
            arguments = ["--first-call", str(path), "--text", text] + (["--warm"] if warm else [])
            times = child(arguments)
            label = f"{name}, beam {beam_width}, {'warmup replayed' if warm else 'cold'}"
            print(f"| {label} | {times['import']:.2f} | {times['load']:.2f} | "
                  f"{times['warmup']:.2f} | {times['first']:.2f} | {times['second']:.3f} |")
    times = child(["--first-call-ct2", str(ct2_dir), "--text", " ".join(source_pieces[0])])
    print(f"| CTranslate2 fp32 1T, greedy | {times['import']:.2f} | {times['load']:.2f} | - | "
          f"{times['first']:.2f} | {times['second']:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
