"""Decoding with a trained Transformer (cached greedy and beam search) and the `Translator`
module that exports it with its tokenizers; `load_translator` opens a run directory or an export
for translation. Names are imported on first use."""

from keras_transformer._lazy import lazy_attributes

_SOURCES = {
    "CrossAttention": ".loading",
    "DEFAULT_ALPHA": ".defaults",
    "DEFAULT_BEAM_WIDTH": ".defaults",
    "DEFAULT_EXTRA_LENGTH": ".defaults",
    "MAX_BEAM_WIDTH": ".defaults",
    "SequenceDecoder": ".decoding",
    "Translator": ".translator",
    "beam_search": ".search",
    "greedy_search": ".search",
    "length_penalty": ".search",
    "load_translator": ".loading",
}
__all__ = sorted(_SOURCES)
__getattr__ = lazy_attributes(__name__, _SOURCES)
