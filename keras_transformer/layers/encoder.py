"""Encoder layer (self-attention, feed-forward) and the stack of N of them."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers import masks
from keras_transformer.layers.base import LayerStack, TransformerLayer
from keras_transformer.layers.residual import sublayer_input, sublayer_output


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerLayer):
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
        attention_mask: optional bool, broadcastable to `(batch, num_heads, source_length,
            source_length)`: `masks.attention_mask` of the source padding mask.
        return_attention_scores: also return `(batch, num_heads, source_length, source_length)`.
        training: enables dropout.

    Returns:
        `(batch, source_length, d_model)` (and the self-attention weights if asked).

    Example:
        >>> layer = EncoderLayer(d_model=16, num_heads=2, d_ff=32)
        >>> mask = masks.attention_mask(5, 5, np.ones((2, 5), bool), np.ones((2, 5), bool))
        >>> layer(np.zeros((2, 5, 16)), attention_mask=mask).shape
        (2, 5, 16)
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.self_attention, self.self_attention_norm, self.self_attention_dropout = (
            self.attention_sublayer("self_attention")
        )
        self.feed_forward, self.feed_forward_norm, self.feed_forward_dropout = (
            self.feed_forward_sublayer()
        )

    def build(self, input_shape):
        self.self_attention.build(input_shape, input_shape)
        self.self_attention_norm.build(input_shape)
        self.feed_forward.build(input_shape)
        self.feed_forward_norm.build(input_shape)
        self.built = True

    def call(self, x, attention_mask=None, return_attention_scores=False, training=None):
        h = sublayer_input(x, self.self_attention_norm, self.norm_first)
        attended = self.self_attention(
            h,
            h,
            attention_mask=attention_mask,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        if return_attention_scores:
            attended, weights = attended
        x = sublayer_output(
            x, attended, self.self_attention_norm, self.self_attention_dropout,
            self.norm_first, training,
        )
        x = self.feed_forward_residual(x, training)
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
        length = ops.shape(x)[1]
        mask = masks.attention_mask(length, length, query_mask=padding_mask, key_mask=padding_mask)
        for block in self.blocks:
            x = block(x, attention_mask=mask, training=training)
        return self.normalize_output(x)
