import numpy as np
import pytest

from keras_transformer import MaskedAccuracy


def test_counts_only_real_tokens_across_batches():
    metric = MaskedAccuracy()
    logits = np.zeros((1, 4, 6), "float32")
    logits[0, [0, 1, 2, 3], [5, 2, 1, 1]] = 1.0  # predictions 5, 2, 1, 1
    metric.update_state(np.array([[5, 3, 0, 0]]), logits)  # 1 of 2 real tokens right
    metric.update_state(np.array([[5, 2, 1, 0]]), logits)  # 3 of 3 right
    assert float(metric.result()) == pytest.approx(4 / 5)
    metric.reset_state()
    assert float(metric.result()) == 0.0


def test_config_round_trip():
    metric = MaskedAccuracy(pad_id=0, name="acc")
    assert MaskedAccuracy.from_config(metric.get_config()).get_config() == metric.get_config()


def test_equals_argmax_accuracy_on_random_logits():
    rng = np.random.default_rng(0)
    labels = rng.integers(1, 50, size=(8, 12))
    labels[:, 9:] = 0
    logits = rng.normal(size=(8, 12, 50)).astype("float32")
    logits[:3, :, :] += 3.0 * np.eye(50)[labels[:3]]  # some rows predicted right
    metric = MaskedAccuracy()
    metric.update_state(labels, logits)
    real = labels != 0
    expected = (logits.argmax(-1) == labels)[real].mean()
    assert 0.2 < expected < 0.6
    assert float(metric.result()) == pytest.approx(expected)
