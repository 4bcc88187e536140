"""Position-wise work at the real (non-padding) positions of a batch only.

A batch padded to its longest sentence is often half padding (Multi30k batches of 64 padded as
the TensorFlow tutorial pads them: 47% real source and 52% real target positions). Projections,
feed-forward networks and their Add & Norm act on each position alone, so their products at
padding positions, which no real output reads, can be skipped: the real positions are gathered
into one sequence, the work runs on it, and the results are scattered back. The row counts vary
from batch to batch, so this takes `tf.where` and `tf.gather_nd`, which `keras.ops` lacks.

The gathered rows are topped up with zero rows to one of a few sizes (`bucketed_rows`) and the
extra rows' results are dropped: oneDNN builds, and keeps in caches of up to 1,024 entries per
kernel kind and thread, a kernel for every matrix shape it meets, ~0.4 MB each (measured on the
Multi30k export, 380 batched calls of new sentence mixes: memory grew 148 MiB, a new
feed-forward kernel for almost every new count of real tokens, and 43 MiB with the sizes
bucketed; with oneDNN off it did not grow).
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


def power_of_two_at_least(count):
    """The smallest power of two >= `count` (an int32 or int64 tensor >= 1, elementwise; 0 for
    0), by smearing the highest set bit of `count - 1` into every lower one."""
    bits = count - 1
    shifts = (1, 2, 4, 8, 16) + ((32,) if count.dtype == tf.int64 else ())
    for shift in shifts:
        bits = tf.bitwise.bitwise_or(bits, tf.bitwise.right_shift(bits, shift))
    return bits + 1


def bucketed_rows(count):
    """`count` rounded up to one of eight sizes per power of two: `count` itself up to 16, else
    the next multiple of a sixteenth of the power of two at or above it (at most 12.5% more).

    Args:
        count: int64 scalar >= 0 (or a tensor of them: elementwise).

    Returns:
        int64, shaped like `count`.
    """
    step = tf.maximum(power_of_two_at_least(count) // 16, 1)
    return -(-count // step) * step


def gather_real(x, positions):
    """The rows of `x` `(batch, length, width)` at `positions`, as one sequence `(1, rows,
    width)` (layers built on sequences take it as they are), `rows` the number of positions
    topped up with zero rows to `bucketed_rows`: `scatter_real` and `at_real_positions` drop
    the extra rows' results."""
    real = tf.gather_nd(x, positions)
    count = tf.shape(real, out_type=tf.int64)[0]
    return tf.pad(real, [[0, bucketed_rows(count) - count], [0, 0]])[tf.newaxis]


def _unbucketed(rows, positions):
    """`(1, rows, width)` results of `gather_real`'s rows -> `(real, width)`, one per position."""
    # Squeezing is a reshape, whose gradient is free.
    return tf.squeeze(rows, 0)[: tf.shape(positions, out_type=tf.int64)[0]]


def scatter_real(real, positions, like):
    """`(1, rows, width)` results of `gather_real`'s rows put back at `positions` of a zero
    `(batch, length, width)` tensor, `batch` and `length` those of `like`."""
    real = _unbucketed(real, positions)
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
    return tf.tensor_scatter_nd_update(x, positions, _unbucketed(real, positions))
