"""Multi30k German -> English: training speed against the TensorFlow tutorial's model, and BLEU.

Prints figures, asserts nothing. Two parts, in one run:

1. Speed (`--speed-steps` steps each, after `--warmup-steps` untimed ones, in alternating rounds
   of 10 so that both see the same load on a shared machine): our model and data
   pipeline (length bucketing, d_k = d_model / heads) against a reference built the way the
   TensorFlow "Neural machine translation with a Transformer and Keras" tutorial builds it
   (`keras.layers.MultiHeadAttention` with key_dim = d_model per head, implicit Keras masks,
   batches padded to their longest sentence, no bucketing), same d_model / layers / heads / data /
   batch / tokenizers / loss / optimizer / precision. Reported: real (non-padding) target tokens
   per second, and FLOP utilisation = model FLOPs per second (from the shapes actually computed)
   / a float32 matmul rate measured in the same run (and / a bfloat16 one with
   `--mixed-precision` on CPU, where both models' matmuls run in bfloat16).
2. Quality (unless `--speed-only`): `keras_transformer.training.train` under `--time-budget`
   minutes, then validation loss and sacreBLEU on the validation set (lowercased and cased),
   decoded with the project's cached beam search.

Examples (the figures reported so far came from these, on 2 shared CPU cores):
    python bench/train_multi30k.py --speed-only                          # ~4 minutes
    nohup python bench/train_multi30k.py --quality-only --mixed-precision --layers 3 \
        --dropout 0.15 --shared-vocab --tie-output-embedding --warmup 2000 \
        --average-checkpoints 5 --time-budget 60 > /tmp/bench_train.log &  # 42.3 BLEU lowercased
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=str(REPO_ROOT / "../shared/data/multi30k"),
                        help="directory with train.{de,en} and val.{de,en}")
    parser.add_argument("--run-dir", default=str(REPO_ROOT / "runs/multi30k"))
    parser.add_argument("--speed-only", action="store_true", help="skip the quality run")
    parser.add_argument("--quality-only", action="store_true", help="skip the speed comparison")
    parser.add_argument("--speed-steps", type=int, default=80)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--time-budget", type=float, default=60.0, help="training minutes")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=512)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--shared-vocab", action="store_true")
    parser.add_argument("--tie-output-embedding", action="store_true",
                        help="output projection = transposed target embedding")
    parser.add_argument("--lower-case", action="store_true")
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--warmup", type=int, default=4000, help="schedule warm-up steps")
    parser.add_argument("--learning-rate-scale", type=float, default=1.0)
    parser.add_argument("--mixed-precision", action="store_true")
    parser.add_argument("--jit-compile", action="store_true",
                        help="XLA for our model (batch lengths padded to multiples of 8)")
    parser.add_argument("--average-checkpoints", type=int, default=1,
                        help="average the last N epochs' weights at the end (kept if better)")
    parser.add_argument("--beam-width", type=int, default=4)
    return parser.parse_args()


def matmul_flops_per_second(dtype: str, size: int = 1024, seconds: float = 3.0) -> float:
    """Matmul rate of this machine in `dtype`: repeated `(size, size) @ (size, size)`."""
    import tensorflow as tf

    a = tf.random.normal((size, size), dtype=dtype)
    b = tf.random.normal((size, size), dtype=dtype)

    @tf.function
    def multiply(a, b):
        return tf.matmul(a, b)

    multiply(a, b).numpy()
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        multiply(a, b).numpy()
        count += 1
    return 2 * size**3 * count / (time.perf_counter() - start)


def transformer_flops(config, batch: int, source: int, target: int, head_width: int) -> float:
    """Training FLOPs of one step (forward matmuls x 3 for the backward pass).

    Args:
        config: TransformerConfig.
        batch, source, target: the padded shapes of the step.
        head_width: projection width per head (d_model / heads for ours, d_model for the
            tutorial's key_dim = d_model).
    """
    d, ff, vocab = config.d_model, config.d_ff, config.target_vocab_size
    inner = config.num_heads * head_width

    def attention(queries, keys):
        projections = 2 * queries * d * inner * 2 + 2 * keys * d * inner * 2  # Q, O | K, V
        return projections + 2 * 2 * queries * keys * inner  # scores and weighted sum

    encoder = attention(source, source) + 2 * 2 * source * d * ff
    decoder = attention(target, target) + attention(target, source) + 2 * 2 * target * d * ff
    forward = (config.num_encoder_layers * encoder + config.num_decoder_layers * decoder
               + 2 * target * d * vocab)
    return 3.0 * batch * forward


def reference_model(config):
    """The TensorFlow tutorial's Transformer (post-LN, key_dim = d_model, implicit masks)."""
    import keras
    import numpy as np

    from keras_transformer.layers import sinusoidal_encoding

    d = config.d_model

    class TutorialEmbedding(keras.layers.Layer):
        def __init__(self, vocab_size, **kwargs):
            super().__init__(**kwargs)
            self.embedding = keras.layers.Embedding(vocab_size, d, mask_zero=True)
            self.encoding = sinusoidal_encoding(config.max_length, d)

        def compute_mask(self, x, mask=None):
            return self.embedding.compute_mask(x, mask)

        def compute_output_shape(self, input_shape):
            return (*input_shape, d)

        def call(self, x):
            length = keras.ops.shape(x)[1]
            dtype = self.compute_dtype
            encoding = keras.ops.convert_to_tensor(self.encoding, dtype)[None, :length]
            return self.embedding(x) * keras.ops.cast(np.sqrt(d), dtype) + encoding

    def attention_block(x, context=None, causal=False):
        attention = keras.layers.MultiHeadAttention(config.num_heads, key_dim=d,
                                                    dropout=config.dropout)
        if context is None:
            attended = attention(query=x, value=x, key=x, use_causal_mask=causal)
        else:
            attended = attention(query=x, value=context, key=context)
        return keras.layers.LayerNormalization()(keras.layers.Add()([x, attended]))

    def feed_forward(x):
        h = keras.layers.Dense(config.d_ff, activation="relu")(x)
        h = keras.layers.Dropout(config.dropout)(keras.layers.Dense(d)(h))
        return keras.layers.LayerNormalization()(keras.layers.Add()([x, h]))

    source = keras.Input((None,), dtype="int32", name="source_tokens")
    target = keras.Input((None,), dtype="int32", name="target_tokens")
    x = keras.layers.Dropout(config.dropout)(TutorialEmbedding(config.source_vocab_size)(source))
    for _ in range(config.num_encoder_layers):
        x = feed_forward(attention_block(x))
    y = keras.layers.Dropout(config.dropout)(TutorialEmbedding(config.target_vocab_size)(target))
    for _ in range(config.num_decoder_layers):
        y = feed_forward(attention_block(attention_block(y, causal=True), context=x))
    logits = keras.layers.Dense(config.target_vocab_size)(y)
    return keras.Model({"source_tokens": source, "target_tokens": target}, logits)


def tutorial_dataset(corpus, source_tokenizer, target_tokenizer, batch_size, max_length, seed):
    """Batches as the tutorial makes them: shuffle, batch, tokenize, pad to the longest."""
    import tensorflow as tf

    def prepare(sources, targets):
        source = source_tokenizer.tokenize(sources)[:, :max_length].to_tensor()
        target = target_tokenizer.tokenize(targets)[:, : max_length - 1]
        column = tf.ones([target.nrows(), 1], tf.int64)
        inputs = tf.concat([column * target_tokenizer.start_id, target], 1).to_tensor()
        labels = tf.concat([target, column * target_tokenizer.end_id], 1).to_tensor()
        return {"source_tokens": source, "target_tokens": inputs}, labels

    return (
        tf.data.Dataset.from_tensor_slices((corpus.sources, corpus.targets))
        .shuffle(20000, seed=seed)
        .batch(batch_size)
        .map(prepare, tf.data.AUTOTUNE)
        .prefetch(tf.data.AUTOTUNE)
    )


class SpeedMeter:
    """Trains a model one `train_on_batch` at a time and adds up time, tokens and FLOPs.

    Args:
        model: compiled model.
        dataset: its training batches (repeated forever).
        config: TransformerConfig, for the FLOP count.
        head_width: projection width per head, for the FLOP count.
    """

    def __init__(self, model, dataset, config, head_width):
        self.model, self.config, self.head_width = model, config, head_width
        self.batches = iter(dataset.repeat())
        self.seconds = self.real = self.padded = self.flops = 0.0
        self.steps = 0

    def run(self, steps: int, timed: bool = True) -> None:
        import numpy as np

        for _ in range(steps):
            inputs, labels = next(self.batches)
            start = time.perf_counter()
            self.model.train_on_batch(inputs, labels)
            if not timed:
                continue
            self.seconds += time.perf_counter() - start
            self.steps += 1
            self.real += float(np.count_nonzero(labels.numpy()))
            self.padded += float(np.prod(labels.shape))
            batch, source_length = inputs["source_tokens"].shape
            self.flops += transformer_flops(
                self.config, batch, source_length, labels.shape[1], self.head_width
            )


def speed_comparison(args, config, settings, corpus, source_tokenizer, target_tokenizer):
    import keras

    from keras_transformer.model import ENCODER, build_transformer
    from keras_transformer.text.data import make_dataset
    from keras_transformer.training.accumulation import TokenWeightedSteps
    from keras_transformer.training.inputs import SHAPE_MULTIPLE, pad_to_multiple
    from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
    from keras_transformer.training.metrics import MaskedAccuracy
    from keras_transformer.training.schedules import TransformerSchedule
    from keras_transformer.training.trainer import compile_model, dtype_policy

    keras.utils.set_random_seed(0)
    with dtype_policy(settings.mixed_precision):
        reference = reference_model(config)
    reference.compile(
        optimizer=keras.optimizers.Adam(TransformerSchedule(config.d_model, settings.warmup_steps),
                                        beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=config.label_smoothing),
        metrics=[MaskedAccuracy()],
    )
    reference_data = tutorial_dataset(corpus, source_tokenizer, target_tokenizer,
                                      settings.batch_size, config.max_length, seed=0)
    keras.utils.set_random_seed(0)
    with dtype_policy(settings.mixed_precision):
        ours = build_transformer(config)
        compile_model(ours, config, settings)
        # The train step `train()` runs: the loss is the mean over the real target tokens.
        TokenWeightedSteps(ours).install()
    our_data = make_dataset(corpus, source_tokenizer, target_tokenizer,
                            batch_size=settings.batch_size, max_length=config.max_length, seed=0)
    if settings.jit_compile:
        our_data = pad_to_multiple(our_data, SHAPE_MULTIPLE)

    # float32, and the compute dtype of a mixed policy (bfloat16 on CPU).
    dtypes = dict.fromkeys(["float32", ours.get_layer(ENCODER).compute_dtype])
    rates_before = {dtype: matmul_flops_per_second(dtype) for dtype in dtypes}
    meters = {
        "reference (tutorial)": SpeedMeter(reference, reference_data, config, config.d_model),
        "ours": SpeedMeter(ours, our_data, config, config.d_k),
    }
    for meter in meters.values():
        meter.run(args.warmup_steps, timed=False)
    # Alternate short rounds, so that both models see the same load on a shared machine.
    rounds = max(1, args.speed_steps // 10)
    for _ in range(rounds):
        for meter in meters.values():
            meter.run(args.speed_steps // rounds)
    # The better of two measurements, so that load on the machine does not flatter utilisation.
    rates = {dtype: max(before, matmul_flops_per_second(dtype))
             for dtype, before in rates_before.items()}
    for dtype, rate in rates.items():
        print(f"{dtype} matmul rate (1024x1024, best of before/after, this run): "
              f"{rate / 1e9:.1f} GFLOP/s")
    for name, meter in meters.items():
        flops_per_s = meter.flops / meter.seconds
        utilisation = ", ".join(f"{flops_per_s / rate:.0%} of the {dtype} matmul rate"
                                for dtype, rate in rates.items())
        print(f"{name:>21}: {meter.real / meter.seconds:8.0f} real target tokens/s "
              f"({meter.real / meter.padded:.0%} of target positions real), "
              f"{flops_per_s / 1e9:6.2f} GFLOP/s = {utilisation}, "
              f"{meter.steps} steps in {meter.seconds:.1f} s")
    ours, reference = meters["ours"], meters["reference (tutorial)"]
    ratio = (ours.real / ours.seconds) / (reference.real / reference.seconds)
    print(f"speed-up (real target tokens/s, ours / reference): {ratio:.2f}x")


def bleu(run, sources, references, beam_width):
    """sacreBLEU of the run's translations of `sources`, lowercased and cased."""
    import sacrebleu
    import tensorflow as tf

    from keras_transformer.inference.translator import Translator

    translator = Translator(run.model, run.source_tokenizer, run.target_tokenizer,
                            beam_width=beam_width)
    hypotheses = []
    for start in range(0, len(sources), 64):
        batch = tf.constant(sources[start: start + 64])
        hypotheses += [t.decode("utf-8")
                       for t in translator.translate(batch)["translation"].numpy()]
    lower = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True).score
    cased = sacrebleu.corpus_bleu(hypotheses, [references]).score
    return lower, cased, hypotheses


def main() -> int:
    args = parse_args()
    import tensorflow as tf

    from keras_transformer.config import TransformerConfig
    from keras_transformer.settings import TrainingSettings
    from keras_transformer.text.data import read_parallel_files
    from keras_transformer.text.tokenizer_pair import load_tokenizers
    from keras_transformer.text.vocabulary import build_tokenizers
    from keras_transformer.training.trainer import train

    data = Path(args.data_dir)
    files = {name: str(data / name) for name in ("train.de", "train.en", "val.de", "val.en")}
    settings = TrainingSettings(
        source_file=files["train.de"], target_file=files["train.en"],
        val_source_file=files["val.de"], val_target_file=files["val.en"],
        epochs=1000, batch_size=args.batch_size, warmup_steps=args.warmup,
        learning_rate_scale=args.learning_rate_scale, time_budget_minutes=args.time_budget,
        mixed_precision=args.mixed_precision, jit_compile=args.jit_compile,
        vocab_size=args.vocab_size,
        lower_case=args.lower_case, shared_vocab=args.shared_vocab,
        average_checkpoints=args.average_checkpoints,
    )
    print(f"TensorFlow {tf.__version__}, {len(tf.config.list_logical_devices('GPU'))} GPU(s), "
          f"{len(tf.config.list_logical_devices('CPU'))} CPU device(s)")
    corpus = read_parallel_files(files["train.de"], files["train.en"])

    config = TransformerConfig(
        num_encoder_layers=args.layers, num_decoder_layers=args.layers, d_model=args.d_model,
        num_heads=args.heads, d_ff=args.d_ff, dropout=args.dropout, max_length=128,
        share_embeddings=args.shared_vocab, tie_output_embedding=args.tie_output_embedding,
        label_smoothing=args.label_smoothing,
    )
    if not args.quality_only:
        vocab_dir = Path(args.run_dir + "-speed-vocab")
        if vocab_dir.is_dir():
            source_tokenizer, target_tokenizer = load_tokenizers(vocab_dir)
        else:
            source_tokenizer, target_tokenizer = build_tokenizers(
                corpus, vocab_dir, vocab_size=args.vocab_size, lower_case=args.lower_case,
                shared=args.shared_vocab, source_name="de", target_name="en")
        config = config.replace(source_vocab_size=source_tokenizer.vocab_size,
                                target_vocab_size=target_tokenizer.vocab_size)
        print(f"model: {config}")
        speed_comparison(args, config, settings, corpus, source_tokenizer, target_tokenizer)
    if args.speed_only:
        return 0

    start = time.perf_counter()
    run = train(config, settings, args.run_dir, verbose=2)
    minutes = (time.perf_counter() - start) / 60
    print(f"model: {run.config}")
    best = min(range(len(run.history["val_loss"])), key=run.history["val_loss"].__getitem__)
    val = read_parallel_files(files["val.de"], files["val.en"])
    lower, cased, hypotheses = bleu(run, val.sources, val.targets, args.beam_width)
    print(f"trained {len(run.history['epoch'])} epochs in {minutes:.1f} min; best val_loss "
          f"{run.history['val_loss'][best]:.3f} (perplexity "
          f"{math.exp(run.history['val_loss'][best]):.1f}, label-smoothed) at epoch "
          f"{run.history['epoch'][best]}")
    print(f"sacreBLEU on val ({len(val)} sentences, beam {args.beam_width}): "
          f"{lower:.1f} lowercased, {cased:.1f} cased")
    examples = zip(val.sources[:3], hypotheses[:3], val.targets[:3], strict=True)
    for source, hypothesis, reference in examples:
        print(f"  {source}\n    -> {hypothesis}\n    ref {reference}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
