import keras
import numpy as np

from keras_transformer.layers import FeedForward


def test_is_relu_of_first_projection_then_second_projection():
    layer = FeedForward(d_model=8, d_ff=32)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    out = keras.ops.convert_to_numpy(layer(x))
    w1, b1, w2, b2 = (keras.ops.convert_to_numpy(w) for w in layer.weights)
    np.testing.assert_allclose(out, np.maximum(x @ w1 + b1, 0) @ w2 + b2, atol=1e-5)


def test_config_round_trip():
    layer = FeedForward(d_model=8, d_ff=32, dropout=0.2, activation="gelu")
    assert FeedForward.from_config(layer.get_config()).get_config() == layer.get_config()
