"""Encoder layer (self-attention, feed-forward) and the stack of N of them."""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.base import LayerStack, TransformerBlock
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.residual import sublayer_input, sublayer_output


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerBlock):
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

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            self.num_heads, self.d_model, self.dropout, name="self_attention", dtype=policy
        )
        self.self_attention_norm = self.layer_norm("self_attention_norm")
        self.self_attention_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        self.feed_forward = FeedForward(
            self.d_model, self.d_ff, self.dropout, self.activation, name="feed_forward",
            dtype=policy,
        )
        self.feed_forward_norm = self.layer_norm("feed_forward_norm")
        self.feed_forward_dropout = keras.layers.Dropout(self.dropout, dtype=policy)

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


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(LayerStack):
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

    def make_block(self, index: int) -> EncoderLayer:
        return EncoderLayer(name=f"encoder_layer_{index}", **self.sublayer_options())

    def call(self, x, padding_mask=None, training=None):
        x = self.input_dropout(x, training=training)
        for block in self.blocks:
            x = block(x, padding_mask=padding_mask, training=training)
        return self.normalize_output(x)
