"""Decoding with a trained Transformer (cached greedy and beam search) and the `Translator`
module that exports it with its tokenizers."""

from keras_transformer.inference.decoding import DEFAULT_EXTRA_LENGTH, SequenceDecoder
from keras_transformer.inference.search import beam_search, greedy_search, length_penalty
from keras_transformer.inference.translator import Translator

__all__ = [
    "DEFAULT_EXTRA_LENGTH",
    "SequenceDecoder",
    "Translator",
    "beam_search",
    "greedy_search",
    "length_penalty",
]
