"""`RealTokenLogits`: the model's own logits at the real label positions, and only those."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.model import build_transformer
from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.real_token_logits import RealTokenLogits

LABELS = np.array([[5, 6, 7, 2], [8, 2, 0, 0], [9, 0, 0, 0]])
INPUTS = {
    "source_tokens": np.array([[3, 4, 5, 0, 0], [6, 7, 0, 0, 0], [8, 9, 10, 11, 0]]),
    "target_tokens": np.array([[1, 5, 6, 7], [1, 8, 0, 0], [1, 0, 0, 0]]),
}


def transformer(tie: bool) -> keras.Model:
    keras.utils.set_random_seed(0)
    return build_transformer(TransformerConfig(
        source_vocab_size=20, target_vocab_size=20, num_encoder_layers=1, num_decoder_layers=1,
        d_model=16, num_heads=2, d_ff=32, dropout=0.0, max_length=16,
        share_embeddings=tie, tie_output_embedding=tie,
    ))


@pytest.mark.parametrize("tie", [False, True])
def test_logits_are_the_models_at_the_real_positions_in_row_major_order(tie):
    model = transformer(tie)
    logits, labels = RealTokenLogits(model)(INPUTS, LABELS)
    full = keras.ops.convert_to_numpy(model(INPUTS))
    rows, columns = np.nonzero(LABELS)
    assert logits.shape == (7, 20) and logits.dtype == "float32"
    np.testing.assert_array_equal(labels, [5, 6, 7, 2, 8, 2, 9])
    np.testing.assert_allclose(logits, full[rows, columns], atol=1e-5)


def test_loss_and_gradients_equal_the_padded_computation():
    model = transformer(tie=False)
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)
    real_token_logits = RealTokenLogits(model)
    with tf.GradientTape(persistent=True) as tape:
        padded = loss(LABELS, model(INPUTS, training=True))
        logits, labels = real_token_logits(INPUTS, LABELS, training=True)
        real = loss(labels, logits)
    assert float(real) == pytest.approx(float(padded), rel=1e-6)
    for expected, got in zip(tape.gradient(padded, model.trainable_weights),
                             tape.gradient(real, model.trainable_weights), strict=True):
        np.testing.assert_allclose(tf.convert_to_tensor(got), tf.convert_to_tensor(expected),
                                   atol=1e-6)
