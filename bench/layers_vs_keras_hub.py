"""Training step speed: this project's `build_transformer` against keras-hub's layers, same batches.

Prints figures, asserts nothing. For each precision (`--precision`, float32 and mixed bfloat16 by
default) one process builds two encoder-decoder models of the same shape:

- keras-hub: `keras_hub.layers.TokenAndPositionEmbedding` (learned positions),
  `TransformerEncoder` / `TransformerDecoder` (post-LN, ReLU, head width d_model / heads),
  explicit padding masks, dropout on the embeddings, a Dense output projection;
- ours: `keras_transformer.build_transformer` (untied output projection, the same dropout),
  twice: trained by Keras' own train step and loss, as keras-hub's model is ("ours, Keras
  step"), and by the project's (`TokenWeightedSteps` with `MaskedSparseCategoricalCrossentropy`,
  what `keras-transformer train` runs: its output projection and loss see the real target
  positions only, and the loss has its own softmax-based gradient; "ours").

All train with Adam on the paper's schedule and the same loss function, the mean cross-entropy of
the real target tokens: `keras.losses.SparseCategoricalCrossentropy(from_logits=True,
ignore_class=0)`, and for "ours" the project's loss without label smoothing, which computes the same
(a test checks it), on identical batches: the Multi30k training stream (`--data-dir`; without it,
the built-in number task), 64 pairs a batch, each side padded to its batch's longest sentence, as
the TensorFlow tutorial makes them (`train_multi30k.tutorial_dataset`, one dataset per model with
the same seeded shuffle; two more are compared batch by batch first to prove the streams equal).
After untimed warm-up steps the models train in alternating short rounds, so all see the same load
on a shared machine. Reported per model: real (non-padding) target tokens per second, and FLOP
utilisation: model FLOPs per second (counted from the padded shapes by
`train_multi30k.transformer_flops`, so for the project's step, which skips much of the padding, a
padded-equivalent rate) over a matmul rate measured in the same run (the better of a measurement
before and one after the timed rounds), in float32 and, for the mixed policy, in bfloat16 as well.

Shapes (`--shape`): `small` is d_model 128, 2+2 layers, 4 heads, d_ff 512 (the Multi30k recipe's
size); `base` is the paper's base model, d_model 512, 6+6 layers, 8 heads, d_ff 2048, with fewer
steps by default.

    python bench/layers_vs_keras_hub.py                 # small shape, float32 then bfloat16
    python bench/layers_vs_keras_hub.py --shape base    # the base shape, fewer steps

Needs the `bench` extra (`pip install -e ".[bench]"`) for keras-hub.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "bench"))

from train_multi30k import (  # noqa: E402
    SpeedMeter,
    matmul_flops_per_second,
    tutorial_dataset,
)

SHAPES = {
    "small": dict(d_model=128, layers=2, heads=4, d_ff=512,
                  steps=60, warmup_steps=5, round_steps=10),
    "base": dict(d_model=512, layers=6, heads=8, d_ff=2048,
                 steps=12, warmup_steps=4, round_steps=3),
}
PRECISIONS = ("float32", "mixed_bfloat16")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="small")
    parser.add_argument("--precision", choices=(*PRECISIONS, "both"), default="both")
    parser.add_argument("--data-dir", default=str(REPO_ROOT.parent / "shared/data/multi30k"),
                        help="directory with train.de and train.en; if missing, the built-in "
                        "number task is generated instead")
    parser.add_argument("--steps", type=int, help="timed steps per model (default: per shape)")
    parser.add_argument("--warmup-steps", type=int, help="untimed steps per model first")
    parser.add_argument("--round-steps", type=int, help="steps per model in each round")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--jit-compile", action="store_true", help="XLA for both models")
    args = parser.parse_args()
    for name in ("steps", "warmup_steps", "round_steps"):
        if getattr(args, name) is None:
            setattr(args, name, SHAPES[args.shape][name])
    if min(args.steps, args.round_steps) < 1 or args.warmup_steps < 0:
        parser.error("--steps and --round-steps must be at least 1, --warmup-steps at least 0")
    return args


def load_corpus(data_dir: Path):
    """Multi30k's training pairs (German -> English), or the number task when they are absent."""
    from keras_transformer.text.data import read_parallel_files
    from keras_transformer.text.demo_data import make_demo_corpus

    source, target = data_dir / "train.de", data_dir / "train.en"
    if source.is_file() and target.is_file():
        print(f"data: {source} -> {target}")
        return read_parallel_files(source, target)
    print(f"data: {data_dir} has no train.de/train.en; generating the built-in number task")
    return make_demo_corpus()[0]


def keras_hub_model(config):
    """keras-hub's encoder-decoder of `config`'s shape: the layers of its translation example,
    with explicit padding masks and the paper's layer-norm epsilon and dropout."""
    import keras
    import keras_hub

    def embed(tokens, vocab_size):
        embedded = keras_hub.layers.TokenAndPositionEmbedding(
            vocab_size, config.max_length, config.d_model)(tokens)
        return keras.layers.Dropout(config.dropout)(embedded)

    blocks = dict(intermediate_dim=config.d_ff, num_heads=config.num_heads,
                  dropout=config.dropout, layer_norm_epsilon=1e-6)
    source = keras.Input((None,), dtype="int32", name="source_tokens")
    target = keras.Input((None,), dtype="int32", name="target_tokens")
    source_mask, target_mask = keras.ops.not_equal(source, 0), keras.ops.not_equal(target, 0)
    x = embed(source, config.source_vocab_size)
    for _ in range(config.num_encoder_layers):
        x = keras_hub.layers.TransformerEncoder(**blocks)(x, padding_mask=source_mask)
    y = embed(target, config.target_vocab_size)
    for _ in range(config.num_decoder_layers):
        y = keras_hub.layers.TransformerDecoder(**blocks)(
            y, x, decoder_padding_mask=target_mask, encoder_padding_mask=source_mask)
    logits = keras.layers.Dense(config.target_vocab_size)(y)
    logits = keras.layers.Activation("linear", dtype="float32")(logits)
    return keras.Model({"source_tokens": source, "target_tokens": target}, logits,
                       name="keras_hub_transformer")


def compiled(model, config, jit_compile: bool, loss=None):
    """`model` compiled with the optimizer all share and `loss` (default: Keras' sparse
    cross-entropy ignoring padding)."""
    import keras

    from keras_transformer.training.schedules import TransformerSchedule

    model.compile(
        optimizer=keras.optimizers.Adam(TransformerSchedule(config.d_model), beta_1=0.9,
                                        beta_2=0.98, epsilon=1e-9),
        loss=loss or keras.losses.SparseCategoricalCrossentropy(from_logits=True,
                                                                ignore_class=0),
        jit_compile=jit_compile,
    )
    return model


def check_identical_batches(first, second, count: int = 3) -> None:
    """Two datasets made alike give the same first batches (so both models see the same)."""
    import numpy as np

    for (a_inputs, a_labels), (b_inputs, b_labels) in zip(first.take(count), second.take(count),
                                                          strict=True):
        pairs = [(a_labels, b_labels)] + [(a_inputs[key], b_inputs[key]) for key in a_inputs]
        if not all(np.array_equal(a.numpy(), b.numpy()) for a, b in pairs):
            raise RuntimeError("two seeded batch streams differ; the two models would not "
                               "train on identical batches")


def compare(precision: str, args, config, corpus, tokenizers) -> dict:
    """Trains the models in alternating rounds under `precision`; returns their meters and the
    matmul rates."""
    import keras

    from keras_transformer.model import build_transformer
    from keras_transformer.training.accumulation import TokenWeightedSteps
    from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy

    def batches():
        # A dataset each: one dataset iterated twice would reshuffle the second time.
        return tutorial_dataset(corpus, *tokenizers, args.batch_size, config.max_length, seed=0)

    check_identical_batches(batches(), batches())
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(precision)
    try:
        keras.utils.set_random_seed(0)
        hub = compiled(keras_hub_model(config), config, args.jit_compile)
        keras.utils.set_random_seed(0)
        ours_keras_step = compiled(build_transformer(config), config, args.jit_compile)
        keras.utils.set_random_seed(0)
        ours = compiled(build_transformer(config), config, args.jit_compile,
                        loss=MaskedSparseCategoricalCrossentropy())
        TokenWeightedSteps(ours, trim=not args.jit_compile).install()
    finally:
        keras.config.set_dtype_policy(previous)
    print(f"[{precision}] parameters: keras-hub {hub.count_params():,}, "
          f"ours {ours.count_params():,}", flush=True)
    dtypes = ["float32"] + (["bfloat16"] if precision == "mixed_bfloat16" else [])
    rates = {dtype: matmul_flops_per_second(dtype) for dtype in dtypes}
    meters = {
        "keras-hub": SpeedMeter(hub, batches(), config, config.d_k),
        "ours, Keras step": SpeedMeter(ours_keras_step, batches(), config, config.d_k),
        "ours": SpeedMeter(ours, batches(), config, config.d_k),
    }
    for meter in meters.values():
        meter.run(args.warmup_steps, timed=False)
    rounds = max(1, args.steps // args.round_steps)
    for index in range(rounds):
        for meter in meters.values():
            meter.run(args.round_steps)
        print(f"[{precision}] round {index + 1}/{rounds}", flush=True)
    rates = {dtype: max(rate, matmul_flops_per_second(dtype)) for dtype, rate in rates.items()}
    return {"meters": meters, "rates": rates}


def print_table(shape: str, results: dict) -> None:
    """One row per (precision, model): real target tokens/s, ratio, FLOP utilisation."""
    print(f"\n| shape {shape}, precision | model | real target tokens/s | ours / keras-hub "
          "| GFLOP/s | of float32 matmul rate | of bfloat16 matmul rate | steps |")
    print("|---|---|---|---|---|---|---|---|")
    for precision, result in results.items():
        meters, rates = result["meters"], result["rates"]
        speed = {name: meter.real / meter.seconds for name, meter in meters.items()}
        for name, meter in meters.items():
            flops = meter.flops / meter.seconds
            shares = [f"{flops / rates[dtype]:.0%}" if dtype in rates else "-"
                      for dtype in ("float32", "bfloat16")]
            ratio = f"{speed[name] / speed['keras-hub']:.2f}x" if name != "keras-hub" else ""
            print(f"| {precision} | {name} | {speed[name]:,.0f} | {ratio} | {flops / 1e9:.1f} "
                  f"| {shares[0]} | {shares[1]} | {meter.steps} in {meter.seconds:.1f} s |")
    for precision, result in results.items():
        rates = ", ".join(f"{dtype} {rate / 1e9:.1f}" for dtype, rate in result["rates"].items())
        print(f"matmul rates under {precision} (1024x1024, best of before/after): "
              f"{rates} GFLOP/s")


def main() -> int:
    args = parse_args()
    import keras_hub
    import tensorflow as tf

    from keras_transformer.config import TransformerConfig
    from keras_transformer.text.vocabulary import build_tokenizers

    shape = SHAPES[args.shape]
    print(f"TensorFlow {tf.__version__}, keras-hub {keras_hub.__version__}; shape {args.shape}: "
          f"{args.steps} timed steps per model in rounds of {args.round_steps}, after "
          f"{args.warmup_steps} warm-up steps")
    corpus = load_corpus(Path(args.data_dir))
    tokenizers = build_tokenizers(corpus, tempfile.mkdtemp(prefix="kt-vocab-"),
                                  vocab_size=args.vocab_size)
    config = TransformerConfig(
        source_vocab_size=tokenizers[0].vocab_size, target_vocab_size=tokenizers[1].vocab_size,
        num_encoder_layers=shape["layers"], num_decoder_layers=shape["layers"],
        d_model=shape["d_model"], num_heads=shape["heads"], d_ff=shape["d_ff"],
        dropout=args.dropout, max_length=128,
    )
    print(f"model: {config}")
    precisions = PRECISIONS if args.precision == "both" else (args.precision,)
    results = {precision: compare(precision, args, config, corpus, tokenizers)
               for precision in precisions}
    print_table(args.shape, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
