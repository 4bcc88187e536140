"""The Transformer's layers, each built from the paper's equations.

Masks are explicit arguments, never Keras' implicit masks; `masks` documents how mask arguments
are named. Encoder and decoder layers and stacks take the same keyword-only hyper-parameters,
listed once in `BLOCK_ARGUMENTS`.
"""

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.base import BLOCK_ARGUMENTS
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.dropout import Dropout
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import FeedForward
from keras_transformer.layers.masks import PaddingMask, attention_mask, causal_mask, padding_mask
from keras_transformer.layers.positional_embedding import PositionalEmbedding, sinusoidal_encoding
from keras_transformer.layers.residual import AddNorm

__all__ = [
    "BLOCK_ARGUMENTS",
    "AddNorm",
    "Decoder",
    "DecoderLayer",
    "Dropout",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "MultiHeadAttention",
    "PaddingMask",
    "PositionalEmbedding",
    "attention_mask",
    "causal_mask",
    "padding_mask",
    "sinusoidal_encoding",
]
