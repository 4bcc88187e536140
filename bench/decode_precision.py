"""Decoding a mixed-precision model: as trained, as exported (`compute_dtype_copy`), and float32.

Under `mixed_bfloat16` every layer keeps float32 variables and casts them at each call, so a
decoding loop casts every kernel and the embedding matrix once per generated token. Exports and
run translators decode with a copy whose variables are stored in bfloat16 instead
(`keras_transformer.inference.compute_dtype.compute_dtype_copy`). This times the three on the same
random-weight model of the `multi30k_small` shape (d_model 128, 3+3 layers, 4 heads, d_ff 512,
a shared tied vocabulary of 8,000), greedy and beam 4 at batch 1 and 32, each decoding traced
once in `tf.function` and timed in alternating rounds (best round per variant), a fixed number of
forced tokens (END ignored) so that every variant does the same steps. It checks that the copy
decodes the same tokens as the mixed model. Prints figures, asserts nothing.

    PYTHONPATH=. .venv/bin/python bench/decode_precision.py [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference import SequenceDecoder
from keras_transformer.inference.compute_dtype import compute_dtype_copy
from keras_transformer.inference.defaults import DEFAULT_BEAM_WIDTH
from keras_transformer.training.trainer import dtype_policy

START, END = 2, 3
CONFIG = TransformerConfig(
    source_vocab_size=8000, target_vocab_size=8000, num_encoder_layers=3, num_decoder_layers=3,
    d_model=128, num_heads=4, d_ff=512, dropout=0.0, max_length=128,
    share_embeddings=True, tie_output_embedding=True,
)
SETTINGS = ((1, 1), (1, 32), (DEFAULT_BEAM_WIDTH, 1), (DEFAULT_BEAM_WIDTH, 32))


def models() -> dict[str, keras.Model]:
    """The mixed model (weights perturbed from their initial values), its compute-dtype copy,
    and a float32 model with the same weights."""
    keras.utils.set_random_seed(0)
    with dtype_policy(True):
        mixed = build_transformer(CONFIG)
    rng = np.random.default_rng(0)
    weights = [w + rng.normal(0, 0.02, w.shape).astype(w.dtype) for w in mixed.get_weights()]
    mixed.set_weights(weights)
    full = build_transformer(CONFIG)
    full.set_weights(weights)
    return {"mixed, as trained": mixed, "bfloat16 copy (exported)": compute_dtype_copy(mixed),
            "float32": full}


def forced_decoding(decoder: SequenceDecoder, beam_width: int, tokens: int):
    """`source -> (tokens, scores)`: exactly `tokens` steps of greedy or beam search."""
    if beam_width == 1:
        return lambda source: decoder.greedy(source, max_length=tokens, stop_at_end=False)
    return lambda source: decoder.beam_search(source, beam_width=beam_width, max_length=tokens,
                                              stop_at_end=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=24, help="forced tokens per sentence")
    parser.add_argument("--source-length", type=int, default=14, help="source tokens")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"d_model {CONFIG.d_model}, {CONFIG.num_encoder_layers}+{CONFIG.num_decoder_layers} "
          f"layers, vocab {CONFIG.target_vocab_size}; source {args.source_length} tokens, "
          f"{args.tokens} forced tokens; best of {args.rounds} alternating rounds; "
          f"{os.cpu_count()} CPU cores visible, TensorFlow {tf.__version__}")
    variants = models()
    rng = np.random.default_rng(1)
    names = list(variants)
    print(f"\n{'beam, batch':<12}" + "".join(f"{name + ' ms':>28}" for name in names)
          + f"{'mixed / copy':>14}{'float32 / copy':>16}{'same tokens':>13}")
    for beam_width, batch in SETTINGS:
        source = tf.constant(
            rng.integers(4, CONFIG.source_vocab_size, (batch, args.source_length)), tf.int32)
        functions = {name: tf.function(forced_decoding(SequenceDecoder(model, START, END),
                                                      beam_width, args.tokens))
                     for name, model in variants.items()}
        outputs = {name: function(source)[0].numpy() for name, function in functions.items()}
        best = dict.fromkeys(names, float("inf"))
        for _ in range(args.rounds):
            for name, function in functions.items():
                started = time.perf_counter()
                function(source)[0].numpy()
                best[name] = min(best[name], time.perf_counter() - started)
        same = np.array_equal(outputs[names[0]], outputs[names[1]])
        copy = best[names[1]]
        print(f"{f'{beam_width}, {batch}':<12}"
              + "".join(f"{1000 * best[name]:>28.1f}" for name in names)
              + f"{best[names[0]] / copy:>13.2f}x{best[names[2]] / copy:>15.2f}x"
              + f"{'yes' if same else 'NO':>13}", flush=True)


if __name__ == "__main__":
    main()
