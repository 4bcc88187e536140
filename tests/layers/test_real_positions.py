"""`at_real_positions`: a position-wise sub-layer computed at the real positions only gives the
same real outputs and gradients as on every position, keeps padding's input, and the encoder and
decoder stacks use it without changing a real output."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.layers import (
    Decoder,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    MultiHeadAttention,
    attention_mask,
)
from keras_transformer.layers.attention import REAL_POSITIONS_MIN_WIDTH
from keras_transformer.layers.real_positions import at_real_positions, bucketed_rows, gather_real

REAL = np.array([[True, True, True, False, False], [True, True, True, True, True],
                 [True, False, False, False, False]])
# 19 real positions: gathered as 20 rows (`bucketed_rows`), the extra one dropped again.
MANY_REAL = np.arange(9)[None, :] < np.array([[9], [6], [4]])


def inputs(seed: int = 0, length: int = 5) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(3, length, 8)).astype("float32")


def feed_forward_sublayer():
    """The feed-forward network inside its Add & Norm, as the encoder layers have it."""
    return EncoderLayer(d_model=8, num_heads=2, d_ff=16).feed_forward


@pytest.mark.parametrize("real", [REAL, MANY_REAL], ids=["9_real", "19_real"])
def test_real_outputs_are_the_sublayers_and_padding_keeps_its_input(real):
    sublayer, x = feed_forward_sublayer(), inputs(length=real.shape[1])
    out = np.asarray(at_real_positions(sublayer, x, real))
    np.testing.assert_allclose(out[real], np.asarray(sublayer(x))[real], atol=1e-6)
    np.testing.assert_array_equal(out[~real], x[~real])


@pytest.mark.parametrize("real", [REAL, MANY_REAL], ids=["9_real", "19_real"])
def test_gradients_equal_those_of_every_position(real):
    sublayer, x = feed_forward_sublayer(), tf.constant(inputs(length=real.shape[1]))
    weights = tf.constant(inputs(1, length=real.shape[1]))  # a loss that reads real positions

    def gradients(function):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.boolean_mask(function(x) * weights, real))
        return tape.gradient(loss, [x, *sublayer.trainable_weights])

    packed = gradients(lambda h: at_real_positions(sublayer, h, real))
    full = gradients(sublayer)
    for got, expected in zip(packed, full, strict=True):
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_row_counts_are_bucketed_to_a_few_sizes_at_most_an_eighth_larger():
    counts = np.arange(0, 5000)
    buckets = bucketed_rows(tf.constant(counts, tf.int64)).numpy()  # elementwise
    assert np.all(buckets >= counts)
    np.testing.assert_array_equal(buckets[:17], counts[:17])
    assert np.all(buckets[17:] <= counts[17:] * 1.125)
    # 8 sizes per power of two: 83 kernel shapes for the counts up to 5,000, not 5,000.
    assert len(set(buckets)) == 17 + 8 * 8 + 2  # 0 to 16, 8 per octave to 4096, 2 above


def test_gathered_rows_are_topped_up_with_zero_rows():
    x = inputs(length=MANY_REAL.shape[1])
    rows = np.asarray(gather_real(x, tf.where(MANY_REAL)))
    assert rows.shape == (1, 20, 8)
    np.testing.assert_array_equal(rows[0, :19], x[MANY_REAL])
    np.testing.assert_array_equal(rows[0, 19:], 0.0)


def test_every_position_without_a_mask_and_under_xla():
    sublayer, x = feed_forward_sublayer(), inputs()
    np.testing.assert_array_equal(at_real_positions(sublayer, x, None), sublayer(x))
    compiled = tf.function(lambda h: at_real_positions(sublayer, h, REAL), jit_compile=True)
    np.testing.assert_allclose(compiled(x), sublayer(x), atol=1e-5)


def test_encoder_real_outputs_equal_those_computed_on_every_position():
    encoder = Encoder(num_layers=2, d_model=8, num_heads=2, d_ff=16)
    x = inputs(2)
    out = np.asarray(encoder(x, padding_mask=REAL))
    # The same layers with the padding given to attention only: every position computed.
    mask = REAL[:, None, None, :] & REAL[:, None, :, None]
    expected = x
    for block in encoder.blocks:
        expected = block(expected, self_attention_mask=mask)
    np.testing.assert_allclose(out[REAL], np.asarray(expected)[REAL], atol=1e-5)


def test_decoder_real_outputs_equal_those_computed_on_every_position():
    decoder = Decoder(num_layers=2, d_model=8, num_heads=2, d_ff=16)
    x, encoder_output = inputs(3, length=5), inputs(4, length=4)
    source = np.array([[True] * 4, [True, True, False, False], [True, True, True, False]])
    out = np.asarray(decoder(x, encoder_output, padding_mask=REAL, encoder_padding_mask=source))
    causal = np.tril(np.ones((5, 5), bool))
    self_mask = causal & REAL[:, None, None, :] & REAL[:, None, :, None]
    cross_mask = source[:, None, None, :] & REAL[:, None, :, None]
    expected = x
    for block in decoder.blocks:
        expected = block(expected, encoder_output, self_attention_mask=self_mask,
                         cross_attention_mask=cross_mask)
    np.testing.assert_allclose(out[REAL], np.asarray(expected)[REAL], atol=1e-5)


def test_a_cached_decoding_step_takes_no_padding_mask():
    layer = DecoderLayer(d_model=8, num_heads=2, d_ff=16)
    cache = (np.zeros((3, 2, 5, 4), "float32"),) * 2
    with pytest.raises(ValueError, match="padding_mask"):
        layer(inputs(length=1), inputs(), padding_mask=REAL[:, :1], self_attention_cache=cache,
              cache_index=0)


def test_attention_projects_real_queries_and_keys_only():

    attention = MultiHeadAttention(num_heads=2, d_model=REAL_POSITIONS_MIN_WIDTH)
    rng = np.random.default_rng(5)
    query = rng.normal(size=(3, 5, REAL_POSITIONS_MIN_WIDTH)).astype("float32")
    value = rng.normal(size=(3, 4, REAL_POSITIONS_MIN_WIDTH)).astype("float32")
    keys_real = np.array([[True] * 4, [True, True, False, False], [True, False, False, False]])
    mask = attention_mask(None, None, query_padding_mask=REAL, key_padding_mask=keys_real)
    expected = np.asarray(attention(query, value, attention_mask=mask))
    perturbed = value.copy()
    perturbed[~keys_real] = 1e3  # keys and values never projected, so never read
    out = np.asarray(attention(query, perturbed, attention_mask=mask, query_padding_mask=REAL,
                               key_padding_mask=keys_real))
    np.testing.assert_allclose(out[REAL], expected[REAL], atol=1e-4)
    np.testing.assert_array_equal(out[~REAL], 0.0)
