"""Boolean masks, True where a token is real or attention is allowed.

Masks are explicit: computed once from token ids and passed as arguments to every layer that
needs them. No layer of this package reads or sets Keras' implicit `_keras_mask` (it does not
survive layers that do not declare `supports_masking`, and one left on the logits would make
Keras apply it to every loss and metric as sample weights).

Mask arguments are named by kind, after the sequence or attention they belong to:

- `..._padding_mask`: bool `(batch, length)`, True at the real (non-padding) tokens of a
  sequence. A layer's own input has plain `padding_mask` (`Encoder`, `Decoder`); other
  sequences are named: `encoder_padding_mask` (`Decoder`), `query_padding_mask` and
  `key_padding_mask` (`MultiHeadAttention`).
- `..._attention_mask`: bool, broadcastable to `(batch, num_heads, query_length, key_length)`,
  True where a query may attend to a key: `attention_mask` (`MultiHeadAttention`),
  `self_attention_mask` (`EncoderLayer`, `DecoderLayer`), `cross_attention_mask`
  (`DecoderLayer`). Stacks build them once with `attention_mask(...)` for all their layers.
"""

from __future__ import annotations

import keras
from keras import ops

PAD_ID = 0


def padding_mask(token_ids, pad_id: int = PAD_ID):
    """Marks real tokens.

    Args:
        token_ids: int tensor `(batch, length)`.
        pad_id: the id used for padding.

    Returns:
        bool tensor `(batch, length)`, True for every token that is not padding.
    """
    return ops.not_equal(token_ids, pad_id)


def causal_mask(query_length, key_length, offset=0):
    """Look-ahead mask: query i (at absolute position `offset + i`) sees keys 0..offset + i.

    With `offset=0` and equal lengths this is the lower-triangular mask of training. During cached
    decoding the queries are the newest positions, so `offset` is the cache index; key slots not yet
    written lie in the future and are masked too.

    Args:
        query_length: number of queries.
        key_length: number of keys.
        offset: absolute position of the first query.

    Returns:
        bool tensor `(query_length, key_length)`.
    """
    query_positions = ops.expand_dims(ops.arange(query_length) + offset, axis=1)
    key_positions = ops.expand_dims(ops.arange(key_length), axis=0)
    return ops.less_equal(key_positions, query_positions)


def attention_mask(
    query_length,
    key_length,
    *,
    query_padding_mask=None,
    key_padding_mask=None,
    use_causal_mask: bool = False,
    offset=0,
):
    """Combines padding and look-ahead masks into one mask for the attention scores.

    The combination matches `keras.layers.MultiHeadAttention`: a score is kept when its query is
    real, its key is real and (if causal) the key is not in the query's future.

    Args:
        query_length: number of queries (used by the look-ahead mask only).
        key_length: number of keys (used by the look-ahead mask only).
        query_padding_mask: optional bool `(batch, query_length)`, True for real queries.
        key_padding_mask: optional bool `(batch, key_length)`, True for real keys.
        use_causal_mask: whether to add the look-ahead mask.
        offset: absolute position of the first query (cached decoding).

    Returns:
        bool tensor broadcastable to `(batch, heads, query_length, key_length)`, or None when
        nothing is masked.

    Example:
        >>> real = padding_mask(np.array([[7, 4, 0]]))  # the third token is padding
        >>> mask = attention_mask(3, 3, query_padding_mask=real, key_padding_mask=real,
        ...                       use_causal_mask=True)
        >>> np.asarray(mask)[0, 0].astype(int)
        array([[1, 0, 0],
               [1, 1, 0],
               [0, 0, 0]])
    """
    mask = None
    if query_padding_mask is not None:
        mask = ops.expand_dims(ops.expand_dims(query_padding_mask, 1), 3)  # (batch, 1, query, 1)
    if key_padding_mask is not None:
        keys = ops.expand_dims(ops.expand_dims(key_padding_mask, 1), 2)  # (batch, 1, 1, key)
        mask = keys if mask is None else ops.logical_and(mask, keys)
    if use_causal_mask:
        causal = causal_mask(query_length, key_length, offset)[None, None]  # (1, 1, query, key)
        mask = causal if mask is None else ops.logical_and(mask, causal)
    return mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class PaddingMask(keras.layers.Layer):
    """Functional-model node for `padding_mask`: token ids `(batch, length)` -> bool mask."""

    def __init__(self, pad_id: int = PAD_ID, **kwargs):
        super().__init__(**kwargs)
        self.pad_id = pad_id

    def call(self, token_ids):
        return padding_mask(token_ids, self.pad_id)

    def compute_output_spec(self, token_ids):
        return keras.KerasTensor(token_ids.shape, dtype="bool")

    def get_config(self):
        config = super().get_config()
        config.update(pad_id=self.pad_id)
        return config
