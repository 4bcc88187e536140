import math

import keras
import numpy as np
import pytest
from harness import run_layer_test

from keras_transformer.layers import PositionalEmbedding, sinusoidal_encoding


@pytest.mark.parametrize(
    "position, dim", [(0, 0), (0, 1), (3, 0), (3, 1), (7, 4), (7, 5), (50, 14)]
)
def test_encoding_matches_the_paper_formula(position, dim):
    d_model = 16
    encoding = sinusoidal_encoding(64, d_model)
    angle = position / 10000 ** ((dim - dim % 2) / d_model)
    expected = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    assert encoding[position, dim] == pytest.approx(expected, abs=1e-6)


def test_odd_width_keeps_the_interleaving():
    encoding = sinusoidal_encoding(10, 7)
    assert encoding.shape == (10, 7)
    np.testing.assert_allclose(encoding[5, 6], math.sin(5 / 10000 ** (6 / 7)), atol=1e-6)


def test_output_is_scaled_embedding_plus_encoding():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=16)
    ids = np.array([[3, 5, 7, 0]])
    output = np.asarray(layer(ids))
    table = np.asarray(layer.token_embedding.embeddings)
    expected = table[ids] * math.sqrt(8) + sinusoidal_encoding(16, 8)[:4][None]
    np.testing.assert_allclose(output, expected, atol=1e-5)


def test_start_position_shifts_the_encoding():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=16)
    ids = np.array([[3, 5, 7, 9]])
    whole = np.asarray(layer(ids))
    last = np.asarray(layer(ids[:, 3:], start_position=3))
    np.testing.assert_allclose(last[:, 0], whole[:, 3], atol=1e-6)


def test_sets_no_keras_mask():
    # Masks are explicit (layers.masks): an implicit one would ride on to the logits.
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=16)
    embedded = layer(np.array([[3, 5, 0, 0]]))
    assert getattr(embedded, "_keras_mask", None) is None
    assert getattr(layer(embedded, reverse=True), "_keras_mask", None) is None


def test_reverse_projects_onto_the_embedding_matrix_in_float32():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=16)
    layer(np.array([[1]]))
    hidden = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    logits = layer(hidden, reverse=True)
    table = np.asarray(layer.token_embedding.embeddings)
    assert logits.dtype == "float32" and logits.shape == (2, 3, 20)
    np.testing.assert_allclose(np.asarray(logits), hidden @ table.T, atol=1e-5)


def test_reverse_runs_in_the_compute_dtype_under_mixed_precision():
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=16)
        hidden = layer(np.array([[3, 5]]))
        logits = layer(hidden, reverse=True)
        symbolic = layer(keras.KerasTensor((None, 2, 8), dtype="bfloat16"), reverse=True)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert hidden.dtype == logits.dtype == symbolic.dtype == "bfloat16"
    assert logits.shape == (1, 2, 20) and symbolic.shape == (None, 2, 20)


def test_config_round_trip():
    layer = PositionalEmbedding(vocab_size=20, d_model=8, max_length=16, name="emb")
    clone = PositionalEmbedding.from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()


def test_embeddings_initializer_is_an_argument():
    layer = PositionalEmbedding(
        vocab_size=20, d_model=8, max_length=16, embeddings_initializer="ones"
    )
    clone = PositionalEmbedding.from_config(layer.get_config())
    clone(np.array([[1]]))
    np.testing.assert_array_equal(np.asarray(clone.token_embedding.embeddings), 1.0)


def test_passes_the_layer_harness():
    run_layer_test(
        PositionalEmbedding,
        dict(vocab_size=20, d_model=8, max_length=16),
        dict(token_ids=np.array([[3, 5, 7, 0], [1, 2, 3, 4]], "int32")),
        (2, 4, 8),
        expected_num_trainable_weights=1,
        expected_num_params=20 * 8,
    )
