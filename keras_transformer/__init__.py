"""keras_transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers."""

from keras_transformer import layers
from keras_transformer.config import TransformerConfig
from keras_transformer.model import build_transformer
from keras_transformer.training import (
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    TransformerSchedule,
)

__all__ = [
    "MaskedAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "TransformerConfig",
    "TransformerSchedule",
    "build_transformer",
    "layers",
]
__version__ = "0.1.0"
