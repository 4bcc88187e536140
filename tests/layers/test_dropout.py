import keras
import numpy as np
import pytest
import tensorflow as tf
from harness import run_layer_test

from keras_transformer.layers import Dropout


def test_inference_passes_inputs_through():
    inputs = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_array_equal(Dropout(0.3)(inputs, training=False), inputs)


@pytest.mark.parametrize("rate", [0.1, 0.3])
def test_drops_the_byte_rounded_rate_and_keeps_the_mean(rate):
    inputs = np.ones((64, 33, 47), "float32")  # size not a multiple of 4
    outputs = np.asarray(Dropout(rate, seed=3)(inputs, training=True))
    threshold = round(rate * 256)
    dropped = outputs == 0.0
    assert dropped.mean() == pytest.approx(threshold / 256, abs=0.005)
    np.testing.assert_allclose(outputs[~dropped], 256 / (256 - threshold), rtol=1e-6)
    assert outputs.mean() == pytest.approx(1.0, abs=0.01)


def test_masks_differ_between_calls_and_positions():
    layer = Dropout(0.5, seed=1)
    first = np.asarray(layer(np.ones((4, 64), "float32"), training=True))
    second = np.asarray(layer(np.ones((4, 64), "float32"), training=True))
    assert not np.array_equal(first == 0, second == 0)
    assert not np.array_equal(first[0] == 0, first[1] == 0)


def test_gradient_is_the_mask_times_the_scale():
    inputs = tf.constant(np.random.default_rng(2).normal(size=(3, 40)).astype("float32"))
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        outputs = Dropout(0.2, seed=4)(inputs, training=True)
        total = tf.reduce_sum(outputs)
    gradient = tape.gradient(total, inputs).numpy()
    np.testing.assert_allclose(gradient, outputs.numpy() / inputs.numpy(), rtol=1e-5)


def test_compiles_with_xla():
    layer = Dropout(0.25, seed=5)
    dropped = tf.function(lambda x: layer(x, training=True), jit_compile=True)(tf.ones((8, 50)))
    assert (dropped.numpy() == 0.0).mean() == pytest.approx(0.25, abs=0.08)


def test_keeps_bfloat16():
    inputs = keras.ops.ones((2, 6), dtype="bfloat16")
    outputs = Dropout(0.5, seed=0, dtype="mixed_bfloat16")(inputs, training=True)
    assert keras.backend.standardize_dtype(outputs.dtype) == "bfloat16"


@pytest.mark.parametrize("rate", [-0.1, 1.0, 0.999])
def test_rejects_rates_a_byte_threshold_cannot_express(rate):
    with pytest.raises(ValueError, match="rate"):
        Dropout(rate)


def test_config_round_trip():
    layer = Dropout(0.1, seed=7, name="drop")
    assert Dropout.from_config(layer.get_config()).get_config() == layer.get_config()


def test_passes_the_layer_harness():
    run_layer_test(
        Dropout,
        dict(rate=0.25, seed=2),
        dict(inputs=np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")),
        (2, 5, 8),
        expected_num_trainable_weights=0,
    )
