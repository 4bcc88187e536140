"""Training the Transformer with `model.fit`: losses, metrics, schedule, settings, run directory."""

from keras_transformer.training.losses import MaskedSparseCategoricalCrossentropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.run_dir import Run, RunPaths, load_run
from keras_transformer.training.schedules import TransformerSchedule
from keras_transformer.training.settings import TrainingSettings, load_run_config
from keras_transformer.training.trainer import train

__all__ = [
    "MaskedAccuracy",
    "MaskedSparseCategoricalCrossentropy",
    "Run",
    "RunPaths",
    "TrainingSettings",
    "TransformerSchedule",
    "load_run",
    "load_run_config",
    "train",
]
