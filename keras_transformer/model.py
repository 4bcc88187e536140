"""`build_transformer`: the functional Keras model (source tokens, target tokens) -> logits."""

from __future__ import annotations

import functools

import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import Decoder, Encoder, PaddingMask, PositionalEmbedding


def build_transformer(config: TransformerConfig) -> keras.Model:
    """Builds the encoder-decoder Transformer as a functional `keras.Model`.

    Padding masks are computed once from the token ids (id 0 is padding) and passed explicitly to
    the encoder and decoder, and from there to every attention call.

    Inputs:
        source_tokens: int `(batch, source_length)`.
        target_tokens: int `(batch, target_length)`, the decoder input (`[START] + y`).

    Output:
        logits `(batch, target_length, target_vocab_size)`, float32 even under a mixed-precision
        policy.

    Layers are named so that decoding can reuse them: `source_embedding` and `target_embedding`
    (one layer, `shared_embedding`, when `config.share_embeddings`), `encoder`, `decoder`,
    `logits` (absent when `config.tie_output_embedding`: the target embedding layer, called with
    `reverse=True`, projects instead).

    Example:
        >>> config = TransformerConfig(source_vocab_size=100, target_vocab_size=100,
        ...     num_encoder_layers=2, num_decoder_layers=2, d_model=32, num_heads=4, d_ff=64)
        >>> build_transformer(config).output_shape
        (None, None, 100)
    """
    source_tokens = keras.Input(shape=(None,), dtype="int32", name="source_tokens")
    target_tokens = keras.Input(shape=(None,), dtype="int32", name="target_tokens")

    if config.share_embeddings:
        shared = PositionalEmbedding(
            config.source_vocab_size, config.d_model, config.max_length, name="shared_embedding"
        )
        source_embedding = target_embedding = shared
    else:
        source_embedding = PositionalEmbedding(
            config.source_vocab_size, config.d_model, config.max_length, name="source_embedding"
        )
        target_embedding = PositionalEmbedding(
            config.target_vocab_size, config.d_model, config.max_length, name="target_embedding"
        )
    stack = dict(
        d_model=config.d_model,
        num_heads=config.num_heads,
        d_ff=config.d_ff,
        dropout=config.dropout,
        norm_first=config.norm_first,
    )
    encoder = Encoder(config.num_encoder_layers, name="encoder", **stack)
    decoder = Decoder(config.num_decoder_layers, name="decoder", **stack)
    if config.tie_output_embedding:
        to_logits = functools.partial(target_embedding, reverse=True)
    else:
        to_logits = keras.layers.Dense(config.target_vocab_size, name="logits")
    # The projection runs in the compute dtype, the softmax and loss see float32 (as the Keras
    # mixed-precision guide does for a model's last layer).
    to_float32 = keras.layers.Activation("linear", dtype="float32", name="float32_logits")

    source_mask = PaddingMask(name="source_mask")(source_tokens)
    target_mask = PaddingMask(name="target_mask")(target_tokens)
    encoded = encoder(source_embedding(source_tokens), padding_mask=source_mask)
    decoded = decoder(
        target_embedding(target_tokens),
        encoded,
        source_mask=source_mask,
        target_mask=target_mask,
    )
    logits = to_float32(to_logits(decoded))
    return keras.Model(
        inputs={"source_tokens": source_tokens, "target_tokens": target_tokens},
        outputs=logits,
        name="transformer",
    )
