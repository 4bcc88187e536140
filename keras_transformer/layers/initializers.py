"""Weight initializers as layer arguments: given by name or object, serialized in `get_config`."""

from __future__ import annotations

import keras


def get_initializer(identifier) -> keras.initializers.Initializer:
    """The initializer for a name (`"glorot_uniform"`), a serialized config or an instance."""
    return keras.initializers.get(identifier)


def clone_initializer(initializer: keras.initializers.Initializer):
    """A fresh copy for one sub-layer.

    Every sub-layer gets its own instance, as in keras-hub: an unseeded copy draws its own seed,
    so sibling weights differ; a seeded one repeats the same draw in each copy, as asked.
    """
    return initializer.__class__.from_config(initializer.get_config())


def serialize_initializer(initializer: keras.initializers.Initializer) -> dict:
    """The `get_config` form of an initializer."""
    return keras.initializers.serialize(initializer)
