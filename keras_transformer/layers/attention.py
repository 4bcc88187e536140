"""Multi-head scaled dot-product attention, written from section 3.2 of the paper."""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras import ops

from keras_transformer.layers import masks
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.initializers import (
    clone_initializer,
    get_initializer,
    serialize_initializer,
)
from keras_transformer.layers.real_positions import gather_real, real_positions, scatter_real
from keras_transformer.layers.xla import under_xla


def masked_softmax(scores, mask):
    """softmax(scores) over the last axis with masked scores filled by a large negative.

    The fill happens in float32 whatever the compute dtype, so it is safe under float16 (where
    -1e9 would overflow to -inf). Weights are then multiplied by the mask, as Keras' `Softmax`
    does: masked keys get exactly 0, and a fully masked row (a padding query) gets all zeros
    instead of a uniform distribution over padding.

    Args:
        scores: `(batch, heads, query_length, key_length)`.
        mask: bool, broadcastable to `scores`, True where attention is allowed; or None.

    Returns:
        attention weights shaped like `scores`, in the dtype of `scores`.
    """
    scores32 = ops.cast(scores, "float32")
    if mask is not None:
        scores32 = ops.where(mask, scores32, ops.cast(-1e9, "float32"))
    # exp(s - max) / sum, written out: a one-token decoding step's rows are so short that
    # oneDNN's fused softmax costs several times these four elementwise ops.
    exps = ops.exp(scores32 - ops.max(scores32, axis=-1, keepdims=True))
    weights = exps / ops.sum(exps, axis=-1, keepdims=True)
    if mask is not None:
        weights = weights * ops.cast(mask, "float32")
    return ops.cast(weights, scores.dtype)


# A one-query attention step (cached decoding) over fewer key elements than this (batch x heads x
# keys x d_k) takes its two products elementwise. At such sizes oneDNN's batched matmul costs
# ~0.1-0.2 ms per call on CPU, most of a decoding step at batch 1 (bench/decode.py, profiled);
# above it (large batches, beams) the matmul is faster. Under XLA the products stay matmuls: a
# Multi30k export decoded beam 4 at batch 1 1.13x, 1.03x and 1.05x faster with them in three
# in-process A/Bs (greedy 1.07x, 1.02x, 0.94x), with the same tokens.
ELEMENTWISE_ATTENTION_LIMIT = 2**17

# Projecting only the real positions of padded sequences saves products that grow as d_model^2
# per position, and costs a gather and four scatters (and their gradients) that grow as d_model.
# Trained on Multi30k batches of 64 padded to their longest pair (about half padding), in one
# process, 2 CPU cores: at d_model 128 the step was 10% slower in float32 and 6% in bfloat16
# with it; at d_model 512, 12% faster in float32 and even in bfloat16. From this width on, the
# projections skip padding.
REAL_POSITIONS_MIN_WIDTH = 512


def dot_product_scores(queries, keys, elementwise=None):
    """`queries @ keys^T`: `(batch, heads, q, d_k), (batch, heads, k, d_k) -> (batch, heads, q, k)`.

    Args:
        elementwise: None, or (for one query) a bool scalar tensor choosing products and sums
            over a batched matmul.
    """

    def by_matmul():
        return ops.matmul(queries, ops.transpose(keys, (0, 1, 3, 2)))

    if elementwise is None:
        return by_matmul()
    return ops.cond(
        elementwise, lambda: ops.expand_dims(ops.sum(queries * keys, axis=-1), 2), by_matmul
    )


def weighted_values(weights, values, elementwise=None):
    """`weights @ values`: `(batch, heads, q, k), (batch, heads, k, d_k) -> (batch, heads, q, d_k)`.

    Args:
        elementwise: as for `dot_product_scores`.
    """

    def by_matmul():
        return ops.matmul(weights, values)

    if elementwise is None:
        return by_matmul()
    return ops.cond(
        elementwise,
        lambda: ops.sum(ops.transpose(weights, (0, 1, 3, 2)) * values, axis=2, keepdims=True),
        by_matmul,
    )


def _length(x, axis: int):
    """The size of `axis`: a Python int when known at trace time (a constant reshape), else a
    tensor. The batch size is left to reshape's -1, so a one-token decoding step needs no shape
    ops to split or merge heads."""
    return x.shape[axis] if x.shape[axis] is not None else ops.shape(x)[axis]


def write_to_cache(cache, index, new):
    """`cache[:, :, index : index + length] = new` for caches `(batch, heads, max_length, d_k)`.

    Under XLA this is a dynamic-update-slice (in place). Elsewhere it is TensorStridedSliceUpdate,
    a native kernel: keras' `slice_update` would run an XLA op compiled on demand, ~0.1 ms a call.
    """
    if under_xla():
        return ops.slice_update(cache, (0, 0, index, 0), new)
    index = tf.cast(index, tf.int32)
    return tf.raw_ops.TensorStridedSliceUpdate(
        input=cache,
        begin=tf.stack([0, 0, index, 0]),
        end=tf.stack([0, 0, index + _length(new, axis=2), 0]),
        strides=[1, 1, 1, 1],
        value=new,
        begin_mask=0b1011,  # all of the batch, head and d_k axes
        end_mask=0b1011,
    )


@keras.saving.register_keras_serializable(package="keras_transformer")
class MultiHeadAttention(keras.layers.Layer):
    """softmax(Q K^T / sqrt(d_k) + mask) V over `num_heads` heads, then an output projection.

    Queries, keys and values are projected to `d_model`, split into `num_heads` heads of
    `d_k = d_model / num_heads`, attended per head, concatenated and projected back to `d_model`.

    Masks are explicit arguments (see `keras_transformer.layers.masks` for the naming scheme);
    the layer neither reads nor sets Keras' implicit masks.

    Key/value cache (for decoding):
        - Cross-attention: `compute_key_value(encoder_output)` once per source gives
          `(keys, values)`; pass it as `cache` with `value=None` and no `cache_index`.
        - Self-attention: start from zeros `(batch, num_heads, max_length, d_k)` twice; at step `t`
          pass `cache=(keys, values), cache_index=t` and the new token(s) as `query`. The new
          keys/values are written at `t` and the returned cache is the updated one. With
          `use_causal_mask=True` slots after the current position are masked, so the fixed-size
          cache keeps shapes static inside `tf.while_loop` and XLA.
        - Growing self-attention cache (`append_to_cache=True`): the cache holds exactly the
          positions before `cache_index` (start from zeros of length 0); the new keys/values are
          appended to it, one copy of the cache instead of a padded slot and an in-place write,
          and one new query attends to every key without a causal mask.

    Args:
        num_heads: number of heads; must divide `d_model`.
        d_model: model width.
        dropout: dropout rate on the attention weights.
        kernel_initializer: initializer of the four projection kernels.
        bias_initializer: initializer of the four projection biases.

    Call arguments:
        query: `(batch, query_length, d_model)`.
        value: `(batch, key_length, d_model)`; default: `query` (self-attention). Must be None
            with a precomputed `cache`.
        key: `(batch, key_length, d_model)`; defaults to `value`.
        query_padding_mask: optional bool `(batch, query_length)`, True for real queries.
            Without a `cache`, and from `d_model` `REAL_POSITIONS_MIN_WIDTH` on, the query
            and output projections run at the real queries only (`real_positions`), and
            padding queries' outputs are zero.
        key_padding_mask: optional bool `(batch, key_length)`, True for real keys; the key and
            value projections then run at the real keys only (as for the queries).
        use_causal_mask: mask keys in each query's future (decoder self-attention).
        attention_mask: optional precomputed bool mask broadcastable to `(batch, num_heads,
            query_length, key_length)` (see `masks.attention_mask`), used instead of
            `query_padding_mask`, `key_padding_mask` and `use_causal_mask` to mask scores:
            stacks compute it once for all their layers (and give the padding masks too, for
            the projections).
        cache: optional `(keys, values)`, each `(batch, num_heads, cache_length, d_k)`.
        cache_index: position at which to write the new keys/values into `cache`.
        append_to_cache: the cache's length is `cache_index`: append the new keys/values to it
            (see "Growing self-attention cache" above).
        return_attention_scores: also return the weights `(batch, num_heads, query_length,
            key_length)`.
        training: enables dropout.

    Returns:
        `(batch, query_length, d_model)`; then the attention weights if
        `return_attention_scores`; then the updated cache if `cache_index` is given.

    Raises:
        ValueError: for a `cache_index` without a `cache`, or a precomputed `cache` together
            with `value` or `key`.

    Example:
        >>> attention = MultiHeadAttention(num_heads=2, d_model=8)
        >>> x = np.random.rand(2, 5, 8).astype("float32")
        >>> tuple(attention(x, x, use_causal_mask=True).shape)
        (2, 5, 8)
    """

    def __init__(
        self,
        *,
        num_heads: int,
        d_model: int,
        dropout: float = 0.0,
        kernel_initializer="glorot_uniform",
        bias_initializer="zeros",
        **kwargs,
    ):
        super().__init__(**kwargs)
        if d_model % num_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must divide d_model ({d_model}) so that every head "
                "gets d_k = d_model / num_heads dimensions"
            )
        self.num_heads = num_heads
        self.d_model = d_model
        self.d_k = d_model // num_heads
        self.dropout = dropout
        self.kernel_initializer = get_initializer(kernel_initializer)
        self.bias_initializer = get_initializer(bias_initializer)
        self.query_dense = self._projection("query")
        self.key_dense = self._projection("key")
        self.value_dense = self._projection("value")
        self.output_dense = self._projection("output")
        self.weights_dropout = Dropout(dropout, dtype=self.dtype_policy)

    def _projection(self, name: str) -> keras.layers.Dense:
        return keras.layers.Dense(
            self.d_model,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            name=name,
            dtype=self.dtype_policy,
        )

    def build(self, query_shape, value_shape=None, key_shape=None):
        value_shape = query_shape if value_shape is None else value_shape
        key_shape = value_shape if key_shape is None else key_shape
        projections = (
            (self.query_dense, query_shape),
            (self.key_dense, key_shape),
            (self.value_dense, value_shape),
            (self.output_dense, (*query_shape[:-1], self.d_model)),
        )
        # `compute_key_value` may have built the key and value projections already (the
        # cross-attention caches of a decoder that was not called yet).
        for projection, shape in projections:
            if not projection.built:
                projection.build(shape)
        self.built = True

    # The head axes are swapped by einsum, not `ops.transpose`: on CPU, TensorFlow's oneDNN build
    # runs Transpose as a oneDNN reorder set up on every call, ~35 us even for a sentence's few
    # kilobytes (18 of them per translation, in the encoder and the cross-attention caches),
    # where the einsum kernel moves the same values in ~1 us.

    def _split_heads(self, x):
        """`(batch, length, d_model)` -> `(batch, num_heads, length, d_k)`."""
        x = ops.reshape(x, (-1, _length(x, axis=1), self.num_heads, self.d_k))
        return ops.einsum("blhd->bhld", x)

    def _merge_heads(self, x):
        """`(batch, num_heads, length, d_k)` -> `(batch, length, d_model)`."""
        x = ops.einsum("bhld->blhd", x)
        return ops.reshape(x, (-1, _length(x, axis=1), self.d_model))

    def _project_heads(self, dense, x):
        """`dense(x)` split into heads: `(batch, length, width)` -> `(batch, num_heads, length,
        d_k)`.

        One position (a decoding step) is projected as a `(batch, width)` matrix, a plain
        MatMul, and needs no transpose: Dense on 3-D inputs goes through tensordot, about ten
        shape ops around the MatMul, run again at every step. The same products either way.
        """
        if x.shape[1] == 1:
            rows = dense(ops.reshape(x, (-1, _length(x, axis=2))))
            return ops.reshape(rows, (-1, self.num_heads, 1, self.d_k))
        return self._split_heads(dense(x))

    def _merge_and_project(self, x):
        """Heads `(batch, num_heads, length, d_k)` concatenated and projected: `(batch, length,
        d_model)`; one position as a matrix, as in `_project_heads`."""
        if x.shape[2] == 1:
            rows = self.output_dense(ops.reshape(x, (-1, self.d_model)))
            return ops.reshape(rows, (-1, 1, self.d_model))
        return self.output_dense(self._merge_heads(x))

    def _project_real(self, dense, real, positions, like):
        """`dense` of the gathered rows `real` `(1, real, width)`, scattered back into the
        positions of `like` `(batch, length, width)` (zeros elsewhere) and split into heads."""
        return self._split_heads(scatter_real(dense(real), positions, like))

    def compute_key_value(self, value, key=None, positions=None):
        """Projects and splits keys and values once, e.g. the encoder output for cross-attention.

        Args:
            value: `(batch, key_length, d_model)`.
            key: `(batch, key_length, d_model)`; defaults to `value`.
            positions: optional `real_positions` of the keys: the projections run there only,
                and keys and values are zero elsewhere.

        Returns:
            `(keys, values)`, each `(batch, num_heads, key_length, d_k)`.
        """
        key = value if key is None else key
        if positions is None:
            return (
                self._project_heads(self.key_dense, key),
                self._project_heads(self.value_dense, value),
            )
        real_value = gather_real(value, positions)
        real_key = real_value if key is value else gather_real(key, positions)
        return (
            self._project_real(self.key_dense, real_key, positions, key),
            self._project_real(self.value_dense, real_value, positions, value),
        )

    def call(
        self,
        query,
        value=None,
        key=None,
        query_padding_mask=None,
        key_padding_mask=None,
        use_causal_mask=False,
        attention_mask=None,
        cache=None,
        cache_index=None,
        append_to_cache=False,
        return_attention_scores=False,
        training=None,
    ):
        if cache_index is not None and cache is None:
            raise ValueError(
                "MultiHeadAttention: cache_index needs a cache to write the new keys and values "
                "into (start from zeros of shape (batch, num_heads, max_length, d_k))"
            )
        if append_to_cache and cache_index is None:
            raise ValueError(
                "MultiHeadAttention: append_to_cache needs cache_index, the cache's length (the "
                "position of the new keys and values)"
            )
        if cache is not None and cache_index is None:
            if value is not None or key is not None:
                raise ValueError(
                    "MultiHeadAttention: a cache without cache_index holds precomputed keys and "
                    "values (compute_key_value); pass value=None and key=None with it, or give "
                    "cache_index to write new ones into the cache"
                )
            keys, values = cache
        query_positions = key_positions = None
        if cache is None and self.d_model >= REAL_POSITIONS_MIN_WIDTH:  # whole sequences
            query_positions = real_positions(query_padding_mask)
            key_positions = (query_positions if key_padding_mask is query_padding_mask
                             else real_positions(key_padding_mask))
        if cache is None or cache_index is not None:
            keys, values = self.compute_key_value(
                query if value is None else value, key, positions=key_positions
            )
            if append_to_cache:
                keys = ops.concatenate([cache[0], keys], axis=2)
                values = ops.concatenate([cache[1], values], axis=2)
            elif cache_index is not None:
                keys = write_to_cache(cache[0], cache_index, keys)
                values = write_to_cache(cache[1], cache_index, values)
        if query_positions is None:
            queries = self._project_heads(self.query_dense, query)
        else:
            queries = self._project_real(
                self.query_dense, gather_real(query, query_positions), query_positions, query
            )
        queries = queries * ops.cast(1.0 / math.sqrt(self.d_k), queries.dtype)
        elementwise = None
        if queries.shape[2] == 1 and not under_xla():  # XLA has no per-call matmul overhead
            elementwise = ops.size(keys) < ELEMENTWISE_ATTENTION_LIMIT
        scores = dot_product_scores(queries, keys, elementwise)
        if attention_mask is None:
            attention_mask = masks.attention_mask(
                ops.shape(queries)[2],
                ops.shape(keys)[2],
                query_padding_mask=query_padding_mask,
                key_padding_mask=key_padding_mask,
                # One query appended after its cache has no key in its future.
                use_causal_mask=use_causal_mask and not (append_to_cache and queries.shape[2] == 1),
                offset=0 if cache_index is None else cache_index,
            )
        weights = masked_softmax(scores, attention_mask)
        attended = weighted_values(
            self.weights_dropout(weights, training=training), values, elementwise
        )
        if query_positions is None:
            output = self._merge_and_project(attended)
        else:
            real = gather_real(self._merge_heads(attended), query_positions)
            output = scatter_real(self.output_dense(real), query_positions, query)
        results = (output,)
        if return_attention_scores:
            results += (weights,)
        if cache_index is not None:
            results += ((keys, values),)
        return results[0] if len(results) == 1 else results

    def compute_output_shape(self, query_shape, value_shape=None, key_shape=None):
        return (*query_shape[:-1], self.d_model)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            d_model=self.d_model,
            dropout=self.dropout,
            kernel_initializer=serialize_initializer(self.kernel_initializer),
            bias_initializer=serialize_initializer(self.bias_initializer),
        )
        return config
