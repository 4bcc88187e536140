"""Optimizer steps over one or several batches, in which every real target token weighs the same.

Keras' own `train_step` minimises the mean loss of each batch, and under `tf.distribute` the mean
of the replicas' means, so a batch (or a replica's share) of short sentences weighs as much as one
of long sentences. `keras.optimizers.Optimizer(gradient_accumulation_steps=N)` averages N such
means and counts every batch as an optimizer iteration, which would run the warm-up schedule N
times too fast. Here one Keras step is one optimizer update over a group of N batches
(`group_batches`), and its loss is the sum of the per-token losses of all N batches on all
replicas divided by their number of real target tokens: exactly the loss of one batch that holds
them all (fairseq and OpenNMT-tf normalise the same way).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.layers.masks import PAD_ID
from keras_transformer.training.real_token_logits import RealTokenLogits

SOURCE, TARGET = "source_tokens", "target_tokens"


def group_batches(
    dataset: tf.data.Dataset, accumulate_steps: int, *, row_multiple: int = 1
) -> tf.data.Dataset:
    """Stacks every `accumulate_steps` consecutive batches into one element, for one update.

    Batches differ in shape, so each is zero-padded to the group's most rows and longest
    sequences, and they are stacked on axis 1: `tf.distribute`, which splits axis 0 between
    replicas, then gives every replica a share of every batch. `TokenWeightedSteps` takes the
    batches apart again and trims the padding. An incomplete last group is dropped.

    Args:
        dataset: `({"source_tokens": (rows, src_len), "target_tokens": (rows, tgt_len)},
            labels (rows, tgt_len))` batches, as `make_dataset` writes them.
        accumulate_steps: batches per group (at least 2).
        row_multiple: pad the rows to a multiple of this (the number of replicas, so that
            every replica gets the same number of rows).

    Returns:
        elements `({"source_tokens": (rows, accumulate_steps, src_len), "target_tokens":
        (rows, accumulate_steps, tgt_len)}, labels (rows, accumulate_steps, tgt_len))`.

    Example:
        >>> batches = make_dataset(corpus, source, target, batch_tokens=4096)  # doctest: +SKIP
        >>> grouped = group_batches(batches, 4)  # doctest: +SKIP
    """
    if accumulate_steps < 2:
        raise ValueError(f"accumulate_steps must be at least 2 to group, got {accumulate_steps}")

    def rows_first(tokens):
        tokens = tf.transpose(tokens, [1, 0, 2])
        missing = -tf.shape(tokens)[0] % row_multiple
        # The group size stays in the static shape: `tf.distribute` makes the empty batches a
        # worker without data contributes (at the end of its stream) from the static shape.
        return tf.ensure_shape(
            tf.pad(tokens, [[0, missing], [0, 0], [0, 0]]), [None, accumulate_steps, None]
        )

    return dataset.padded_batch(accumulate_steps, drop_remainder=True).map(
        lambda inputs, labels: (
            {name: rows_first(tokens) for name, tokens in inputs.items()},
            rows_first(labels),
        ),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def first_batch(data):
    """The first batch of a group from `group_batches`; any other batch as it is."""
    inputs, labels = data[0], data[1]
    if len(labels.shape) != 3:
        return data
    return {name: tokens[:, 0] for name, tokens in inputs.items()}, labels[:, 0]


def real_tokens(tokens) -> tf.Tensor:
    """Number of non-padding ids in `tokens`, as a float32 scalar."""
    return tf.reduce_sum(tf.cast(tf.not_equal(tokens, PAD_ID), tf.float32))


def _sum_over_replicas(value):
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return value
    return context.all_reduce(tf.distribute.ReduceOp.SUM, value)


def _trimmed(inputs: dict, labels, index: int, trim: bool):
    """Batch `index` of a group, without the rows and columns that are padding in all of it."""
    source, target, labels = inputs[SOURCE][:, index], inputs[TARGET][:, index], labels[:, index]
    if not trim:
        return {SOURCE: source, TARGET: target}, labels
    # Real pairs come first in every replica's share (padding rows were appended), and every
    # real pair's decoder input starts with [START]; lengths are at least 1 so that a share with
    # no real pair still has a shape the model accepts (also the empty batch of a worker whose
    # data has ended, which has no columns either).
    rows = tf.cast(real_tokens(target[:, :1]), tf.int32)

    def length(tokens):
        per_row = tf.reduce_sum(tf.cast(tf.not_equal(tokens, PAD_ID), tf.int32), axis=1)
        return tf.maximum(tf.reduce_max(tf.concat([per_row, [1]], axis=0)), 1)

    source_length, target_length = length(source), length(target)
    return (
        {SOURCE: source[:rows, :source_length], TARGET: target[:rows, :target_length]},
        labels[:rows, :target_length],
    )


def _add(total, gradient):
    # Embedding gradients come as IndexedSlices; the optimizer densifies them anyway.
    return tf.convert_to_tensor(total) + tf.convert_to_tensor(gradient)


class TokenWeightedSteps:
    """Train and test steps for `model.fit` that weight every real target token equally.

    A train step takes one element: a batch, or with `accumulate_steps` N > 1 a group from
    `group_batches`. It adds up the gradients of the N batches, each of
    `batch_loss * batch_tokens / step_tokens` where `step_tokens` counts the real target tokens
    of the whole group on all replicas (summed across replicas before the first forward pass),
    and applies them in one optimizer update. So `optimizer.iterations`, which the warm-up
    schedule reads, counts updates, and one Keras step (`steps_per_epoch`, callbacks) is one
    update. The logged `loss` is likewise the mean over the real tokens of all replicas (also in
    `test_step`), and the real source and target tokens trained on are counted in
    `source_tokens` and `target_tokens` (metrics of their own, not the model's: `Throughput`
    reads and resets them).

    Create it under the strategy's scope (the counters are distributed variables), then
    `install()` it. The model's saved form is unchanged: the steps live on this instance only.

    Args:
        model: a compiled model from `build_transformer` whose `loss` is the mean over real
            target tokens (`MaskedSparseCategoricalCrossentropy`).
        accumulate_steps: batches per optimizer update.
        trim: leave out padding where it would cost compute: each batch of a group is cut back
            to its own shape, and the output projection and the loss see the real target
            positions only (`RealTokenLogits`; the same loss and gradients). False under XLA,
            which needs shapes known when it compiles.

    Example:
        >>> with strategy.scope():  # doctest: +SKIP
        ...     model = build_transformer(config)
        ...     compile_model(model, config, settings)
        ...     steps = TokenWeightedSteps(model, accumulate_steps=4)
        >>> steps.install()  # doctest: +SKIP
        >>> model.fit(group_batches(train_data, 4), ...)  # doctest: +SKIP
    """

    def __init__(self, model: keras.Model, accumulate_steps: int = 1, *, trim: bool = True):
        if accumulate_steps < 1:
            raise ValueError(f"accumulate_steps must be positive, got {accumulate_steps}")
        self.model = model
        self.accumulate_steps = accumulate_steps
        self.trim = trim
        self.real_token_logits = RealTokenLogits(model) if trim else None
        self.source_tokens = keras.metrics.Sum(name="source_tokens")
        self.target_tokens = keras.metrics.Sum(name="target_tokens")

    def install(self) -> None:
        """Makes `model.fit` / `evaluate` use these steps."""
        self.model.train_step = self.train_step
        self.model.test_step = self.test_step

    def _batches(self, data) -> list:
        # `fit` passes (inputs, labels); `train_on_batch` adds a (None) sample weight.
        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)
        if self.accumulate_steps == 1:
            return [(inputs, labels)]
        return [_trimmed(inputs, labels, index, self.trim)
                for index in range(self.accumulate_steps)]

    def _predict(self, inputs, labels, training: bool):
        """Logits and the labels they go with: at the real positions only when trimming."""
        if self.real_token_logits is not None:
            return self.real_token_logits(inputs, labels, training=training)
        return self.model(inputs, training=training), labels

    def _track(self, inputs, labels, predictions, mean, tokens):
        model = self.model
        # Keras' own steps update this tracker too: it is the `loss` that fit reports. `fit`
        # averages the replicas' trackers, which weighs each replica's mean by its share of the
        # tokens only when the shares are equal; so every replica tracks the mean over the real
        # tokens of all replicas.
        loss_sum, all_tokens = tf.unstack(_sum_over_replicas(tf.stack([mean * tokens, tokens])))
        model._loss_tracker.update_state(
            loss_sum / tf.maximum(all_tokens, 1.0), sample_weight=all_tokens
        )
        return model.compute_metrics(inputs, labels, predictions)

    def train_step(self, data) -> dict:
        """One optimizer update over one batch or one group of batches; returns the metrics."""
        model = self.model
        batches = self._batches(data)
        counts = [real_tokens(labels) for _, labels in batches]
        step_tokens = tf.maximum(_sum_over_replicas(tf.add_n(counts)), 1.0)
        weights = model.trainable_weights
        gradients = None
        for (inputs, labels), tokens in zip(batches, counts, strict=True):
            with tf.GradientTape() as tape:
                predictions, labels = self._predict(inputs, labels, training=True)
                mean = model.loss(labels, predictions)
                loss = model.optimizer.scale_loss(mean * tokens / step_tokens)
            batch_gradients = tape.gradient(loss, weights)
            gradients = batch_gradients if gradients is None else [
                _add(total, gradient)
                for total, gradient in zip(gradients, batch_gradients, strict=True)
            ]
            metrics = self._track(inputs, labels, predictions, mean, tokens)
            self.source_tokens.update_state(real_tokens(inputs[SOURCE]))
            self.target_tokens.update_state(tokens)
        # The optimizer sums the replicas' gradients: each is already its share of the mean.
        # Its update counter depends on no data: without this dependency, the step that finds
        # the end of the data (the workers of a cluster agree on it with an all-reduce first)
        # could count an update that never happens. Its variables are made first, outside the
        # dependency, from which they could not be lifted out of the step's function.
        if not model.optimizer.built:
            model.optimizer.build(weights)
        with tf.control_dependencies([step_tokens]):
            model.optimizer.apply_gradients(zip(gradients, weights, strict=True))
        return metrics

    def test_step(self, data) -> dict:
        """Validation loss (mean over real target tokens) and metrics of one batch."""
        inputs, labels, _ = keras.utils.unpack_x_y_sample_weight(data)
        tokens = real_tokens(labels)
        predictions, labels = self._predict(inputs, labels, training=False)
        mean = self.model.loss(labels, predictions)
        return self._track(inputs, labels, predictions, mean, tokens)
