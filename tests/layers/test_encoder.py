import keras
import numpy as np
import pytest

from keras_transformer.layers import Encoder, EncoderLayer


def numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("norm_first", [False, True])
def test_post_and_pre_norm_follow_add_and_norm(norm_first):
    layer = EncoderLayer(d_model=8, num_heads=2, d_ff=16, norm_first=norm_first)
    x = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    out = numpy(layer(x))
    attention, feed_forward = layer.self_attention, layer.feed_forward
    norm1, norm2 = layer.self_attention_norm, layer.feed_forward_norm
    if norm_first:
        h = x + numpy(attention(norm1(x), norm1(x)))
        expected = h + numpy(feed_forward(norm2(h)))
    else:
        h = numpy(norm1(x + attention(x, x)))
        expected = numpy(norm2(h + feed_forward(h)))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_stack_has_unshared_layers_and_ignores_padding():
    encoder = Encoder(num_layers=3, d_model=8, num_heads=2, d_ff=16)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    out = numpy(encoder(x, padding_mask=mask))
    perturbed = x.copy()
    perturbed[~mask] = rng.normal(size=perturbed[~mask].shape) * 10
    out_perturbed = numpy(encoder(perturbed, padding_mask=mask))
    np.testing.assert_allclose(out[mask], out_perturbed[mask], atol=1e-5)
    kernels = [numpy(layer.self_attention.query_dense.kernel) for layer in encoder.blocks]
    assert len(kernels) == 3 and not np.allclose(kernels[0], kernels[1])


def test_config_round_trip():
    encoder = Encoder(num_layers=2, d_model=8, num_heads=2, d_ff=16, dropout=0.1, norm_first=True)
    assert Encoder.from_config(encoder.get_config()).get_config() == encoder.get_config()
    layer = EncoderLayer(d_model=8, num_heads=2, d_ff=16)
    assert EncoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()
