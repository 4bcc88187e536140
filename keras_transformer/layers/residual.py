"""`AddNorm`: a sub-layer inside the paper's "Add & Norm" residual connection."""

from __future__ import annotations

import keras

from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.precision import normalization_policy

LAYER_NORM_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package="keras_transformer")
class AddNorm(keras.layers.Layer):
    """A sub-layer wrapped in its residual connection, dropout and layer norm (section 5.4).

    Post-LN (the paper): `norm(x + dropout(sublayer(x)))`.
    Pre-LN (`norm_first=True`): `x + dropout(sublayer(norm(x)))`.

    The sub-layer's extra inputs (the encoder output, masks, caches) pass through, and so do its
    extra outputs: when it returns a tuple (e.g. attention weights, an updated cache), only the
    first item goes through the residual connection and the rest are returned after it.

    Args:
        sublayer: the wrapped layer, e.g. `MultiHeadAttention` or `FeedForward`; called as
            `sublayer(x, *args, training=training, **kwargs, **sublayer_options)`.
        dropout: dropout rate on the sub-layer's output.
        norm_first: pre-LN instead of the paper's post-LN.
        layer_norm_epsilon: epsilon of the layer norm.

    Call arguments:
        x: `(batch, length, d_model)`.
        *args: further positional inputs of the sub-layer (tensors or None), e.g. the encoder
            output of cross-attention.
        training: enables dropout.
        sublayer_options: dict of the sub-layer's non-tensor keyword arguments, e.g.
            `{"return_attention_scores": True}`. They travel apart from `**kwargs` because Keras
            refuses a call argument that mixes tensors and plain Python values.
        **kwargs: tensor keyword arguments of the sub-layer (masks, caches, cache index).

    Returns:
        `(batch, length, d_model)`, or, when the sub-layer returns a tuple, that tuple with its
        first item replaced by the residual output.

    Example:
        >>> from keras_transformer.layers import FeedForward
        >>> block = AddNorm(FeedForward(d_model=8, d_ff=16), dropout=0.1)
        >>> tuple(block(np.zeros((2, 3, 8))).shape)
        (2, 3, 8)
    """

    def __init__(
        self,
        sublayer: keras.layers.Layer,
        *,
        dropout: float = 0.0,
        norm_first: bool = False,
        layer_norm_epsilon: float = LAYER_NORM_EPSILON,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.sublayer = sublayer
        self.dropout = dropout
        self.norm_first = norm_first
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm = keras.layers.LayerNormalization(
            epsilon=layer_norm_epsilon, name="norm", dtype=normalization_policy(self.dtype_policy)
        )
        self.sublayer_dropout = Dropout(dropout, dtype=self.dtype_policy)

    def build(self, input_shape):
        # Every sub-layer here maps width d_model to d_model and its other inputs (keys, values)
        # have that width too, so the input shape is enough to build it.
        if not self.sublayer.built:
            self.sublayer.build(input_shape)
        self.norm.build(input_shape)
        self.built = True

    def call(self, x, *args, training=None, sublayer_options=None, **kwargs):
        h = self.norm(x) if self.norm_first else x
        outputs = self.sublayer(h, *args, training=training, **kwargs, **(sublayer_options or {}))
        output, extras = (outputs[0], outputs[1:]) if isinstance(outputs, tuple) else (outputs, ())
        x = x + self.sublayer_dropout(output, training=training)
        if not self.norm_first:
            x = self.norm(x)
        return (x, *extras) if extras else x

    def get_config(self):
        config = super().get_config()
        config.update(
            sublayer=keras.saving.serialize_keras_object(self.sublayer),
            dropout=self.dropout,
            norm_first=self.norm_first,
            layer_norm_epsilon=self.layer_norm_epsilon,
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["sublayer"] = keras.saving.deserialize_keras_object(config["sublayer"])
        return cls(**config)
