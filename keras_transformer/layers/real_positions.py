"""Position-wise work at the real (non-padding) positions of a batch only."""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.layers.attention import under_xla


def at_real_positions(position_wise, x, padding_mask):
    """`position_wise(x)` computed at the real positions only; padding positions keep `x`.

    A batch padded to its longest sentence is often half padding (Multi30k batches of 64 padded
    as the TensorFlow tutorial pads them: 47% real source and 52% real target positions), and a
    position-wise sub-layer (the feed-forward network with its Add & Norm) would spend half its
    products on positions that no real output reads. The real positions are gathered into one
    row, `position_wise` runs on it, and its results are scattered back. A real position's
    output is unchanged; a padding position's is its input instead of the sub-layer's result
    (attention masks keep every real output from reading it either way). Under XLA, which
    needs static shapes, and without a mask, `position_wise` runs on every position.

    The row counts vary from batch to batch, so this takes `tf.where` and `tf.gather_nd`,
    which `keras.ops` lacks.

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
    if padding_mask is None or under_xla():
        return position_wise(x)
    positions = tf.where(padding_mask)
    real = position_wise(tf.gather_nd(x, positions)[tf.newaxis])
    # Squeezing is a reshape, whose gradient is free (slicing's is a full-size scatter).
    return tf.tensor_scatter_nd_update(x, positions, tf.squeeze(real, 0))
