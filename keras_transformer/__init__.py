"""keras_transformer: the Transformer of "Attention Is All You Need" as Keras 3 layers.

Names are imported on first use (`kt.build_transformer` loads Keras, `kt.TransformerSchedule` the
training package), so importing the package itself is instant.
"""

from keras_transformer._lazy import lazy_attributes

_SOURCES = {
    "MaskedAccuracy": ".training.metrics",
    "MaskedSparseCategoricalCrossentropy": ".training.losses",
    "TrainingSettings": ".settings",
    "TransformerConfig": ".config",
    "TransformerSchedule": ".training.schedules",
    "build_transformer": ".model",
    "layers": ".layers",
    "load_run": ".run_dir",
    "load_translator": ".inference.loading",
}
__all__ = sorted(_SOURCES)
__getattr__ = lazy_attributes(__name__, _SOURCES)
__version__ = "0.1.0"
