"""A tiny Transformer trained for a few seconds to reverse sequences of number words.

A trained model makes decoding tests meaningful: its next-token distributions are peaked (no
near-ties for float noise to flip) and its outputs end with END.
"""

import keras
import numpy as np
import pytest

from keras_transformer import (
    MaskedSparseCategoricalCrossentropy,
    TransformerConfig,
    build_transformer,
)
from keras_transformer.text.tokenizer import RESERVED_TOKENS, SubwordTokenizer

START, END = RESERVED_TOKENS.index("[START]"), RESERVED_TOKENS.index("[END]")
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
         "eleven"]
LONGEST = 8


def reverse_examples(count: int, seed: int):
    """Random word-id sequences (length 2-8) and their reversal as decoder inputs and labels."""
    rng = np.random.default_rng(seed)
    first = len(RESERVED_TOKENS)
    source = np.zeros((count, LONGEST), np.int32)
    target_in = np.zeros((count, LONGEST + 1), np.int32)
    labels = np.zeros((count, LONGEST + 1), np.int32)
    for row in range(count):
        length = rng.integers(2, LONGEST + 1)
        ids = rng.integers(first, first + len(WORDS), size=length)
        source[row, :length] = ids
        target_in[row, 0] = START
        target_in[row, 1 : length + 1] = ids[::-1]
        labels[row, :length] = ids[::-1]
        labels[row, length] = END
    return source, target_in, labels


@pytest.fixture(scope="session")
def make_examples():
    """`make_examples(count, seed) -> (source, decoder_input, labels)` of the reversal task."""
    return reverse_examples


@pytest.fixture(scope="session")
def reverse_model():
    keras.utils.set_random_seed(0)
    config = TransformerConfig(
        source_vocab_size=len(RESERVED_TOKENS) + len(WORDS),
        target_vocab_size=len(RESERVED_TOKENS) + len(WORDS),
        num_encoder_layers=1,
        num_decoder_layers=1,
        d_model=32,
        num_heads=4,
        d_ff=64,
        dropout=0.0,
        max_length=24,
        label_smoothing=0.0,
    )
    model = build_transformer(config)
    model.compile(keras.optimizers.Adam(3e-3), MaskedSparseCategoricalCrossentropy())
    source, target_in, labels = reverse_examples(4096, seed=0)
    model.fit(
        {"source_tokens": source, "target_tokens": target_in}, labels,
        batch_size=64, epochs=4, verbose=0,
    )
    return model


@pytest.fixture(scope="session")
def word_tokenizer(tmp_path_factory):
    """One tokenizer for both sides: the reserved tokens then the twelve number words."""
    directory = tmp_path_factory.mktemp("words")
    return SubwordTokenizer.from_tokens(list(RESERVED_TOKENS) + WORDS, directory)
