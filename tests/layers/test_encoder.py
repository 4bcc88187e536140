import numpy as np
import pytest
from harness import run_layer_test

from keras_transformer.layers import Encoder, EncoderLayer


@pytest.mark.parametrize("norm_first", [False, True])
def test_post_and_pre_norm_follow_add_and_norm(norm_first):
    layer = EncoderLayer(d_model=8, num_heads=2, d_ff=16, norm_first=norm_first)
    x = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    out = np.asarray(layer(x))
    attention, feed_forward = layer.self_attention.sublayer, layer.feed_forward.sublayer
    norm1, norm2 = layer.self_attention.norm, layer.feed_forward.norm
    if norm_first:
        h = x + np.asarray(attention(norm1(x), norm1(x)))
        expected = h + np.asarray(feed_forward(norm2(h)))
    else:
        h = np.asarray(norm1(x + attention(x, x)))
        expected = np.asarray(norm2(h + feed_forward(h)))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_stack_has_unshared_layers_and_ignores_padding():
    encoder = Encoder(num_layers=3, d_model=8, num_heads=2, d_ff=16)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    out = np.asarray(encoder(x, padding_mask=mask))
    perturbed = x.copy()
    perturbed[~mask] = rng.normal(size=perturbed[~mask].shape) * 10
    out_perturbed = np.asarray(encoder(perturbed, padding_mask=mask))
    np.testing.assert_allclose(out[mask], out_perturbed[mask], atol=1e-5)
    kernels = [
        np.asarray(layer.self_attention.sublayer.query_dense.kernel) for layer in encoder.blocks
    ]
    assert len(kernels) == 3 and not np.allclose(kernels[0], kernels[1])


def test_config_round_trip():
    encoder = Encoder(num_layers=2, d_model=8, num_heads=2, d_ff=16, dropout=0.1, norm_first=True)
    assert Encoder.from_config(encoder.get_config()).get_config() == encoder.get_config()
    layer = EncoderLayer(d_model=8, num_heads=2, d_ff=16)
    assert EncoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()


def test_returns_self_attention_weights_that_ignore_padding():
    layer = EncoderLayer(d_model=8, num_heads=2, d_ff=16)
    x = np.random.default_rng(2).normal(size=(1, 4, 8)).astype("float32")
    real = np.array([[True, True, True, False]])
    mask = real[:, None, None, :]  # keys only
    out, weights = layer(x, self_attention_mask=mask, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(layer(x, self_attention_mask=mask)))
    weights = np.asarray(weights)
    assert weights.shape == (1, 2, 4, 4)
    np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    assert not weights[..., 3].any()


@pytest.mark.parametrize("norm_first", [False, True])
def test_passes_the_layer_harness(norm_first):
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
    run_layer_test(
        EncoderLayer,
        dict(d_model=8, num_heads=2, d_ff=16, dropout=0.1, norm_first=norm_first),
        dict(x=x),
        (2, 5, 8),
        expected_num_trainable_weights=8 + 2 + 4 + 2,  # attention, norm, FFN, norm
    )


@pytest.mark.slow
@pytest.mark.parametrize("norm_first", [False, True])
def test_stack_passes_the_layer_harness(norm_first):
    rng = np.random.default_rng(4)
    run_layer_test(
        Encoder,
        dict(num_layers=2, d_model=8, num_heads=2, d_ff=16, dropout=0.1, norm_first=norm_first),
        dict(
            x=rng.normal(size=(2, 5, 8)).astype("float32"),
            padding_mask=np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool),
        ),
        (2, 5, 8),
        expected_num_trainable_weights=2 * 16 + (2 if norm_first else 0),  # + final norm
    )
