"""Position-wise work at the real (non-padding) positions of a batch only.

A batch padded to its longest sentence is often half padding (Multi30k batches of 64 padded as
the TensorFlow tutorial pads them: 47% real source and 52% real target positions). Projections,
feed-forward networks and their Add & Norm act on each position alone, so their products at
padding positions, which no real output reads, can be skipped: the real positions are gathered
into one sequence, the work runs on it, and the results are scattered back. The row counts vary
from batch to batch, so this takes `tf.where` and `tf.gather_nd`, which `keras.ops` lacks.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.layers.xla import under_xla


def real_positions(padding_mask):
    """`(real, 2)` int64 (row, position) indices of the True entries of a `(batch, length)`
    padding mask, or None where every position is computed: without a mask, or under XLA,
    which needs static shapes."""
    if padding_mask is None or under_xla():
        return None
    return tf.where(padding_mask)


def gather_real(x, positions):
    """The rows of `x` `(batch, length, width)` at `positions`, as one sequence `(1, real,
    width)` (layers built on sequences take it as they are)."""
    return tf.gather_nd(x, positions)[tf.newaxis]


def scatter_real(real, positions, like):
    """`(1, real, width)` rows put back at `positions` of a zero `(batch, length, width)`
    tensor, `batch` and `length` those of `like`."""
    # Squeezing is a reshape, whose gradient is free (slicing's is a full-size scatter).
    real = tf.squeeze(real, 0)
    shape = tf.concat([tf.shape(like, out_type=tf.int64)[:2], tf.shape(real, tf.int64)[1:]], 0)
    return tf.scatter_nd(positions, real, shape)


def at_real_positions(position_wise, x, padding_mask):
    """`position_wise(x)` computed at the real positions only; padding positions keep `x`.

    A real position's output is unchanged; a padding position's is its input instead of the
    sub-layer's result (attention masks keep every real output from reading it either way).
    Under XLA and without a mask, `position_wise` runs on every position.

    Args:
        position_wise: a function of `(batch, length, d_model)` whose output at each position
            depends on that position's input only.
        x: `(batch, length, d_model)`.
        padding_mask: optional bool `(batch, length)`, True for real tokens.

    Returns:
        `(batch, length, d_model)`.

    Example:
        >>> x = np.ones((2, 3, 4), "float32")
        >>> real = np.array([[True, True, False], [True, False, False]])
        >>> at_real_positions(lambda h: 2 * h, x, real)[:, :, 0].numpy().tolist()
        [[2.0, 2.0, 1.0], [2.0, 1.0, 1.0]]
    """
    positions = real_positions(padding_mask)
    if positions is None:
        return position_wise(x)
    real = position_wise(gather_real(x, positions))
    return tf.tensor_scatter_nd_update(x, positions, tf.squeeze(real, 0))
