"""Losses, metrics and schedules for training the Transformer with `model.fit`."""

from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.schedules import TransformerSchedule

__all__ = ["MaskedAccuracy", "MaskedSparseCategoricalCrossentropy", "TransformerSchedule"]
