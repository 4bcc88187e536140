"""The model's logits at the real (non-padding) label positions only, for the loss.

The output projection and the softmax cross-entropy over the vocabulary are most of a training
step at the Multi30k size: at d_model 128, 2+2 layers and an 8,000-token vocabulary, the
projection's three products and the fused cross-entropy took 56% of the step's kernel time
(TF profiler, batches of 64 padded to their longest pair). Padding positions are ignored by the
loss anyway, so projecting only the real positions gives the same loss and gradients for the
real positions' share of that work: about half of it on batches padded as the TensorFlow
tutorial pads them, a few percent on the length-bucketed batches `make_dataset` writes.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_transformer.layers.masks import PAD_ID
from keras_transformer.model import DECODER


class RealTokenLogits:
    """Splits `build_transformer`'s model at the decoder's output: the layers up to it run on
    the whole batch, the output projection (and the float32 cast) on the real positions only.

    The two halves are functional models over the model's own layers (no weights of their own),
    so training through them trains the model.

    Args:
        model: a model from `build_transformer`.

    Call arguments:
        inputs: `{"source_tokens": (batch, source_length), "target_tokens": (batch,
            target_length)}`.
        labels: int `(batch, target_length)`; `PAD_ID` marks the positions left out.
        training: passed to the layers (dropout).

    Returns:
        `(logits, labels)`: float32 logits `(real, target_vocab_size)` and int labels `(real,)`,
        for the `real` non-padding labels in row-major order.

    Example:
        >>> logits, labels = RealTokenLogits(model)(inputs, labels, training=True)  # doctest: +SKIP
    """

    def __init__(self, model: keras.Model):
        decoded = model.get_layer(DECODER).output
        self.hidden = keras.Model(model.inputs, decoded, name=f"{model.name}_hidden")
        self.head = keras.Model(decoded, model.output, name=f"{model.name}_head")

    def __call__(self, inputs: dict, labels, training: bool = False):
        positions = tf.where(tf.not_equal(labels, PAD_ID))
        hidden = tf.gather_nd(self.hidden(inputs, training=training), positions)
        # The head was built on (batch, length, d_model): the real positions form one row.
        # Squeezing is a reshape, whose gradient is free (slicing's is a full-size scatter).
        logits = tf.squeeze(self.head(hidden[tf.newaxis], training=training), 0)
        return logits, tf.gather_nd(labels, positions)
