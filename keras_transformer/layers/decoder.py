"""Decoder layer (causal self-attention, cross-attention, feed-forward) and the stack of N."""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers import masks
from keras_transformer.layers.base import LayerStack, TransformerLayer
from keras_transformer.layers.real_positions import at_real_positions


def _check_cache_inputs(encoder_output, cross_attention_cache, self_attention_cache, cache_index):
    """Raises a `ValueError` naming the mistake for inputs the cache API does not take (which
    would otherwise fail deep inside a projection, or silently attend to the wrong keys)."""
    if encoder_output is None and cross_attention_cache is None:
        raise ValueError(
            "the decoder needs encoder_output, or cross-attention caches (keys and values of "
            "the encoder output from MultiHeadAttention.compute_key_value) instead of it"
        )
    if encoder_output is not None and cross_attention_cache is not None:
        raise ValueError("give the decoder encoder_output or its cross-attention caches, not both")
    if (self_attention_cache is None) != (cache_index is None):
        raise ValueError(
            "self-attention caches and cache_index go together: cache_index is the position "
            "at which the new token's keys and values are written into the caches"
        )


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerLayer):
    """Causal self-attention, cross-attention over the encoder output, then a feed-forward network,
    each inside its residual Add & Norm (`self_attention`, `cross_attention` and
    `feed_forward`, three `AddNorm`s).

    Args:
        d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_epsilon,
        kernel_initializer, bias_initializer: keyword-only, see `TransformerBlock`.

    Call arguments:
        x: embedded target `(batch, target_length, d_model)`.
        encoder_output: `(batch, source_length, d_model)`; None with `cross_attention_cache`.
        self_attention_mask: optional bool, broadcastable to `(batch, num_heads, target_length,
            key_length)`: `masks.attention_mask` of the target padding mask with the causal
            mask (offset by `cache_index` when decoding; `key_length` is then the cache's).
            Default: the causal mask alone.
        cross_attention_mask: optional bool, broadcastable to `(batch, num_heads,
            target_length, source_length)`: `masks.attention_mask` of the target and source
            padding masks.
        padding_mask: optional bool `(batch, target_length)`, True for real tokens: the
            feed-forward sub-layer (and, from `d_model` 512 on, attention's projections) then
            runs at the real positions only (`real_positions`). Not with `cache_index`.
        encoder_padding_mask: optional bool `(batch, source_length)`, True for real source
            tokens: from `d_model` 512 on, the cross-attention's key and value projections
            then run there only.
        self_attention_cache: `(keys, values)`, each `(batch, num_heads, max_length, d_k)`, used
            with `cache_index` for step-by-step decoding.
        cross_attention_cache: `(keys, values)` of the encoder output from
            `MultiHeadAttention.compute_key_value`, each `(batch, num_heads, source_length, d_k)`,
            instead of `encoder_output`.
        cache_index: position of `x`'s first token when decoding with a cache.
        append_to_cache: the self-attention cache holds exactly the positions before
            `cache_index`; the new keys and values are appended to it (see
            `MultiHeadAttention`).
        return_attention_scores: also return the cross-attention weights
            `(batch, num_heads, target_length, source_length)`.
        training: enables dropout.

    Returns:
        `(batch, target_length, d_model)`; then the cross-attention weights if asked; then the
        updated self-attention cache if `cache_index` is given.

    Raises:
        ValueError: without `encoder_output` or `cross_attention_cache`, with both, or with one
            of `self_attention_cache` and `cache_index` but not the other.

    Example:
        >>> layer = DecoderLayer(d_model=16, num_heads=2, d_ff=32)
        >>> tuple(layer(np.zeros((2, 4, 16)), np.zeros((2, 6, 16))).shape)
        (2, 4, 16)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.self_attention = self.attention_sublayer("self_attention")
        self.cross_attention = self.attention_sublayer("cross_attention")
        self.feed_forward = self.feed_forward_sublayer()

    def build(self, input_shape):
        for sublayer in (self.self_attention, self.cross_attention, self.feed_forward):
            sublayer.build(input_shape)
        self.built = True

    def call(
        self,
        x,
        encoder_output=None,
        self_attention_mask=None,
        cross_attention_mask=None,
        padding_mask=None,
        encoder_padding_mask=None,
        self_attention_cache=None,
        cross_attention_cache=None,
        cache_index=None,
        append_to_cache=False,
        return_attention_scores=False,
        training=None,
    ):
        _check_cache_inputs(
            encoder_output, cross_attention_cache, self_attention_cache, cache_index
        )
        if padding_mask is not None and cache_index is not None:
            raise ValueError("padding_mask leaves padding out of full sequences; a decoding "
                             "step with cache_index has none")
        if cache_index is not None:
            # A tensor like the caches: Keras refuses a call argument that mixes tensors and
            # plain Python values, and AddNorm passes these together.
            cache_index = ops.convert_to_tensor(cache_index, "int32")
        x = self.self_attention(
            x,
            attention_mask=self_attention_mask,
            query_padding_mask=padding_mask,
            key_padding_mask=padding_mask,
            cache=self_attention_cache,
            cache_index=cache_index,
            # use_causal_mask: when no self_attention_mask is given
            sublayer_options={"use_causal_mask": True, "append_to_cache": append_to_cache},
            training=training,
        )
        if cache_index is not None:
            x, self_attention_cache = x
        x = self.cross_attention(
            x,
            encoder_output,
            attention_mask=cross_attention_mask,
            query_padding_mask=padding_mask,
            key_padding_mask=encoder_padding_mask,
            cache=cross_attention_cache,
            sublayer_options={"return_attention_scores": return_attention_scores},
            training=training,
        )
        if return_attention_scores:
            x, weights = x
        results = (
            at_real_positions(lambda h: self.feed_forward(h, training=training), x, padding_mask),
        )
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
        d_model, num_heads, d_ff, dropout, norm_first, activation, layer_norm_epsilon,
        kernel_initializer, bias_initializer: keyword-only, as for `DecoderLayer`.

    Call arguments:
        x: embedded target `(batch, target_length, d_model)`.
        encoder_output: `(batch, source_length, d_model)`; None with `cross_attention_caches`.
        padding_mask: optional bool `(batch, target_length)`, True for real target tokens.
        encoder_padding_mask: optional bool `(batch, source_length)`, True for real source
            tokens.
        self_attention_caches: one `(keys, values)` per layer (with `cache_index`).
        cross_attention_caches: one `(keys, values)` per layer, instead of `encoder_output`.
        cache_index: position of `x`'s first token when decoding with caches.
        append_to_cache: the self-attention caches hold exactly the positions before
            `cache_index` (start from `initial_self_attention_caches` of length 0): each step
            appends to them, so they grow by one position per token.
        return_attention_scores: also return the per-layer cross-attention weights, a tuple of
            `(batch, num_heads, target_length, source_length)`.
        training: enables dropout.

    Returns:
        decoder output `(batch, target_length, d_model)`; then the cross-attention weights if
        asked; then the updated self-attention caches if `cache_index` is given.

    Raises:
        ValueError: as `DecoderLayer`, or for caches that are not one per layer.

    Example:
        >>> decoder = Decoder(2, d_model=16, num_heads=2, d_ff=32)
        >>> encoder_output = np.zeros((2, 6, 16))
        >>> tuple(decoder(np.zeros((2, 4, 16)), encoder_output).shape)
        (2, 4, 16)
        >>> caches = decoder.initial_self_attention_caches(batch_size=2, max_length=4)
        >>> step, caches = decoder(np.zeros((2, 1, 16)),
        ...     cross_attention_caches=decoder.cross_attention_caches(encoder_output),
        ...     self_attention_caches=caches, cache_index=0)
        >>> tuple(step.shape)
        (2, 1, 16)
    """

    def make_block(self, index: int) -> DecoderLayer:
        return DecoderLayer(
            name=f"decoder_layer_{index}", dtype=self.dtype_policy, **self.block_arguments()
        )

    def cross_attention_caches(self, encoder_output):
        """Keys and values of the encoder output for every layer, computed once per source.

        Args:
            encoder_output: `(batch, source_length, d_model)`.

        Returns:
            tuple of `num_layers` pairs `(keys, values)`, each
            `(batch, num_heads, source_length, d_k)`.
        """
        return tuple(
            layer.cross_attention.sublayer.compute_key_value(encoder_output)
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
        padding_mask=None,
        encoder_padding_mask=None,
        self_attention_caches=None,
        cross_attention_caches=None,
        cache_index=None,
        append_to_cache=False,
        return_attention_scores=False,
        training=None,
    ):
        _check_cache_inputs(
            encoder_output, cross_attention_caches, self_attention_caches, cache_index
        )
        for name, caches in (
            ("self_attention_caches", self_attention_caches),
            ("cross_attention_caches", cross_attention_caches),
        ):
            if caches is not None and len(caches) != self.num_layers:
                raise ValueError(
                    f"{name} must hold one (keys, values) pair per layer ({self.num_layers}), "
                    f"got {len(caches)}"
                )
        x = self.input_dropout(x, training=training)
        # Computed once for all layers. With caches, the keys are the cache's slots and the
        # queries sit at `cache_index`, so slots not yet written are in the future. Appending,
        # the keys are the cache and the new positions: each layer's attention masks them.
        self_attention_mask = None
        if not append_to_cache:
            query_length = ops.shape(x)[1]
            if self_attention_caches is None:
                key_length = query_length
            else:
                key_length = ops.shape(self_attention_caches[0][0])[2]
            self_attention_mask = masks.attention_mask(
                query_length,
                key_length,
                query_padding_mask=padding_mask,
                key_padding_mask=padding_mask,
                use_causal_mask=True,
                offset=0 if cache_index is None else cache_index,
            )
        cross_attention_mask = masks.attention_mask(
            None, None, query_padding_mask=padding_mask, key_padding_mask=encoder_padding_mask
        )
        all_weights, new_caches = [], []
        for index, layer in enumerate(self.blocks):
            outputs = layer(
                x,
                encoder_output,
                self_attention_mask=self_attention_mask,
                cross_attention_mask=cross_attention_mask,
                padding_mask=padding_mask if cache_index is None else None,
                encoder_padding_mask=encoder_padding_mask,
                self_attention_cache=(
                    None if self_attention_caches is None else self_attention_caches[index]
                ),
                cross_attention_cache=(
                    None if cross_attention_caches is None else cross_attention_caches[index]
                ),
                cache_index=cache_index,
                append_to_cache=append_to_cache,
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
