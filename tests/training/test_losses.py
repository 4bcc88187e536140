import keras
import numpy as np
import pytest

from keras_transformer import MaskedSparseCategoricalCrossentropy


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_equals_keras_crossentropy_over_real_tokens(smoothing):
    rng = np.random.default_rng(0)
    labels = np.array([[5, 2, 7, 0, 0], [1, 3, 3, 9, 4]])
    logits = rng.normal(size=(2, 5, 10)).astype("float32")
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=smoothing)(labels, logits)
    real = labels != 0
    reference = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=smoothing)(
        keras.ops.one_hot(labels[real], 10), logits[real]
    )
    np.testing.assert_allclose(float(loss), float(reference), rtol=1e-5)


def test_padding_logits_do_not_matter():
    rng = np.random.default_rng(1)
    labels = np.array([[5, 2, 0, 0]])
    logits = rng.normal(size=(1, 4, 10)).astype("float32")
    loss = MaskedSparseCategoricalCrossentropy(0.1)
    changed = logits.copy()
    changed[:, 2:] = 100.0
    assert float(loss(labels, logits)) == pytest.approx(float(loss(labels, changed)), rel=1e-6)


def test_config_round_trip():
    loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1, pad_id=0)
    clone = MaskedSparseCategoricalCrossentropy.from_config(loss.get_config())
    assert clone.get_config() == loss.get_config()


def test_gradient_is_softmax_minus_smoothed_target_over_real_tokens():
    import tensorflow as tf

    rng = np.random.default_rng(2)
    labels = np.array([[5, 2, 7, 0], [1, 3, 0, 0]])
    logits = rng.normal(size=(2, 4, 10)).astype("float32")
    logits_tensor = tf.constant(logits)
    with tf.GradientTape() as tape:
        tape.watch(logits_tensor)
        loss = MaskedSparseCategoricalCrossentropy(label_smoothing=0.1)(labels, logits_tensor)
    gradient = tape.gradient(loss, logits_tensor).numpy()
    real = (labels != 0)[..., None]
    smoothed = np.eye(10)[labels] * 0.9 + 0.01
    softmax = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    expected = np.where(real, (softmax - smoothed) / real.sum(), 0.0)
    np.testing.assert_allclose(gradient, expected, atol=1e-6)


def test_a_label_far_below_the_best_logit_has_its_exact_loss():
    # exp(-200) underflows in float32: a loss read off the label's probability would be wrong.
    import tensorflow as tf

    logits = tf.constant([[[200.0, 0.0, -3.0, 1.0]]])
    labels = np.array([[1]])
    loss = MaskedSparseCategoricalCrossentropy()(labels, logits)
    expected = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
    assert float(loss) == pytest.approx(float(expected[0, 0]), rel=1e-6)
    assert float(loss) == pytest.approx(200.0, rel=1e-6)


def test_without_smoothing_it_is_keras_sparse_crossentropy_ignoring_padding():
    # The speed bench trains the project's model with this loss against keras-hub's with Keras'.
    rng = np.random.default_rng(3)
    labels = np.array([[5, 2, 7, 0, 0], [1, 3, 3, 9, 0]])
    logits = rng.normal(scale=3.0, size=(2, 5, 10)).astype("float32")
    keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)
    np.testing.assert_allclose(
        float(MaskedSparseCategoricalCrossentropy()(labels, logits)),
        float(keras_loss(labels, logits)),
        rtol=1e-6,
    )
