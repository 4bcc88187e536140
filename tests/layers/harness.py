"""`run_layer_test`: the checks every public layer must pass, in the spirit of keras-hub's
`TestCase.run_layer_test`.

1. Config: `from_config(get_config())` gives the same config, and the registered name
   deserializes to the same class.
2. Calls: a symbolic call (batch unknown) and an eager one give the expected shape.
3. Weights: the expected numbers of trainable and non-trainable weights (and parameters).
4. Saving: a functional model around the layer, saved as `.keras` and loaded, gives the same
   outputs.
5. Training: one `fit` step on a mean-squared error changes every trainable weight.
6. Mixed precision: under `mixed_bfloat16` the outputs and every sub-layer compute in bfloat16
   while every variable stays float32.
"""

from __future__ import annotations

import os
import tempfile

import keras
import numpy as np

MIXED_POLICY = "mixed_bfloat16"


def _make(layer_cls, init_kwargs: dict, dtype=None) -> keras.layers.Layer:
    """A new `layer_cls(**init_kwargs)`. A layer among the arguments (the sub-layer of a
    wrapper) is copied from its config, so that no two instances share one."""

    def fresh(value):
        if not isinstance(value, keras.layers.Layer):
            return value
        config = value.get_config()
        if dtype is not None:
            config["dtype"] = dtype
        return value.__class__.from_config(config)

    kwargs = {name: fresh(value) for name, value in init_kwargs.items()}
    return layer_cls(**kwargs) if dtype is None else layer_cls(**kwargs, dtype=dtype)


def _model_around(layer: keras.layers.Layer, input_data: dict, call_kwargs: dict) -> keras.Model:
    """A functional model calling `layer` on inputs shaped like `input_data` (batch unknown):
    the first entry positionally, the others by name."""
    inputs = {
        name: keras.Input(shape=value.shape[1:], dtype=value.dtype.name, name=name)
        for name, value in input_data.items()
    }
    first, *others = inputs
    outputs = layer(inputs[first], **{name: inputs[name] for name in others}, **call_kwargs)
    return keras.Model(inputs, outputs)


def _assert_same_config(layer_cls, layer: keras.layers.Layer) -> None:
    config = layer.get_config()
    assert layer_cls.from_config(config).get_config() == config
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is layer_cls and revived.get_config() == config


def _assert_saves_and_loads(model: keras.Model, input_data: dict) -> None:
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "model.keras")
        model.save(path)
        loaded = keras.models.load_model(path)
    np.testing.assert_allclose(
        np.asarray(loaded(input_data)), np.asarray(model(input_data)), rtol=1e-6, atol=1e-6
    )


def _assert_training_changes_every_weight(model: keras.Model, input_data: dict) -> None:
    before = [np.array(weight) for weight in model.trainable_weights]
    target = np.random.default_rng(0).normal(size=np.shape(model(input_data)))
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    model.fit(input_data, target, batch_size=len(target), epochs=1, verbose=0)
    unchanged = [
        weight.path
        for weight, old in zip(model.trainable_weights, before, strict=True)
        if np.array_equal(np.array(weight), old)
    ]
    assert not unchanged, f"a training step left these weights unchanged: {unchanged}"


def _assert_mixed_precision(layer_cls, init_kwargs, input_data, call_kwargs, num_weights):
    layer = _make(layer_cls, init_kwargs, MIXED_POLICY)
    first, *others = input_data
    output = layer(input_data[first], **{name: input_data[name] for name in others}, **call_kwargs)
    assert keras.backend.standardize_dtype(output.dtype) == "bfloat16"
    for sublayer in layer._flatten_layers(include_self=True):
        assert sublayer.compute_dtype == "bfloat16", f"{sublayer.name} computes in float32"
    assert len(layer.weights) == num_weights
    assert {weight.dtype for weight in layer.weights} <= {"float32"}


def run_layer_test(
    layer_cls,
    init_kwargs: dict,
    input_data: dict,
    expected_output_shape: tuple,
    *,
    expected_num_trainable_weights: int,
    expected_num_non_trainable_weights: int = 0,
    expected_num_params: int | None = None,
    call_kwargs: dict | None = None,
    float_output: bool = True,
) -> None:
    """Runs the checks of the module docstring on `layer_cls(**init_kwargs)`.

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments; a layer among them (a wrapper's sub-layer) is
            copied for every instance the checks make.
        input_data: the call's tensor inputs by argument name, as NumPy arrays with a batch axis
            first; the first entry is passed positionally.
        expected_output_shape: the output shape of the eager call on `input_data`.
        expected_num_trainable_weights: number of trainable variables once built.
        expected_num_non_trainable_weights: number of non-trainable variables.
        expected_num_params: total number of trainable parameters, if given.
        call_kwargs: non-tensor call arguments.
        float_output: False for layers whose output is not a float tensor (masks): the training
            and mixed-precision checks are then skipped.
    """
    call_kwargs = call_kwargs or {}
    layer = _make(layer_cls, init_kwargs)
    _assert_same_config(layer_cls, layer)

    model = _model_around(layer, input_data, call_kwargs)
    assert tuple(model.output.shape) == (None, *expected_output_shape[1:])
    output = model(input_data)
    assert tuple(output.shape) == tuple(expected_output_shape)
    assert len(layer.trainable_weights) == expected_num_trainable_weights
    assert len(layer.non_trainable_weights) == expected_num_non_trainable_weights
    if expected_num_params is not None:
        assert sum(int(np.prod(w.shape)) for w in layer.trainable_weights) == expected_num_params
    _assert_same_config(layer_cls, layer)  # built layers keep their config

    _assert_saves_and_loads(model, input_data)
    if not float_output:
        return
    if expected_num_trainable_weights:
        _assert_training_changes_every_weight(model, input_data)
    _assert_mixed_precision(
        layer_cls,
        init_kwargs,
        input_data,
        call_kwargs,
        expected_num_trainable_weights + expected_num_non_trainable_weights,
    )
