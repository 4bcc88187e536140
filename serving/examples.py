"""Classify and Regress: `tf.Example` requests on signatures with one serialized-Example input,
as TF Serving's classifier and regressor run them.

A signature can serve `classify` when it has the single input `inputs` and outputs `classes`
and/or `scores`; `regress` when it has the single input `inputs` and the single output
`outputs`. Any other signature (a Keras `model.export()` one, the translator) answers
INVALID_ARGUMENT, i.e. HTTP 400.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from tensorflow.core.example import example_pb2, feature_pb2

from serving.errors import invalid_argument
from serving.json_tensor import debug_string, decode_b64, format_float, is_b64_object
from serving.signatures import Signature

_INT64 = (-(2**63), 2**63 - 1)
Classification = list[tuple[str, float]]


def _json_type(value: Any) -> str:
    return {type(None): "Null", dict: "Object", list: "Array"}.get(type(value), "Number")


def _add_value(feature: feature_pb2.Feature, name: str, value: Any) -> None:
    """Appends one JSON value to a feature, keeping a feature to one kind like TF Serving."""
    if isinstance(value, bool):
        kind, item = "int64_list", int(value)
    elif isinstance(value, str):
        kind, item = "bytes_list", value.encode("utf-8", errors="surrogateescape")
    elif is_b64_object(value):
        kind, item = "bytes_list", decode_b64(value)
    elif isinstance(value, float) or (isinstance(value, int) and value > 2**64 - 1):
        kind, item = "float_list", float(value)
    elif isinstance(value, int):
        if not _INT64[0] <= value <= _INT64[1]:
            raise invalid_argument(
                f"Feature: {name} has uint64_t element. Only int64_t is supported."
            )
        kind, item = "int64_list", value
    else:
        raise invalid_argument(
            f"Feature: {name} has element with unexpected JSON type: {_json_type(value)}"
        )
    current = feature.WhichOneof("kind")
    if current not in (None, kind):
        expected = {"bytes_list": "bytes", "float_list": "float", "int64_list": "int64"}[current]
        raise invalid_argument(
            f"Unexpected element type in feature: {name} expecting type: {expected}"
        )
    getattr(feature, kind).value.append(item)


def _example_from_json(value: Any) -> example_pb2.Example:
    if not isinstance(value, dict):
        raise invalid_argument(f"Example must be JSON object but got JSON {_json_type(value)}")
    example = example_pb2.Example()
    for name, content in value.items():
        feature = example.features.feature[name]
        for item in content if isinstance(content, list) else [content]:
            _add_value(feature, name, item)
    return example


def examples_from_json(doc: dict[str, Any], api: str) -> list[bytes]:
    """Serialized `tf.Example`s of a REST classify/regress body (`context` merged into each).

    Raises:
        ServingError: INVALID_ARGUMENT for a missing, empty or malformed `examples` list.
    """
    context = _example_from_json(doc["context"]) if "context" in doc else None
    if "examples" not in doc:
        raise invalid_argument(
            f"JSON Value: {debug_string(doc)} When method is {api}, key 'examples' is expected "
            "and was not found"
        )
    items = doc["examples"]
    if not isinstance(items, list):
        raise invalid_argument(
            f"JSON Value: {debug_string(doc)} Expecting 'examples' value to be an list/array"
        )
    if not items:
        raise invalid_argument(
            f"JSON Value: {debug_string(doc)} 'examples' value is an empty array"
        )
    return [_with_context(context, _example_from_json(item)) for item in items]


def _with_context(context: example_pb2.Example | None, example: example_pb2.Example) -> bytes:
    if context is None:
        return example.SerializeToString()
    merged = example_pb2.Example()
    merged.CopyFrom(context)
    merged.MergeFrom(example)
    return merged.SerializeToString()


def examples_from_input(request_input) -> list[bytes]:
    """Serialized `tf.Example`s of a gRPC `tensorflow.serving.Input`."""
    kind = request_input.WhichOneof("kind")
    if kind == "example_list":
        return [e.SerializeToString() for e in request_input.example_list.examples]
    if kind == "example_list_with_context":
        listed = request_input.example_list_with_context
        return [_with_context(listed.context, e) for e in listed.examples]
    raise invalid_argument("Input is empty")


def check_signature(signature: Signature, api: str) -> None:
    """Raises INVALID_ARGUMENT unless `signature` can serve `api` (classify or regress)."""
    if len(signature.inputs) != 1:
        raise invalid_argument("Expected one input Tensor.")
    if api == "classify":
        if len(signature.outputs) not in (1, 2):
            raise invalid_argument(
                f"Expected one or two output Tensors, found {len(signature.outputs)}"
            )
        if "inputs" not in signature.inputs:
            raise invalid_argument(f"No classification inputs found in signature {signature.name}")
        if not {"classes", "scores"} & set(signature.outputs):
            raise invalid_argument(
                'Expected classification signature outputs to contain at least one of "classes" '
                f'or "scores". Signature was: {signature.name}'
            )
        return
    if len(signature.outputs) != 1:
        raise invalid_argument("Expected one output Tensor.")
    if "inputs" not in signature.inputs:
        raise invalid_argument(f"No regression inputs found in signature {signature.name}")
    if "outputs" not in signature.outputs:
        raise invalid_argument(f"No regression outputs found in signature {signature.name}")


def _check_matrix(array: np.ndarray, name: str, kind: str, count: int) -> None:
    if array.ndim != 2:
        raise invalid_argument(
            f"Expected Tensor shape: [batch_size num_classes] but got {list(array.shape)}"
        )
    if array.dtype.kind != kind:
        wanted = "DT_STRING" if kind == "O" else "DT_FLOAT"
        raise invalid_argument(f"Expected {name} Tensor of {wanted}. Got: {array.dtype}")
    if array.shape[0] != count:
        raise invalid_argument(
            f"Expected {name} output batch size of {count}. Got: {array.shape[0]}"
        )


def classifications(outputs: dict[str, np.ndarray], count: int) -> list[Classification]:
    """(label, score) pairs per example from `classes` and/or `scores` outputs."""
    classes, scores = outputs.get("classes"), outputs.get("scores")
    if classes is not None:
        _check_matrix(classes, "classes", "O", count)
    if scores is not None:
        _check_matrix(scores, "scores", "f", count)
    if classes is not None and scores is not None and classes.shape[1] != scores.shape[1]:
        raise invalid_argument(
            "Tensors class and score should match in dim_size(1). "
            f"Got {classes.shape[1]} vs. {scores.shape[1]}"
        )
    width = (classes if classes is not None else scores).shape[1]
    return [
        [
            (
                classes[i, c].decode("utf-8", errors="replace") if classes is not None else "",
                float(scores[i, c]) if scores is not None else 0.0,
            )
            for c in range(width)
        ]
        for i in range(count)
    ]


def regressions(outputs: dict[str, np.ndarray], count: int) -> list[float]:
    """One value per example from the `outputs` output ([batch] or [batch, 1] float)."""
    values = outputs["outputs"]
    if not (values.ndim == 1 or (values.ndim == 2 and values.shape[1] == 1)):
        raise invalid_argument(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{list(values.shape)}"
        )
    if values.shape[0] != count:
        raise invalid_argument(
            f"Input batch size did not match output batch size: {count} vs. {values.shape[0]}"
        )
    if values.dtype != np.float32:
        raise invalid_argument(f"Expected output Tensor of DT_FLOAT.  Got: {values.dtype}")
    return [float(v) for v in values.reshape(-1)]


async def run(predictor, servable, signature: Signature, serialized: list[bytes], api: str):
    """Runs a classify or regress request; returns `classifications()` or `regressions()`."""
    check_signature(signature, api)
    predictor.metrics.example_counts.observe(len(serialized), servable.name)
    batch = np.empty(len(serialized), dtype=object)
    batch[:] = serialized
    outputs = await predictor.run(servable, signature.name, {"inputs": batch}, api.capitalize())
    if api == "classify":
        return classifications(outputs, len(serialized))
    return regressions(outputs, len(serialized))


def results_json(results: list, api: str) -> str:
    """The REST answer `{"results": ...}` for classify or regress results."""
    if api == "classify":
        rows = (
            "[" + ", ".join(
                f"[{json.dumps(label, ensure_ascii=False)}, {format_float(score, True)}]"
                for label, score in row
            ) + "]"
            for row in results
        )
    else:
        rows = (format_float(value, True) for value in results)
    return '{"results": [' + ", ".join(rows) + "]}"
