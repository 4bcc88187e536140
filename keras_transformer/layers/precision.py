"""The dtype policy of layer normalization inside the project's blocks."""

from __future__ import annotations

import keras

_HALF_PRECISION = ("float16", "bfloat16")


def normalization_policy(policy: keras.DTypePolicy) -> keras.DTypePolicy:
    """The policy a block gives its `LayerNormalization`: the block's own, except that a pure
    half-precision policy becomes the mixed one (`"bfloat16"` -> `"mixed_bfloat16"`).

    Keras' layer normalization keeps float32 scale and offset under a mixed policy; with this,
    a model stored in its compute dtype (`inference.compute_dtype.compute_dtype_copy`) normalizes
    exactly as its mixed-precision original.
    """
    if policy.compute_dtype in _HALF_PRECISION and policy.variable_dtype == policy.compute_dtype:
        return keras.DTypePolicy(f"mixed_{policy.compute_dtype}")
    return policy
