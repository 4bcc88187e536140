"""tf.Example requests (classify / regress): JSON conversion, signature checks, results."""

import json

import numpy as np
import pytest
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import input_pb2

from serving import examples
from serving.errors import ServingError
from serving.signatures import Signature, TensorInfo


def parsed(serialized: bytes) -> dict:
    example = example_pb2.Example.FromString(serialized)
    return {
        name: (feature.WhichOneof("kind"), list(getattr(feature, feature.WhichOneof("kind")).value))
        for name, feature in example.features.feature.items()
    }


def test_json_values_become_typed_features_with_context():
    doc = {
        "context": {"lang": "de", "x": 1.0},
        "examples": [{"x": [0.5, 2.0], "n": [1, True], "b": {"b64": "AAE="}}, {"x": 3.0}],
    }
    first, second = (parsed(s) for s in examples.examples_from_json(doc, "classify"))
    assert first["lang"] == ("bytes_list", [b"de"])
    assert first["x"] == ("float_list", [0.5, 2.0])
    assert first["n"] == ("int64_list", [1, 1])
    assert first["b"] == ("bytes_list", [b"\x00\x01"])
    assert second["x"] == ("float_list", [3.0]) and second["lang"] == ("bytes_list", [b"de"])


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ({}, "key 'examples' is expected and was not found"),
        ({"examples": {}}, "Expecting 'examples' value to be an list/array"),
        ({"examples": []}, "'examples' value is an empty array"),
        ({"examples": [1]}, "Example must be JSON object but got JSON Number"),
        ({"examples": [{"x": [1.5, 2]}]}, "Unexpected element type in feature: x expecting "
                                          "type: float"),
        ({"examples": [{"x": None}]}, "Feature: x has element with unexpected JSON type: Null"),
        ({"examples": [{"x": [[1]]}]}, "unexpected JSON type: Array"),
        ({"examples": [{"x": 2**63}]}, "has uint64_t element. Only int64_t is supported."),
    ],
)
def test_json_rejections(doc, fragment):
    with pytest.raises(ServingError) as caught:
        examples.examples_from_json(doc, "classify")
    assert caught.value.code == "INVALID_ARGUMENT" and fragment in caught.value.message


def test_grpc_input_with_context():
    request_input = input_pb2.Input()
    listed = request_input.example_list_with_context
    listed.context.features.feature["c"].int64_list.value.append(7)
    listed.examples.add().features.feature["x"].float_list.value.append(1.0)
    (serialized,) = examples.examples_from_input(request_input)
    assert parsed(serialized) == {"c": ("int64_list", [7]), "x": ("float_list", [1.0])}
    with pytest.raises(ServingError, match="Input is empty"):
        examples.examples_from_input(input_pb2.Input())


def signature(inputs, outputs):
    return Signature("s", "", {k: TensorInfo("DT_STRING", (-1,)) for k in inputs},
                     {k: TensorInfo("DT_FLOAT", (-1,)) for k in outputs})


def test_signature_checks():
    examples.check_signature(signature(["inputs"], ["classes", "scores"]), "classify")
    examples.check_signature(signature(["inputs"], ["outputs"]), "regress")
    for bad, api, fragment in [
        (signature(["text"], ["translation", "score", "tokens"]), "classify", "found 3"),
        (signature(["a", "b"], ["scores"]), "classify", "Expected one input Tensor."),
        (signature(["inputs"], ["probabilities"]), "classify", 'at least one of "classes"'),
        (signature(["inputs"], ["y"]), "regress", "No regression outputs"),
        (signature(["text"], ["outputs"]), "regress", "No regression inputs"),
    ]:
        with pytest.raises(ServingError, match=fragment):
            examples.check_signature(bad, api)


def test_results_and_their_validation():
    outputs = {
        "classes": np.array([[b"neg", b"pos"]], dtype=object),
        "scores": np.array([[0.25, 0.75]], np.float32),
    }
    results = examples.classifications(outputs, 1)
    assert results == [[("neg", 0.25), ("pos", 0.75)]]
    assert json.loads(examples.results_json(results, "classify")) == {
        "results": [[["neg", 0.25], ["pos", 0.75]]]
    }
    assert examples.classifications({"scores": outputs["scores"]}, 1)[0][1] == ("", 0.75)
    with pytest.raises(ServingError, match="Expected scores output batch size of 2"):
        examples.classifications({"scores": outputs["scores"]}, 2)
    assert examples.regressions({"outputs": np.array([[1.5], [2.0]], np.float32)}, 2) == [1.5, 2.0]
    assert examples.results_json([1.5, 2.0], "regress") == '{"results": [1.5, 2.0]}'
    with pytest.raises(ServingError, match="either \\[batch_size\\] or \\[batch_size, 1\\]"):
        examples.regressions({"outputs": np.ones((2, 2), np.float32)}, 2)
