"""The position-wise feed-forward network of section 3.3."""

from __future__ import annotations

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.initializers import (
    clone_initializer,
    get_initializer,
    serialize_initializer,
)


@keras.saving.register_keras_serializable(package="keras_transformer")
class FeedForward(keras.layers.Layer):
    """FFN(x) = activation(x W1 + b1) W2 + b2, applied to every position alike.

    Args:
        d_model: input and output width.
        d_ff: inner width.
        dropout: dropout rate on the inner activations.
        activation: inner activation (the paper's ReLU by default).
        kernel_initializer: initializer of W1 and W2.
        bias_initializer: initializer of b1 and b2.

    Call arguments:
        x: `(batch, length, d_model)`.
        training: enables dropout.

    Returns:
        `(batch, length, d_model)`.

    Example:
        >>> tuple(FeedForward(d_model=8, d_ff=32)(np.zeros((2, 3, 8))).shape)
        (2, 3, 8)
    """

    def __init__(
        self,
        *,
        d_model: int,
        d_ff: int,
        dropout: float = 0.0,
        activation: str = "relu",
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.d_ff = d_ff
        self.dropout = dropout
        self.activation = activation
        self.kernel_initializer = get_initializer(kernel_initializer)
        self.bias_initializer = get_initializer(bias_initializer)
        self.inner_dense = keras.layers.Dense(
            d_ff,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            name="inner",
            dtype=self.dtype_policy,
        )
        self.inner_dropout = Dropout(dropout, dtype=self.dtype_policy)
        self.output_dense = keras.layers.Dense(
            d_model,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            name="output",
            dtype=self.dtype_policy,
        )

    def build(self, input_shape):
        self.inner_dense.build(input_shape)
        self.output_dense.build((*input_shape[:-1], self.d_ff))
        self.built = True

    def call(self, x, training=None):
        if len(x.shape) == 3 and x.shape[1] == 1:
            # One position per row (a decoding step): a `(batch, d_model)` matrix takes plain
            # MatMuls, where Dense on 3-D inputs goes through tensordot and its shape ops, run
            # again at every step. The same products either way.
            rows = self._network(keras.ops.reshape(x, (-1, self.d_model)), training)
            return keras.ops.reshape(rows, (-1, 1, self.d_model))
        return self._network(x, training)

    def _network(self, x, training):
        hidden = self.inner_dropout(self.inner_dense(x), training=training)
        return self.output_dense(hidden)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.d_model)

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            d_ff=self.d_ff,
            dropout=self.dropout,
            activation=self.activation,
            kernel_initializer=serialize_initializer(self.kernel_initializer),
            bias_initializer=serialize_initializer(self.bias_initializer),
        )
        return config
