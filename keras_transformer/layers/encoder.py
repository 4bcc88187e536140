"""Encoder layer (self-attention, feed-forward) and the stack of N of them."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers import masks
from keras_transformer.layers.base import LayerStack, TransformerLayer
from keras_transformer.layers.real_positions import at_real_positions


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerLayer):
    """Self-attention then a feed-forward network, each inside its residual Add & Norm
    (`self_attention` and `feed_forward`, two `AddNorm`s).

    Args:
        d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_epsilon,
        kernel_initializer, bias_initializer: keyword-only, see `TransformerBlock`.

    Call arguments:
        x: `(batch, source_length, d_model)`.
        self_attention_mask: optional bool, broadcastable to `(batch, num_heads, source_length,
            source_length)`: `masks.attention_mask` of the source padding mask.
        padding_mask: optional bool `(batch, source_length)`, True for real tokens: the
            feed-forward sub-layer (and, from `d_model` 512 on, attention's projections) then
            runs at the real positions only (`real_positions`).
        return_attention_scores: also return `(batch, num_heads, source_length, source_length)`.
        training: enables dropout.

    Returns:
        `(batch, source_length, d_model)` (and the self-attention weights if asked).

    Example:
        >>> layer = EncoderLayer(d_model=16, num_heads=2, d_ff=32)
        >>> real = np.array([[True, True, True, False, False]] * 2)
        >>> mask = masks.attention_mask(5, 5, query_padding_mask=real, key_padding_mask=real)
        >>> tuple(layer(np.zeros((2, 5, 16)), self_attention_mask=mask).shape)
        (2, 5, 16)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.self_attention = self.attention_sublayer("self_attention")
        self.feed_forward = self.feed_forward_sublayer()

    def build(self, input_shape):
        self.self_attention.build(input_shape)
        self.feed_forward.build(input_shape)
        self.built = True

    def call(self, x, self_attention_mask=None, padding_mask=None, return_attention_scores=False,
             training=None):
        x = self.self_attention(
            x,
            attention_mask=self_attention_mask,
            query_padding_mask=padding_mask,
            key_padding_mask=padding_mask,
            sublayer_options={"return_attention_scores": return_attention_scores},
            training=training,
        )
        if return_attention_scores:
            x, weights = x
        x = at_real_positions(
            lambda h: self.feed_forward(h, training=training), x, padding_mask
        )
        return (x, weights) if return_attention_scores else x


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(LayerStack):
    """Dropout on the embedded source, then N unshared `EncoderLayer`s (plus a final norm for
    pre-LN).

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_epsilon,
        kernel_initializer, bias_initializer: keyword-only, as for `EncoderLayer`.

    Call arguments:
        x: embedded source `(batch, source_length, d_model)`.
        padding_mask: optional bool `(batch, source_length)`, True for real source tokens.
        training: enables dropout.

    Returns:
        encoder output `(batch, source_length, d_model)`.

    Example:
        >>> encoder = Encoder(2, d_model=16, num_heads=2, d_ff=32)
        >>> tuple(encoder(np.zeros((2, 5, 16)), padding_mask=np.ones((2, 5), bool)).shape)
        (2, 5, 16)
    """

    def make_block(self, index: int) -> EncoderLayer:
        return EncoderLayer(
            name=f"encoder_layer_{index}", dtype=self.dtype_policy, **self.block_arguments()
        )

    def call(self, x, padding_mask=None, training=None):
        x = self.input_dropout(x, training=training)
        length = ops.shape(x)[1]
        # Computed once for all layers.
        mask = masks.attention_mask(
            length, length, query_padding_mask=padding_mask, key_padding_mask=padding_mask
        )
        for block in self.blocks:
            x = block(x, self_attention_mask=mask, padding_mask=padding_mask, training=training)
        return self.normalize_output(x)
