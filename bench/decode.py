"""Decoding speed: cached vs uncached, 64 vs 16 tokens, beam 4 vs greedy.

A Multi30k-sized model (d_model 256, 3+3 layers, 8 heads, d_ff 1024, vocabularies of 8000) with
random weights (timing does not depend on them) decodes a fixed number of forced tokens (END is
ignored), so every variant does the same number of steps. Each variant is traced once inside
`tf.function`, with and without XLA, then timed as the best of `--repeats` runs. "ms/token" is
wall time per decoding step for the whole batch (encoder included); tokens/s counts every row.
The uncached reference is timed against the cached decoder in both modes (it cannot be compiled:
its shapes grow every step).

    PYTHONPATH=. .venv/bin/python bench/decode.py [--batch-sizes 32 1]

Targets: cached >= 4x faster than uncached at 64 tokens; with the cache, ms/token at 64 tokens
<= 1.3x that at 16 tokens; beam 4 <= 3x the cost of greedy.
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
from keras_transformer.inference.defaults import DEFAULT_BEAM_WIDTH

START, END = 2, 3
CONFIG = TransformerConfig(
    source_vocab_size=8000,
    target_vocab_size=8000,
    num_encoder_layers=3,
    num_decoder_layers=3,
    d_model=256,
    num_heads=8,
    d_ff=1024,
    dropout=0.0,
    max_length=128,
)


def seconds_per_run(function, source, repeats: int) -> float:
    """Best wall time of `function(source)` over `repeats` runs, after one warm-up (tracing,
    compiling) call. The best run is the one least disturbed by other work on shared cores."""
    function(source)[0].numpy()
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function(source)[0].numpy()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 1])
    parser.add_argument("--tokens", type=int, default=64, help="forced tokens (long run)")
    parser.add_argument("--short-tokens", type=int, default=16, help="forced tokens (short run)")
    parser.add_argument("--source-length", type=int, default=20, help="source tokens")
    parser.add_argument("--beam", type=int, default=DEFAULT_BEAM_WIDTH)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    keras.utils.set_random_seed(0)
    decoder = SequenceDecoder(build_transformer(CONFIG), START, END)
    rng = np.random.default_rng(0)
    print(
        f"model: d_model {CONFIG.d_model}, {CONFIG.num_encoder_layers}+"
        f"{CONFIG.num_decoder_layers} layers, {CONFIG.num_heads} heads, d_ff {CONFIG.d_ff}, "
        f"vocab {CONFIG.target_vocab_size}, random weights; source {args.source_length} tokens; "
        f"best of {args.repeats} runs; {os.cpu_count()} CPU cores visible, {tf.__version__}"
    )

    def decoding(method, tokens, jit, **options):
        return tf.function(
            lambda source: method(source, max_length=tokens, stop_at_end=False, **options),
            jit_compile=jit,
        )

    variants = {  # name: (method, forced tokens, options)
        "cached greedy": (decoder.greedy, args.tokens, {}),
        f"cached greedy, {args.short_tokens} tokens": (decoder.greedy, args.short_tokens, {}),
        f"cached beam {args.beam}": (decoder.beam_search, args.tokens, {"beam_width": args.beam}),
        # Re-runs the decoder on a growing prefix: shapes change every step, so no XLA.
        "uncached greedy": (decoder.greedy, args.tokens, {"use_cache": False}),
    }
    for batch in args.batch_sizes:
        source = tf.constant(
            rng.integers(4, CONFIG.source_vocab_size, (batch, args.source_length)), tf.int32
        )
        print(f"\nbatch {batch}, {args.tokens} forced tokens: ms/token (tokens/s)")
        print(f"  {'':<28} {'tf.function':>22} {'tf.function + XLA':>22}")
        ms = {}
        for name, (method, tokens, options) in variants.items():
            cells = []
            for jit in (False, True):
                if jit and options.get("use_cache") is False:
                    cells.append(f"{'-':>22}")
                    continue
                seconds = seconds_per_run(decoding(method, tokens, jit, **options), source,
                                          args.repeats)
                ms[name, jit] = 1000 * seconds / tokens
                cells.append(f"{ms[name, jit]:9.2f} ({batch * tokens / seconds:8.0f}/s)")
            print(f"  {name:<28} {cells[0]} {cells[1]}", flush=True)
        cached, short, beam, uncached = variants
        for jit, label in ((False, "tf.function"), (True, "XLA")):
            print(
                f"  {label:<12} uncached / cached {ms[uncached, False] / ms[cached, jit]:5.2f}x "
                f"(>= 4)   {args.tokens} / {args.short_tokens} tokens "
                f"{ms[cached, jit] / ms[short, jit]:5.2f}x (<= 1.3)   "
                f"beam {args.beam} / greedy {ms[beam, jit] / ms[cached, jit]:5.2f}x (<= 3)"
            )


if __name__ == "__main__":
    main()
