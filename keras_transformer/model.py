"""`build_transformer`: the functional Keras model (source tokens, target tokens) -> logits.

The names of its inputs and layers are a contract: decoding (`inference.decoding`) takes the
model apart by them. They are defined here, once.
"""

from __future__ import annotations

import functools

import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import (
    BLOCK_ARGUMENTS,
    Decoder,
    Encoder,
    PaddingMask,
    PositionalEmbedding,
)

# Inputs.
SOURCE_TOKENS = "source_tokens"
TARGET_TOKENS = "target_tokens"
# Layers that decoding reuses.
SOURCE_EMBEDDING = "source_embedding"
TARGET_EMBEDDING = "target_embedding"
SHARED_EMBEDDING = "shared_embedding"  # instead of both, with `config.share_embeddings`
ENCODER = "encoder"
DECODER = "decoder"
LOGITS = "logits"  # absent with `config.tie_output_embedding`


def block_arguments(config: TransformerConfig) -> dict:
    """The encoder and decoder arguments (`BLOCK_ARGUMENTS`) that `config` has fields for; the
    others keep the layers' defaults."""
    return {name: getattr(config, name) for name in BLOCK_ARGUMENTS if hasattr(config, name)}


def build_transformer(config: TransformerConfig) -> keras.Model:
    """Builds the encoder-decoder Transformer as a functional `keras.Model`.

    Padding masks are computed once from the token ids (id 0 is padding) and passed explicitly to
    the encoder and decoder, and from there to every attention call. No Keras mask rides on any
    output, so losses and metrics see plain tensors and mask padding themselves.

    Inputs:
        source_tokens: int `(batch, source_length)`.
        target_tokens: int `(batch, target_length)`, the decoder input (`[START] + y`).

    Output:
        logits `(batch, target_length, target_vocab_size)`, float32 even under a mixed-precision
        policy.

    Layers are named so that decoding can reuse them (the constants above): `source_embedding`
    and `target_embedding` (one layer, `shared_embedding`, when `config.share_embeddings`),
    `encoder`, `decoder`, `logits` (absent when `config.tie_output_embedding`: the target
    embedding layer, called with `reverse=True`, projects instead).

    Example:
        >>> config = TransformerConfig(source_vocab_size=100, target_vocab_size=100,
        ...     num_encoder_layers=2, num_decoder_layers=2, d_model=32, num_heads=4, d_ff=64)
        >>> build_transformer(config).output_shape
        (None, None, 100)
    """
    source_tokens = keras.Input(shape=(None,), dtype="int32", name=SOURCE_TOKENS)
    target_tokens = keras.Input(shape=(None,), dtype="int32", name=TARGET_TOKENS)

    def embedding(vocab_size: int, name: str) -> PositionalEmbedding:
        return PositionalEmbedding(
            vocab_size=vocab_size, d_model=config.d_model, max_length=config.max_length, name=name
        )

    if config.share_embeddings:
        source_embedding = target_embedding = embedding(config.source_vocab_size, SHARED_EMBEDDING)
    else:
        source_embedding = embedding(config.source_vocab_size, SOURCE_EMBEDDING)
        target_embedding = embedding(config.target_vocab_size, TARGET_EMBEDDING)
    blocks = block_arguments(config)
    encoder = Encoder(config.num_encoder_layers, name=ENCODER, **blocks)
    decoder = Decoder(config.num_decoder_layers, name=DECODER, **blocks)
    if config.tie_output_embedding:
        to_logits = functools.partial(target_embedding, reverse=True)
    else:
        to_logits = keras.layers.Dense(config.target_vocab_size, name=LOGITS)
    # The projection runs in the compute dtype, the softmax and loss see float32 (as the Keras
    # mixed-precision guide does for a model's last layer).
    to_float32 = keras.layers.Activation("linear", dtype="float32", name="float32_logits")

    source_padding_mask = PaddingMask(name="source_padding_mask")(source_tokens)
    target_padding_mask = PaddingMask(name="target_padding_mask")(target_tokens)
    encoded = encoder(source_embedding(source_tokens), padding_mask=source_padding_mask)
    decoded = decoder(
        target_embedding(target_tokens),
        encoded,
        padding_mask=target_padding_mask,
        encoder_padding_mask=source_padding_mask,
    )
    logits = to_float32(to_logits(decoded))
    return keras.Model(
        inputs={SOURCE_TOKENS: source_tokens, TARGET_TOKENS: target_tokens},
        outputs=logits,
        name="transformer",
    )
