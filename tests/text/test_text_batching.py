import random

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.text.batching import plan_batches

MAX_LENGTH = 24


def _greedy_reference(lengths, *, batch_size, batch_tokens, bucket_width, drop_remainder):
    """The documented rule written pair by pair: sort, then grow each batch while it may."""
    if bucket_width is None:
        order = list(range(len(lengths)))
        length_of = [MAX_LENGTH] * len(lengths)
    else:
        order = sorted(range(len(lengths)), key=lambda i: lengths[i])  # sorted() is stable
        length_of = [lengths[i] for i in order]

    def fits(count, longest):
        return count <= batch_size if batch_tokens is None else count * longest <= batch_tokens

    batches, start = [], 0
    while start < len(order):
        end = start + 1
        while (end < len(order) and fits(end + 1 - start, length_of[end])
               and (bucket_width is None or length_of[end] - length_of[start] < bucket_width)):
            end += 1
        if drop_remainder:
            following = length_of[min(end, len(order) - 1)]
            complete = (end - start == batch_size if batch_tokens is None
                        else (end - start + 1) * following > batch_tokens)
        if not drop_remainder or complete:
            batches.append(order[start:end])
        start = end
    return batches


def _planned(lengths, **options):
    order, splits = plan_batches(tf.constant(lengths), max_length=MAX_LENGTH, **options)
    order, splits = order.numpy().tolist(), splits.numpy().tolist()
    return [order[a:b] for a, b in zip(splits[:-1], splits[1:], strict=True)]


@pytest.mark.parametrize("bucket_width", [None, 1, 3])
@pytest.mark.parametrize("batch_size, batch_tokens", [(5, None), (64, 40)])
@pytest.mark.parametrize("drop_remainder", [False, True])
def test_batches_follow_the_greedy_rule(bucket_width, batch_size, batch_tokens, drop_remainder):
    rng = random.Random(0)
    lengths = [rng.randint(1, MAX_LENGTH) for _ in range(300)]
    options = dict(batch_size=batch_size, batch_tokens=batch_tokens, bucket_width=bucket_width,
                   drop_remainder=drop_remainder)
    expected = _greedy_reference(lengths, **options)
    assert _planned(lengths, **options) == expected
    assert len(expected) > 10


def test_token_budget_and_length_spread_hold():
    rng = random.Random(1)
    lengths = [rng.randint(1, MAX_LENGTH) for _ in range(500)]
    batches = _planned(lengths, batch_size=1, batch_tokens=60, bucket_width=4)
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    for batch in batches:
        batch_lengths = [lengths[i] for i in batch]
        assert len(batch) * max(batch_lengths) <= 60
        assert max(batch_lengths) - min(batch_lengths) < 4


def test_a_pair_over_the_budget_travels_alone():
    batches = _planned([3, 20, 3], batch_size=1, batch_tokens=10, bucket_width=2)
    assert batches == [[0, 2], [1]]


def test_shuffled_batches_are_the_same_batches_in_another_order():
    rng = random.Random(2)
    lengths = [rng.randint(1, MAX_LENGTH) for _ in range(400)]
    options = dict(batch_size=8, bucket_width=2)
    in_order = _planned(lengths, **options)

    def shuffled(seed):
        return _planned(lengths, shuffle_seed=tf.constant(seed, tf.int64), **options)

    first = shuffled([7, 1])
    assert first != in_order
    assert sorted(first) == sorted(in_order)
    assert shuffled([7, 1]) == first
    assert shuffled([8, 1]) != first


def test_plans_run_inside_a_dataset_map():
    lengths = tf.data.Dataset.from_tensors(tf.constant([4, 1, 3, 2], tf.int64))
    plans = lengths.map(lambda x: plan_batches(x, max_length=4, batch_size=2, bucket_width=2))
    order, splits = next(iter(plans))
    np.testing.assert_array_equal(order, [1, 3, 2, 0])
    np.testing.assert_array_equal(splits, [0, 2, 4])
