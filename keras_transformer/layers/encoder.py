"""Encoder layer (self-attention, feed-forward) and the stack of N of them."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.residual import sublayer_input, sublayer_output

LAYER_NORM_EPSILON = 1e-6


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    """Self-attention then a feed-forward network, each wrapped in residual Add & Norm.

    Args:
        d_model: model width.
        num_heads: attention heads (must divide `d_model`).
        d_ff: inner width of the feed-forward network.
        dropout: dropout on sub-layer outputs, attention weights and FFN activations.
        norm_first: pre-LN instead of the paper's post-LN.
        activation: FFN activation.

    Call arguments:
        x: `(batch, source_length, d_model)`.
        padding_mask: optional bool `(batch, source_length)`, True for real tokens.
        return_attention_scores: also return `(batch, num_heads, source_length, source_length)`.
        training: enables dropout.

    Returns:
        `(batch, source_length, d_model)` (and the self-attention weights if asked).

    Example:
        >>> layer = EncoderLayer(d_model=16, num_heads=2, d_ff=32)
        >>> layer(np.zeros((2, 5, 16)), padding_mask=np.ones((2, 5), bool)).shape
        (2, 5, 16)
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Outputs line up with the query positions, so an implicit padding mask rides through.
        self.supports_masking = True
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.norm_first = norm_first
        self.activation = activation
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            num_heads, d_model, dropout, name="self_attention", dtype=policy
        )
        self.self_attention_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="self_attention_norm", dtype=policy
        )
        self.self_attention_dropout = keras.layers.Dropout(dropout, dtype=policy)
        self.feed_forward = FeedForward(
            d_model, d_ff, dropout, activation, name="feed_forward", dtype=policy
        )
        self.feed_forward_norm = keras.layers.LayerNormalization(
            epsilon=LAYER_NORM_EPSILON, name="feed_forward_norm", dtype=policy
        )
        self.feed_forward_dropout = keras.layers.Dropout(dropout, dtype=policy)

    def build(self, input_shape):
        self.self_attention.build(input_shape, input_shape)
        self.self_attention_norm.build(input_shape)
        self.feed_forward.build(input_shape)
        self.feed_forward_norm.build(input_shape)
        self.built = True

    def call(self, x, padding_mask=None, return_attention_scores=False, training=None):
        h = sublayer_input(x, self.self_attention_norm, self.norm_first)
        attended = self.self_attention(
            h,
            h,
            query_mask=padding_mask,
            key_mask=padding_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        if return_attention_scores:
            attended, weights = attended
        x = sublayer_output(
            x, attended, self.self_attention_norm, self.self_attention_dropout,
            self.norm_first, training,
        )
        h = sublayer_input(x, self.feed_forward_norm, self.norm_first)
        x = sublayer_output(
            x, self.feed_forward(h, training=training), self.feed_forward_norm,
            self.feed_forward_dropout, self.norm_first, training,
        )
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            norm_first=self.norm_first,
            activation=self.activation,
        )
        return config


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(keras.layers.Layer):
    """Dropout on the embedded source, then N unshared `EncoderLayer`s (plus a final norm for
    pre-LN).

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, norm_first, activation: as for `EncoderLayer`.

    Call arguments:
        x: embedded source `(batch, source_length, d_model)`.
        padding_mask: optional bool `(batch, source_length)`.
        training: enables dropout.

    Returns:
        encoder output `(batch, source_length, d_model)`.
    """

    def __init__(
        self,
        num_layers: int,
        d_model: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.0,
        norm_first: bool = False,
        activation: str = "relu",
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Outputs line up with the query positions, so an implicit padding mask rides through.
        self.supports_masking = True
        self.num_layers = num_layers
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.norm_first = norm_first
        self.activation = activation
        policy = self.dtype_policy
        self.input_dropout = keras.layers.Dropout(dropout, dtype=policy)
        self.encoder_layers = [
            EncoderLayer(
                d_model, num_heads, d_ff, dropout, norm_first, activation,
                name=f"encoder_layer_{index}", dtype=policy,
            )
            for index in range(num_layers)
        ]
        self.final_norm = (
            keras.layers.LayerNormalization(
                epsilon=LAYER_NORM_EPSILON, name="final_norm", dtype=policy
            )
            if norm_first
            else None
        )

    def build(self, input_shape):
        for layer in self.encoder_layers:
            layer.build(input_shape)
        if self.final_norm is not None:
            self.final_norm.build(input_shape)
        self.built = True

    def call(self, x, padding_mask=None, training=None):
        x = self.input_dropout(x, training=training)
        for layer in self.encoder_layers:
            x = layer(x, padding_mask=padding_mask, training=training)
        return x if self.final_norm is None else self.final_norm(x)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            num_layers=self.num_layers,
            d_model=self.d_model,
            num_heads=self.num_heads,
            d_ff=self.d_ff,
            dropout=self.dropout,
            norm_first=self.norm_first,
            activation=self.activation,
        )
        return config
