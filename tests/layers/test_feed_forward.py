import numpy as np
from harness import run_layer_test

from keras_transformer.layers import FeedForward


def test_is_relu_of_first_projection_then_second_projection():
    layer = FeedForward(d_model=8, d_ff=32)
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    out = np.asarray(layer(x))
    w1, b1, w2, b2 = (np.asarray(w) for w in layer.weights)
    np.testing.assert_allclose(out, np.maximum(x @ w1 + b1, 0) @ w2 + b2, atol=1e-5)


def test_config_round_trip():
    layer = FeedForward(d_model=8, d_ff=32, dropout=0.2, activation="gelu")
    assert FeedForward.from_config(layer.get_config()).get_config() == layer.get_config()


def test_initializers_are_arguments():
    layer = FeedForward(d_model=8, d_ff=32, kernel_initializer="ones", bias_initializer="ones")
    layer.build((2, 3, 8))
    for weight in layer.weights:
        np.testing.assert_array_equal(np.asarray(weight), 1.0)
    assert layer.get_config()["kernel_initializer"]["class_name"] == "Ones"


def test_passes_the_layer_harness():
    run_layer_test(
        FeedForward,
        dict(d_model=8, d_ff=32, dropout=0.1, activation="gelu"),
        dict(x=np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")),
        (2, 3, 8),
        expected_num_trainable_weights=4,
        expected_num_params=8 * 32 + 32 + 32 * 8 + 8,
    )
