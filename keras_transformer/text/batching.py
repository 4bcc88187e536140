"""Batches planned for a whole pool of tokenized pairs at once, not pair by pair.

`tf.data`'s element-wise tools (`unbatch`, `bucket_by_sequence_length`) pay a fixed cost per
sentence pair, which on Multi30k costs more than tokenizing the pair. Here thousands of pairs
are planned together with whole-tensor ops: sort them by length, cut the sorted order into
batches that fit the budget, optionally shuffle the batches. `make_dataset` in `data.py` wires
this into the pipeline.
"""

from __future__ import annotations

import tensorflow as tf


def plan_batches(
    lengths: tf.Tensor,
    *,
    max_length: int,
    batch_size: int,
    batch_tokens: int | None = None,
    bucket_width: int | None = None,
    drop_remainder: bool = False,
    shuffle_seed: tf.Tensor | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Groups a pool of pairs into batches: which pairs, in which order, where each batch ends.

    With `bucket_width`, pairs are sorted by length (stably: pairs of equal length keep their
    incoming, e.g. shuffled, order) and batches are cut greedily from the shortest: each takes
    the next pairs while the size rule allows and their lengths stay within `bucket_width` of its
    first one. Without it, pairs keep their incoming order and batches are cut by the size rule
    alone, as if every pair were `max_length` long.

    Args:
        lengths: `int` of shape `(pool,)`: the padded length each pair needs, e.g. the longer
            of its source and target (at most `max_length`).
        max_length: The longest length possible.
        batch_size: Pairs per batch when `batch_tokens` is `None`.
        batch_tokens: If set, replaces `batch_size`: a batch takes as many pairs as keep
            `pairs * longest <= batch_tokens`, `longest` being its longest length
            (`max_length` without `bucket_width`). A pair longer than that travels alone.
        bucket_width: Lengths in a batch differ by less than this; `None` keeps the incoming
            order.
        drop_remainder: Keep only complete batches: `batch_size` pairs, or with `batch_tokens`
            so many that the next pair in the order would not have fit.
        shuffle_seed: `int` of shape `(2,)`: shuffle the order of the batches with this
            stateless seed; `None` keeps them in order (shortest first when sorted).

    Returns:
        `(order, row_splits)`: `order` (`int64`, `(kept_pairs,)`) indexes `lengths`; batch `i` is
        `order[row_splits[i]:row_splits[i + 1]]`.
    """
    lengths = tf.cast(lengths, tf.int64)
    pool = tf.size(lengths, out_type=tf.int64)
    positions = tf.range(pool)
    if bucket_width is None:
        order = positions
        longest = tf.fill([pool], tf.constant(max_length, tf.int64))
        offsets = tf.zeros([1], tf.int64)
    else:
        order = tf.cast(tf.argsort(lengths, stable=True), tf.int64)
        longest = tf.gather(lengths, order)
        offsets = tf.range(bucket_width, dtype=tf.int64)

    # `longest` never decreases along the order. A batch starting at position p whose longest
    # length is L = longest[p] + offset can take every pair before the first longer one, and
    # at most the size rule's count: the best L gives how many pairs fit from p.
    widths = longest[:, tf.newaxis] + offsets[tf.newaxis, :]
    until_longer = tf.reshape(
        tf.searchsorted(longest, tf.reshape(widths, [-1]), side="right", out_type=tf.int64),
        tf.shape(widths),
    ) - positions[:, tf.newaxis]
    if batch_tokens is None:
        allowed = tf.fill(tf.shape(widths), tf.constant(batch_size, tf.int64))
    else:
        allowed = batch_tokens // widths
    fitting = tf.maximum(tf.reduce_max(tf.minimum(allowed, until_longer), axis=1), 1)
    starts = _greedy_starts(fitting)
    sizes = tf.concat([starts[1:], [pool]], axis=0) - starts

    if drop_remainder:
        if batch_tokens is None:
            complete = sizes == batch_size
        else:
            # The pair after the batch; for the pool's last batch, its own longest one stands in
            # for the shortest pair that could have followed.
            following = tf.gather(longest, tf.minimum(starts + sizes, pool - 1))
            complete = (sizes + 1) * following > batch_tokens
        starts, sizes = tf.boolean_mask(starts, complete), tf.boolean_mask(sizes, complete)
    if shuffle_seed is not None:
        permutation = tf.random.experimental.stateless_shuffle(
            tf.range(tf.size(sizes, out_type=tf.int64)), seed=shuffle_seed
        )
        starts, sizes = tf.gather(starts, permutation), tf.gather(sizes, permutation)
    # Batch i is the run [starts[i], starts[i] + sizes[i]) of the order.
    order = tf.gather(order, tf.ragged.range(starts, starts + sizes).flat_values)
    row_splits = tf.concat([[0], tf.cumsum(sizes)], axis=0)
    return order, row_splits


def _greedy_starts(fitting: tf.Tensor) -> tf.Tensor:
    """Start positions of batches cut from the front, the one at `start` taking `fitting[start]`.

    Args:
        fitting: `int64` of shape `(pool,)`, at least 1.

    Returns:
        `int64` of shape `(batches,)`, starting with 0.
    """
    pool = tf.size(fitting, out_type=tf.int64)

    # One loop step per batch (hundreds per pool), none per pair.
    def cut(start, starts):
        return start + fitting[start], starts.write(starts.size(), start)

    _, starts = tf.while_loop(
        lambda start, _: start < pool,
        cut,
        (tf.constant(0, tf.int64), tf.TensorArray(tf.int64, size=0, dynamic_size=True,
                                                  element_shape=[])),
    )
    return starts.stack()
