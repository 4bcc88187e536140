"""`compute_dtype_copy`: a mixed-precision model with its weights stored in its compute dtype, for
decoding.

Under a mixed policy every layer keeps float32 variables and casts them to bfloat16 (float16 on
GPU) at each call. In a decoding loop that is every kernel and the embedding matrix, once per
generated token: loop-invariant work that costs more than the matmuls at small batches. A copy
whose variables are already in the compute dtype computes the same numbers without those casts.
"""

from __future__ import annotations

import keras


def _in_compute_dtype(layer: keras.layers.Layer) -> keras.layers.Layer:
    config = layer.get_config()
    if layer.dtype_policy.variable_dtype != layer.dtype_policy.compute_dtype:
        config["dtype"] = layer.dtype_policy.compute_dtype
    return layer.__class__.from_config(config)


def compute_dtype_copy(model: keras.Model) -> keras.Model:
    """A copy of `model` whose layers store their variables in their compute dtype.

    Layer normalization keeps float32 scale and offset, as under the mixed policy (see
    `layers.precision.normalization_policy`), so the copy's outputs equal the original's
    exactly (tested). A model without mixed-precision layers is returned as it is. The copy is
    for inference: it shares nothing with `model`, and training `model` does not change it.

    Args:
        model: a functional model, e.g. from `build_transformer` under `mixed_bfloat16`.

    Returns:
        the copy (or `model`).
    """
    if all(layer.dtype_policy.variable_dtype == layer.dtype_policy.compute_dtype
           for layer in model.layers):
        return model
    copy = keras.models.clone_model(model, clone_function=_in_compute_dtype)
    for target, source in zip(copy.weights, model.weights, strict=True):
        target.assign(keras.ops.cast(source, target.dtype))
    return copy
