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
