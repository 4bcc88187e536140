"""`normalization_policy`: layer normalization keeps float32 variables under half precision."""

import keras
import pytest

from keras_transformer.layers.precision import normalization_policy


@pytest.mark.parametrize("policy, expected", [
    ("bfloat16", "mixed_bfloat16"), ("float16", "mixed_float16"),
    ("mixed_bfloat16", "mixed_bfloat16"), ("float32", "float32"),
])
def test_layer_normalization_keeps_float32_variables_under_half_precision(policy, expected):
    assert normalization_policy(keras.DTypePolicy(policy)).name == expected
