"""Decoder layer (causal self-attention, cross-attention, feed-forward) and the stack of N."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.base import LayerStack, TransformerBlock
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.residual import sublayer_input, sublayer_output


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlock):
    """Causal self-attention, cross-attention over the encoder output, then a feed-forward network,
    each wrapped in residual Add & Norm.

    Args:
        d_model: model width.
        num_heads: attention heads (must divide `d_model`).
        d_ff: inner width of the feed-forward network.
        dropout: dropout on sub-layer outputs, attention weights and FFN activations.
        norm_first: pre-LN instead of the paper's post-LN.
        activation: FFN activation.

    Call arguments:
        x: embedded target `(batch, target_length, d_model)`.
        encoder_output: `(batch, source_length, d_model)`; may be None with
            `cross_attention_cache`.
        source_mask: optional bool `(batch, source_length)`, True for real source tokens.
        target_mask: optional bool `(batch, target_length)`, True for real target tokens.
        self_attention_cache: `(keys, values)`, each `(batch, num_heads, max_length, d_k)`, used
            with `cache_index` for step-by-step decoding.
        cross_attention_cache: `(keys, values)` of the encoder output from
            `MultiHeadAttention.compute_key_value`, each `(batch, num_heads, source_length, d_k)`.
        cache_index: position of `x`'s first token when decoding with a cache.
        return_attention_scores: also return the cross-attention weights
            `(batch, num_heads, target_length, source_length)`.
        training: enables dropout.

    Returns:
        `(batch, target_length, d_model)`; then the cross-attention weights if asked; then the
        updated self-attention cache if `cache_index` is given.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(
            self.num_heads, self.d_model, self.dropout, name="self_attention", dtype=policy
        )
        self.self_attention_norm = self.layer_norm("self_attention_norm")
        self.self_attention_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        self.cross_attention = MultiHeadAttention(
            self.num_heads, self.d_model, self.dropout, name="cross_attention", dtype=policy
        )
        self.cross_attention_norm = self.layer_norm("cross_attention_norm")
        self.cross_attention_dropout = keras.layers.Dropout(self.dropout, dtype=policy)
        self.feed_forward = FeedForward(
            self.d_model, self.d_ff, self.dropout, self.activation, name="feed_forward",
            dtype=policy,
        )
        self.feed_forward_norm = self.layer_norm("feed_forward_norm")
        self.feed_forward_dropout = keras.layers.Dropout(self.dropout, dtype=policy)

    def build(self, input_shape):
        encoder_shape = (input_shape[0], None, self.d_model)
        self.self_attention.build(input_shape, input_shape)
        self.cross_attention.build(input_shape, encoder_shape)
        for norm in (self.self_attention_norm, self.cross_attention_norm, self.feed_forward_norm):
            norm.build(input_shape)
        self.feed_forward.build(input_shape)
        self.built = True

    def call(
        self,
        x,
        encoder_output=None,
        source_mask=None,
        target_mask=None,
        self_attention_cache=None,
        cross_attention_cache=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        h = sublayer_input(x, self.self_attention_norm, self.norm_first)
        attended = self.self_attention(
            h,
            h,
            query_mask=target_mask,
            key_mask=target_mask,
            use_causal_mask=True,
            cache=self_attention_cache,
            cache_index=cache_index,
            training=training,
        )
        if cache_index is not None:
            attended, self_attention_cache = attended
        x = sublayer_output(
            x, attended, self.self_attention_norm, self.self_attention_dropout,
            self.norm_first, training,
        )

        h = sublayer_input(x, self.cross_attention_norm, self.norm_first)
        attended = self.cross_attention(
            h,
            encoder_output,
            query_mask=target_mask,
            key_mask=source_mask,
            cache=cross_attention_cache,
            return_attention_scores=return_attention_scores,
            training=training,
        )
        if return_attention_scores:
            attended, weights = attended
        x = sublayer_output(
            x, attended, self.cross_attention_norm, self.cross_attention_dropout,
            self.norm_first, training,
        )

        h = sublayer_input(x, self.feed_forward_norm, self.norm_first)
        x = sublayer_output(
            x, self.feed_forward(h, training=training), self.feed_forward_norm,
            self.feed_forward_dropout, self.norm_first, training,
        )
        results = (x,)
        if return_attention_scores:
            results += (weights,)
        if cache_index is not None:
            results += (self_attention_cache,)
        return results[0] if len(results) == 1 else results


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(LayerStack):
    """Dropout on the embedded target, then N unshared `DecoderLayer`s (plus a final norm for
    pre-LN).

    For step-by-step decoding, start from `initial_self_attention_caches` and
    `cross_attention_caches`, then call with `cache_index=t` and one new token per step; see
    `keras_transformer.inference`.

    Args:
        num_layers: N.
        d_model, num_heads, d_ff, dropout, norm_first, activation: as for `DecoderLayer`.

    Call arguments:
        x: embedded target `(batch, target_length, d_model)`.
        encoder_output: `(batch, source_length, d_model)`; None when `cross_attention_caches`
            are given.
        source_mask: optional bool `(batch, source_length)`.
        target_mask: optional bool `(batch, target_length)`.
        self_attention_caches: one `(keys, values)` per layer (with `cache_index`).
        cross_attention_caches: one `(keys, values)` per layer.
        cache_index: position of `x`'s first token when decoding with caches.
        return_attention_scores: also return the per-layer cross-attention weights, a tuple of
            `(batch, num_heads, target_length, source_length)`.
        training: enables dropout.

    Returns:
        decoder output `(batch, target_length, d_model)`; then the cross-attention weights if
        asked; then the updated self-attention caches if `cache_index` is given.
    """

    def make_block(self, index: int) -> DecoderLayer:
        return DecoderLayer(name=f"decoder_layer_{index}", **self.sublayer_options())

    def cross_attention_caches(self, encoder_output):
        """Keys and values of the encoder output for every layer, computed once per source.

        Args:
            encoder_output: `(batch, source_length, d_model)`.

        Returns:
            tuple of `num_layers` pairs `(keys, values)`, each
            `(batch, num_heads, source_length, d_k)`.
        """
        return tuple(
            layer.cross_attention.compute_key_value(encoder_output)
            for layer in self.blocks
        )

    def initial_self_attention_caches(self, batch_size, max_length):
        """Empty (zero) self-attention caches with room for `max_length` target positions.

        Returns:
            tuple of `num_layers` pairs `(keys, values)`, each
            `(batch_size, num_heads, max_length, d_k)`.
        """
        shape = (batch_size, self.num_heads, max_length, self.d_model // self.num_heads)
        zeros = ops.zeros(shape, dtype=self.compute_dtype)
        return tuple((zeros, zeros) for _ in self.blocks)

    def call(
        self,
        x,
        encoder_output=None,
        source_mask=None,
        target_mask=None,
        self_attention_caches=None,
        cross_attention_caches=None,
        cache_index=None,
        return_attention_scores=False,
        training=None,
    ):
        x = self.input_dropout(x, training=training)
        all_weights, new_caches = [], []
        for index, layer in enumerate(self.blocks):
            outputs = layer(
                x,
                encoder_output,
                source_mask=source_mask,
                target_mask=target_mask,
                self_attention_cache=(
                    None if self_attention_caches is None else self_attention_caches[index]
                ),
                cross_attention_cache=(
                    None if cross_attention_caches is None else cross_attention_caches[index]
                ),
                cache_index=cache_index,
                return_attention_scores=return_attention_scores,
                training=training,
            )
            if not isinstance(outputs, tuple):
                outputs = (outputs,)
            x = outputs[0]
            if return_attention_scores:
                all_weights.append(outputs[1])
            if cache_index is not None:
                new_caches.append(outputs[-1])
        results = (self.normalize_output(x),)
        if return_attention_scores:
            results += (tuple(all_weights),)
        if cache_index is not None:
            results += (tuple(new_caches),)
        return results[0] if len(results) == 1 else results

    def compute_mask(self, x, mask=None):
        # Stop the implicit mask here: losses and metrics mask padding explicitly, and a mask on
        # the logits would make Keras weight the loss a second time.
        return None
