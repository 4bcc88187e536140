"""Input pipeline speed on Multi30k (German -> English): `make_dataset` against the old approach.

Prints figures, asserts nothing. Only the pipeline runs, no model: the question is whether it can
feed an accelerator that consumes ~100,000 target tokens/s.

Method: the Multi30k training pairs (29,000) are read once and tokenized with 8,000-piece
WordPiece vocabularies (learned by `build_tokenizers` in seconds, or loaded with `--vocab`). Two
pipelines are built with the same settings (`--batch-size` pairs, or `--batch-tokens`;
`--max-length`, length windows of `--bucket-width`, shuffled with seed 0):

- "ours": `keras_transformer.text.data.make_dataset`, given the corpus (`--input corpus`) or a
  `tf.data.Dataset` of string pairs (`--input dataset`);
- "reference": the approach `make_dataset` used before, rewritten here: `from_tensor_slices` +
  shuffle + tokenize chunks of 256 + `unbatch` + `bucket_by_sequence_length`.

Each is iterated once as a warm-up, then `--passes` full passes are timed alternately (ours,
reference, ours, ...) so that both meet the same load on a shared machine. Each pass is a fresh
iterator, as each epoch of `model.fit` is. Given a corpus, `make_dataset` tokenizes it in its
first pass and keeps the ids, so the warm-up is the only pass of ours that tokenizes (its figures
are printed, "warm-up"); with `--input dataset` every pass tokenizes, as the reference's do.

Per pass: real target tokens/s (non-padding `labels` positions, i.e. target tokens + [END]), real
source tokens/s, batches/s, the padding fraction of both inputs (`padding_fraction`'s
definition), label positions per batch, and the CPU seconds of the process (all threads): target
tokens per CPU second measure the work per token whatever else runs on the machine, tokens/s
also depend on the cores this process gets. Reported: the median of each figure over the passes,
and the median over rounds of ours / reference in target tokens/s (both passes of a round met
about the same load).
`--threads` limits TensorFlow's threads (intra- and inter-op) to mimic a smaller machine.

    PYTHONPATH=. .venv/bin/python bench/input_pipeline.py --vocab runs/bench_vocab
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(REPO_ROOT / "../shared/data/multi30k"),
                        help="directory with train.de and train.en")
    parser.add_argument("--vocab", default=None,
                        help="tokenizer directory (load_tokenizers' layout); built there if "
                             "missing, in a temporary directory if not given")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--batch-tokens", type=int, default=None)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--bucket-width", type=int, default=4)
    parser.add_argument("--input", choices=["corpus", "dataset"], default="corpus",
                        help="what make_dataset is given")
    parser.add_argument("--passes", type=int, default=5, help="timed passes of each pipeline")
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow threads (0: all)")
    return parser.parse_args()


def reference_dataset(corpus, source_tokenizer, target_tokenizer, *, batch_size, batch_tokens,
                      max_length, bucket_width, seed=0):
    """The old pipeline: per-pair `unbatch` and `bucket_by_sequence_length` after chunks of 256."""
    import tensorflow as tf

    start_id, end_id = target_tokenizer.start_id, target_tokenizer.end_id

    def tokenize(sources, targets):
        source = source_tokenizer.tokenize(sources)[:, :max_length]
        target = target_tokenizer.tokenize(targets)[:, : max_length - 1]
        column = tf.ones([target.nrows(), 1], tf.int64)
        inputs = {"source_tokens": source,
                  "target_tokens": tf.concat([column * start_id, target], axis=1)}
        return inputs, tf.concat([target, column * end_id], axis=1)

    def pair_length(inputs, labels):
        return tf.maximum(tf.shape(inputs["source_tokens"])[0], tf.shape(labels)[0])

    boundaries = list(range(bucket_width + 1, max_length + 1, bucket_width))
    longest = [boundary - 1 for boundary in boundaries] + [max_length]
    sizes = [batch_size if batch_tokens is None else max(1, batch_tokens // length)
             for length in longest]
    return (
        tf.data.Dataset.from_tensor_slices((corpus.sources, corpus.targets))
        .shuffle(len(corpus), seed=seed, reshuffle_each_iteration=True)
        .batch(256)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        .map(lambda inputs, labels: (inputs, labels))
        .bucket_by_sequence_length(pair_length, boundaries, sizes)
        .prefetch(tf.data.AUTOTUNE)
    )


def timed_pass(dataset) -> dict[str, float]:
    """Iterates `dataset` once; returns tokens/s, batches/s and the padding fraction."""
    import numpy as np

    target = source = batches = padded = positions = label_positions = 0
    start, cpu_start = time.perf_counter(), time.process_time()
    for inputs, labels in dataset:
        labels = labels.numpy()
        source_tokens = inputs["source_tokens"].numpy()
        real_labels = np.count_nonzero(labels)
        real_source = np.count_nonzero(source_tokens)
        target += real_labels
        source += real_source
        batches += 1
        label_positions += labels.size
        # The decoder input has as many real positions as the labels, and the same shape.
        positions += source_tokens.size + labels.size
        padded += source_tokens.size - real_source + labels.size - real_labels
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    return {"target/s": target / seconds, "target/cpu s": target / cpu_seconds,
            "cpu s": cpu_seconds, "source/s": source / seconds,
            "batches/s": batches / seconds, "padding": padded / positions,
            "labels/batch": label_positions / batches}


def main() -> None:
    args = parse_args()
    import tensorflow as tf

    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)

    from keras_transformer.text.data import make_dataset, read_parallel_files
    from keras_transformer.text.tokenizer_pair import load_tokenizers
    from keras_transformer.text.vocabulary import build_tokenizers

    data = Path(args.data_dir)
    corpus = read_parallel_files(data / "train.de", data / "train.en")
    vocab = Path(args.vocab) if args.vocab else Path(tempfile.mkdtemp()) / "vocab"
    if vocab.is_dir():
        source_tokenizer, target_tokenizer = load_tokenizers(vocab)
    else:
        source_tokenizer, target_tokenizer = build_tokenizers(
            corpus, vocab, vocab_size=args.vocab_size, source_name="de", target_name="en"
        )
    settings = dict(batch_size=args.batch_size, batch_tokens=args.batch_tokens,
                    max_length=args.max_length, bucket_width=args.bucket_width)
    pairs = corpus
    if args.input == "dataset":
        pairs = tf.data.Dataset.from_tensor_slices((corpus.sources, corpus.targets)).shuffle(
            len(corpus), seed=0, reshuffle_each_iteration=True
        )
    pipelines = {
        "ours": make_dataset(pairs, source_tokenizer, target_tokenizer, seed=0, **settings),
        "reference": reference_dataset(corpus, source_tokenizer, target_tokenizer, **settings),
    }
    print(f"Multi30k train: {len(corpus):,} pairs, vocabularies {source_tokenizer.vocab_size:,}"
          f" / {target_tokenizer.vocab_size:,}, {settings}, input: {args.input}")
    for name, dataset in pipelines.items():
        result = timed_pass(dataset)
        print(f"  warm-up   {name:9s}: {result['target/s']:10,.0f} target tokens/s, "
              f"{result['cpu s']:.2f} CPU s", flush=True)
    results = {name: [] for name in pipelines}
    for number in range(args.passes):
        for name, dataset in pipelines.items():
            result = timed_pass(dataset)
            results[name].append(result)
            print(f"  pass {number + 1} {name:9s}: {result['target/s']:10,.0f} target tokens/s, "
                  f"{result['cpu s']:.2f} CPU s", flush=True)
    medians = {}
    for name, passes in results.items():
        medians[name] = {key: statistics.median(p[key] for p in passes) for key in passes[0]}
        m = medians[name]
        print(f"{name:9s}: {m['target/s']:10,.0f} target tokens/s, {m['source/s']:10,.0f} source "
              f"tokens/s, {m['batches/s']:7,.0f} batches/s, padding {m['padding']:.1%}, "
              f"{m['labels/batch']:,.0f} label positions per batch, "
              f"{m['target/cpu s']:,.0f} target tokens per CPU s ({m['cpu s']:.2f} CPU s per pass)")
    ratios = [ours["target/s"] / reference["target/s"]
              for ours, reference in zip(results["ours"], results["reference"], strict=True)]
    cpu_ratio = medians["ours"]["target/cpu s"] / medians["reference"]["target/cpu s"]
    print(f"ours / reference: {statistics.median(ratios):.2f}x real target tokens/s (median of "
          f"rounds: {', '.join(f'{r:.2f}' for r in ratios)}), {cpu_ratio:.2f}x per CPU second")


if __name__ == "__main__":
    main()
