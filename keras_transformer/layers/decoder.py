"""Decoder layer (causal self-attention, cross-attention, feed-forward) and the stack of N."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers import masks
from keras_transformer.layers.base import LayerStack, TransformerLayer
from keras_transformer.layers.residual import sublayer_input, sublayer_output


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerLayer):
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
        self_attention_mask: optional bool, broadcastable to `(batch, num_heads, target_length,
            key_length)`: `masks.attention_mask` of the target padding mask with the causal
            mask (offset by `cache_index` when decoding; `key_length` is then the cache's).
            Default: the causal mask alone.
        cross_attention_mask: optional bool, broadcastable to `(batch, num_heads,
            target_length, source_length)`: `masks.attention_mask` of the target and source
            padding masks.
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
        self.self_attention, self.self_attention_norm, self.self_attention_dropout = (
            self.attention_sublayer("self_attention")
        )
        self.cross_attention, self.cross_attention_norm, self.cross_attention_dropout = (
            self.attention_sublayer("cross_attention")
        )
        self.feed_forward, self.feed_forward_norm, self.feed_forward_dropout = (
            self.feed_forward_sublayer()
        )

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
        self_attention_mask=None,
        cross_attention_mask=None,
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
            use_causal_mask=True,  # when no self_attention_mask is given
            attention_mask=self_attention_mask,
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
            attention_mask=cross_attention_mask,
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

        results = (self.feed_forward_residual(x, training),)
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
        # Computed once for all layers. With caches, the keys are the cache's slots and the
        # queries sit at `cache_index`, so slots not yet written are in the future.
        query_length = ops.shape(x)[1]
        if self_attention_caches is None:
            key_length = query_length
        else:
            key_length = ops.shape(self_attention_caches[0][0])[2]
        self_attention_mask = masks.attention_mask(
            query_length, key_length, query_mask=target_mask, key_mask=target_mask,
            use_causal_mask=True, offset=0 if cache_index is None else cache_index,
        )
        cross_attention_mask = masks.attention_mask(
            None, None, query_mask=target_mask, key_mask=source_mask
        )
        all_weights, new_caches = [], []
        for index, layer in enumerate(self.blocks):
            outputs = layer(
                x,
                encoder_output,
                self_attention_mask=self_attention_mask,
                cross_attention_mask=cross_attention_mask,
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
