"""Training the Transformer with `model.fit`: losses, metrics, schedule, callbacks, `train()`.

Names are imported on first use, so that importing one light module of this package (the
schedule, say) does not load the trainer, the vocabulary learner or matplotlib.
"""

from keras_transformer._lazy import lazy_attributes

_SOURCES = {
    "MaskedAccuracy": ".metrics",
    "MaskedSparseCategoricalCrossentropy": ".losses",
    "TrainingSettings": "..settings",
    "TransformerSchedule": ".schedules",
    "load_run": "..run_dir",
    "train": ".trainer",
}
__all__ = sorted(_SOURCES)
__getattr__ = lazy_attributes(__name__, _SOURCES)
