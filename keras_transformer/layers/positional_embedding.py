"""Token embedding scaled by sqrt(d_model) plus the paper's sinusoidal positional encoding."""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_transformer.layers.initializers import get_initializer, serialize_initializer


def sinusoidal_encoding(max_length: int, d_model: int) -> np.ndarray:
    """The encoding of section 3.5, interleaved: sin on even dimensions, cos on odd ones.

    PE[pos, 2i] = sin(pos / 10000^(2i / d_model))
    PE[pos, 2i + 1] = cos(pos / 10000^(2i / d_model))

    Args:
        max_length: number of positions.
        d_model: encoding width.

    Returns:
        float32 array `(max_length, d_model)`.
    """
    positions = np.arange(max_length, dtype=np.float64)[:, None]
    even_dims = np.arange(0, d_model, 2, dtype=np.float64)[None, :]
    angles = positions / np.power(10000.0, even_dims / d_model)
    encoding = np.zeros((max_length, d_model), dtype=np.float64)
    encoding[:, 0::2] = np.sin(angles)
    encoding[:, 1::2] = np.cos(angles[:, : d_model // 2])
    return encoding.astype(np.float32)


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEmbedding(keras.layers.Layer):
    """Embeds token ids and adds their positions' sinusoidal encoding.

    Token id 0 is padding. The layer sets no Keras mask: padding masks are computed from the
    token ids and passed explicitly (see `keras_transformer.layers.masks`).

    Called with `reverse=True` on decoder outputs, the layer is the tied output projection
    (Press and Wolf, 2017; the paper's section 3.4): logits = hidden @ embedding^T.

    Args:
        vocab_size: number of token ids.
        d_model: embedding width.
        max_length: number of positions the encoding covers.
        embeddings_initializer: initializer of the embedding matrix.

    Call arguments:
        token_ids: int tensor `(batch, length)`.
        start_position: absolute position of the first token (cached decoding feeds one token
            at a time); a scalar, default 0.
        reverse: project instead: `token_ids` is then a float tensor `(..., d_model)` of hidden
            states.

    Returns:
        `(batch, length, d_model)`:
        embedding * sqrt(d_model) + PE[start_position + arange(length)];
        with `reverse=True`, logits `(..., vocab_size)`.

    Example:
        >>> layer = PositionalEmbedding(vocab_size=100, d_model=16, max_length=32)
        >>> tuple(layer(np.array([[5, 7, 0]])).shape)
        (1, 3, 16)
    """

    def __init__(
        self,
        *,
        vocab_size: int,
        d_model: int,
        max_length: int,
        embeddings_initializer="uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.max_length = max_length
        self.embeddings_initializer = get_initializer(embeddings_initializer)
        self.token_embedding = keras.layers.ReversibleEmbedding(
            vocab_size,
            d_model,
            embeddings_initializer=self.embeddings_initializer,
            reverse_dtype=self.compute_dtype,  # else matmul promotes to the float32 table
            name="token_embedding",
            dtype=self.dtype_policy,
        )
        self.encoding = sinusoidal_encoding(max_length, d_model)

    def build(self, input_shape):
        self.token_embedding.build()
        self.built = True

    def call(self, token_ids, start_position=0, reverse=False):
        if reverse:
            return self.token_embedding(token_ids, reverse=True)
        length = ops.shape(token_ids)[1]
        positions = ops.arange(length) + start_position
        encoding = ops.take(ops.cast(self.encoding, self.compute_dtype), positions, axis=0)
        embedded = self.token_embedding(token_ids) * ops.cast(
            math.sqrt(self.d_model), self.compute_dtype
        )
        return embedded + encoding[None]

    def compute_output_spec(self, token_ids, start_position=0, reverse=False):
        if reverse:
            shape = (*token_ids.shape[:-1], self.vocab_size)
            return keras.KerasTensor(shape, dtype=self.compute_dtype)
        return keras.KerasTensor((*token_ids.shape, self.d_model), dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            max_length=self.max_length,
            embeddings_initializer=serialize_initializer(self.embeddings_initializer),
        )
        return config
