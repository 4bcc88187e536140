"""JSON <-> tensor conversions against the TF Serving contract (no server, no TensorFlow)."""

import base64
import json

import numpy as np
import pytest

from serving import json_tensor
from serving.errors import ServingError
from serving.signatures import TensorInfo

TEXT = {"text": TensorInfo("DT_STRING", (-1,))}
TYPED = {
    "x": TensorInfo("DT_FLOAT", (-1, 2)),
    "flag": TensorInfo("DT_BOOL", (-1,)),
    "count": TensorInfo("DT_INT64", (-1,)),
}


def error_of(call, *args) -> ServingError:
    with pytest.raises(ServingError) as caught:
        call(*args)
    return caught.value


def inputs(body: dict, signature=TEXT):
    return json_tensor.predict_inputs(body, signature, "")


def test_parse_request_rules():
    assert error_of(json_tensor.parse_request, b"  ").message == (
        "JSON Parse error: The document is empty"
    )
    bad = error_of(json_tensor.parse_request, b'{"instances": [1,}')
    assert bad.code == "INVALID_ARGUMENT" and bad.message.startswith("JSON Parse error: ")
    assert "at offset: " in bad.message
    assert error_of(json_tensor.parse_request, b"[1, 2]").message == (
        "JSON Value: [1,2] Is not object"
    )
    # Trailing data ignored, first duplicate key wins, NaN/Infinity are numbers.
    doc = json_tensor.parse_request(b'{"a": 1, "a": 2, "b": [NaN, -Infinity]} trailing')
    assert doc["a"] == 1 and np.isnan(doc["b"][0]) and doc["b"][1] == -np.inf
    # Non-UTF-8 bytes inside strings survive into the tensor unchanged.
    doc = json_tensor.parse_request(b'{"instances": ["\xff\xfe"]}')
    assert inputs(doc)[0]["text"][0] == b"\xff\xfe"


def test_signature_name_must_be_a_string():
    assert json_tensor.signature_name({}) == ""
    assert json_tensor.signature_name({"signature_name": "ids"}) == "ids"
    error = error_of(json_tensor.signature_name, {"signature_name": 3})
    assert error.message.endswith("'signature_name' key must be a string value.")


def test_row_format_strings_and_b64():
    b64 = base64.b64encode(b"\x00bin").decode()
    tensors, request_format = inputs({"instances": ["a b", {"b64": b64}]})
    assert request_format == json_tensor.ROW
    assert tensors["text"].tolist() == [b"a b", b"\x00bin"]
    tensors, _ = inputs({"instances": [{"text": "a"}, {"text": {"b64": b64}}]})
    assert tensors["text"].tolist() == [b"a", b"\x00bin"]


def test_row_format_multiple_inputs_batches_each_input():
    body = {"instances": [
        {"x": [1, 2.5], "flag": True, "count": 3},
        {"x": [0, -1], "flag": False, "count": -4},
    ]}
    tensors, _ = inputs(body, TYPED)
    np.testing.assert_array_equal(tensors["x"], np.array([[1, 2.5], [0, -1]], np.float32))
    assert tensors["x"].dtype == np.float32 and tensors["count"].dtype == np.int64
    assert tensors["flag"].tolist() == [True, False]
    assert tensors["count"].tolist() == [3, -4]


@pytest.mark.parametrize(
    ("instances", "fragment"),
    [
        ([{"x": [1, 2], "flag": True}], "keys must be equal to: count,flag,x"),
        ([{"x": [1, 2], "flag": True, "count": 1, "zz": 1}], "does not have named input: zz"),
        ([[1, 2]], "instances is a plain list, but expecting list of objects"),
        (
            [{"x": [1, 2], "flag": True, "count": 1}, [1]],
            "Expecting object but got list at item 1",
        ),
        ([{"x": [1, 2], "flag": 1, "count": 1}], "Type: Number is not of expected type: bool"),
        ([{"x": [1, 2], "flag": True, "count": 2.0}], "is not of expected type: int64"),
        ([{"x": [1, True], "flag": True, "count": 2}], "Type: True is not of expected type: float"),
        ([{"x": [1, "2"], "flag": True, "count": 2}], "Type: String is not of expected type"),
        ([{"x": [1, 2], "flag": True, "count": 2**63}], "is not of expected type: int64"),
    ],
)
def test_row_format_rejections(instances, fragment):
    error = error_of(inputs, {"instances": instances}, TYPED)
    assert error.code == "INVALID_ARGUMENT" and fragment in error.message, error.message


def test_ragged_and_mixed_instances_are_rejected():
    ids = {"token_ids": TensorInfo("DT_INT32", (-1, -1))}
    ragged = error_of(inputs, {"instances": [[1, 2], [3]]}, ids)
    assert ragged.message == (
        "Failed to process element: 1 of 'instances' list. Error: INVALID_ARGUMENT: "
        "Expecting tensor size: 2 but got: 1"
    )
    reshaped = error_of(inputs, {"instances": [[[1, 2]], [[1], [2]]]}, ids)
    assert "Expecting shape [1,2] but got: [2,1]" in reshaped.message
    inner = error_of(inputs, {"instances": [[[1, 2], [3]]]}, ids)
    assert "Encountered list at unexpected size: 1 at level: 1 expected size: 2" in inner.message
    mixed = error_of(inputs, {"instances": ["a", {"text": "b"}]})
    assert mixed.message == "Expecting value/list but got object at item 1 of input list"


def test_instances_must_be_a_non_empty_list_and_exclusive_with_inputs():
    assert "Expecting 'instances' to be an list/array" in error_of(
        inputs, {"instances": "a"}).message
    assert "No values in 'instances' array" in error_of(inputs, {"instances": []}).message
    assert "expecting only one of 'inputs' or 'instances'" in error_of(
        inputs, {"instances": ["a"], "inputs": ["a"]}).message
    assert error_of(inputs, {"other": 1}).message == "Missing 'inputs' or 'instances' key"
    assert error_of(json_tensor.predict_inputs, {"inputs": []}, {}, "").message == (
        "Failed to get input map for signature: DEFAULT"
    )


def test_columnar_format():
    tensors, request_format = inputs({"inputs": ["a", "b"]})
    assert request_format == json_tensor.COLUMNAR and tensors["text"].tolist() == [b"a", b"b"]
    scalar, _ = inputs({"inputs": "a"})
    assert scalar["text"].shape == ()
    empty, _ = inputs({"inputs": []})
    assert empty["text"].shape == (0,)
    # Unknown keys of a columnar object are ignored; inputs need not share dim 0.
    body = {"inputs": {"x": [[1, 2]], "flag": [True, False], "count": [1, 2, 3], "extra": 1}}
    tensors, _ = inputs(body, TYPED)
    assert [tensors[k].shape for k in ("x", "flag", "count")] == [(1, 2), (2,), (3,)]
    missing = error_of(inputs, {"inputs": {"x": [[1, 2]]}}, TYPED)
    assert missing.message == "Missing named input: count in 'inputs' object."
    plain = error_of(inputs, {"inputs": [1]}, TYPED)
    assert plain.message.startswith("inputs is a plain value/list, but expecting an object")


def test_dtype_rules_per_contract():
    def tensor(value, dtype):
        return json_tensor.tensor_from_json(value, dtype)

    assert tensor([1, 2.5, float("nan")], "DT_FLOAT").dtype == np.float32
    assert tensor([1e300], "DT_FLOAT")[0] == np.inf  # out of float32 range: inf, no error
    assert tensor([2**31 - 1], "DT_INT32")[0] == 2**31 - 1
    assert error_of(tensor, [2**31], "DT_INT32").code == "INVALID_ARGUMENT"
    assert error_of(tensor, [-1], "DT_UINT32").code == "INVALID_ARGUMENT"
    assert tensor([300], "DT_INT8")[0] == 44  # stored via int32 and truncated, as in TF
    assert error_of(tensor, [1], "DT_BOOL").code == "INVALID_ARGUMENT"
    assert error_of(tensor, [None], "DT_STRING").message.endswith(
        "Type: Null is not of expected type: string"
    )
    assert "not formatted correctly for base64 data" in error_of(
        tensor, {"b64": "eA==", "x": 1}, "DT_STRING").message
    assert error_of(tensor, {"b64": "%%"}, "DT_STRING").message == "Unable to base64 decode"
    unsupported = error_of(tensor, [1.0], "DT_HALF")
    assert unsupported.code == "UNIMPLEMENTED" and unsupported.http_status == 501
    # In row format the same failure is wrapped into a 400.
    row = error_of(inputs, {"instances": [1.0]}, {"h": TensorInfo("DT_HALF", (-1,))})
    assert row.http_status == 400 and "UNIMPLEMENTED" in row.message


def test_float_formatting_matches_tf_serving():
    fmt = json_tensor.format_float
    assert fmt(float(np.float32(0.1)), True) == "0.1"
    assert fmt(3.0, True) == "3.0"
    assert fmt(9000000.0, True) == "9e+06"
    assert fmt(float(np.float32(1 / 3)), True) == "0.333333343"
    assert fmt(1 / 3, False) == "0.33333333333333331"
    assert [fmt(v, True) for v in (float("nan"), float("inf"), -float("inf"))] == [
        "NaN", "Infinity", "-Infinity"
    ]


def test_predict_response_keys_follow_request_format():
    multi = {
        "translation": np.array([b"x y", "é".encode()], dtype=object),
        "score": np.array([0.1, np.nan], np.float32),
        "tokens": np.array([[1, 2], [3, 0]], np.int64),
    }
    row = json.loads(json_tensor.predict_response(multi, json_tensor.ROW))
    assert row["predictions"][0] == {"translation": "x y", "score": 0.1, "tokens": [1, 2]}
    assert row["predictions"][1]["translation"] == "é" and np.isnan(row["predictions"][1]["score"])
    columnar = json.loads(json_tensor.predict_response(multi, json_tensor.COLUMNAR))
    assert columnar["outputs"]["tokens"] == [[1, 2], [3, 0]]
    assert isinstance(columnar["outputs"]["tokens"][0][0], int)
    single = {"output_0": np.array([1.5, 2.0], np.float32)}
    assert json.loads(json_tensor.predict_response(single, json_tensor.ROW)) == {
        "predictions": [1.5, 2.0]
    }
    assert json.loads(json_tensor.predict_response(single, json_tensor.COLUMNAR)) == {
        "outputs": [1.5, 2.0]
    }
    text = json_tensor.predict_response({"a": np.array([True, False])}, json_tensor.ROW)
    assert text == '{"predictions": [true, false]}'


def test_bytes_outputs_are_base64_and_bad_outputs_rejected():
    out = {"image_bytes": np.array([b"\x00\xff"], dtype=object)}
    body = json.loads(json_tensor.predict_response(out, json_tensor.ROW))
    assert body == {"predictions": [{"b64": base64.b64encode(b"\x00\xff").decode()}]}
    half = error_of(json_tensor.predict_response, {"h": np.ones(2, np.float16)},
                    json_tensor.ROW)
    assert half.message == "Failed to write JSON value for tensor type: half"
    scalar = error_of(json_tensor.predict_response, {"s": np.float32(1.0) * np.ones(())},
                      json_tensor.ROW)
    assert scalar.message.startswith("Tensor name: s has no shape information")
    uneven = {"a": np.ones(2, np.float32), "b": np.ones(3, np.float32)}
    assert "inconsistent batch size" in error_of(
        json_tensor.predict_response, uneven, json_tensor.ROW).message
    # Columnar has no batch constraint.
    assert json.loads(json_tensor.predict_response(uneven, json_tensor.COLUMNAR))["outputs"]["b"]
    assert json.loads(json_tensor.error_body("bad")) == {"error": "bad"}


def test_nesting_deeper_than_a_tensor_can_be_is_refused():
    value = "a"
    for _ in range(65):
        value = [value]
    with pytest.raises(ServingError, match="nests lists more than 64 levels deep") as caught:
        json_tensor.tensor_from_json(value, "DT_STRING")
    assert caught.value.code == "INVALID_ARGUMENT"
    assert json_tensor.tensor_from_json(value[0], "DT_STRING").shape == (1,) * 64


def test_debug_string_of_a_document_too_deep_to_write():
    value: list = []
    for _ in range(100_000):
        value = [value]
    assert json_tensor.debug_string(value) == "<Array nested too deeply to show>"
    assert json_tensor.debug_string({"a": [1, 2]}) == '{"a":[1,2]}'


RESPONSE_CASES = {
    "translator": {
        "translation": np.array([b"a dog runs", "é ü €".encode(), b"\xff bad"], dtype=object),
        "score": np.array([-0.1, np.nan, np.inf], np.float32),
        "tokens": np.array([[5, 6, 2], [7, 2, 0], [2, 0, 0]], np.int64),
    },
    "floats": {"output_0": np.array([1 / 3, 1e16, 100000.0, -0.0, 9e6], np.float64)},
    "ints": {"big": np.array([2**62, -(2**63)], np.int64),
             "u": np.array([2**64 - 1, 0], np.uint64)},
    "nested": {"x": np.arange(12, dtype=np.int32).reshape(2, 3, 2),
               "flag": np.array([True, False])},
    "bytes": {"label_bytes": np.array([[b"\x00\xff", b"ab"]], dtype=object)},
    "scalar": {"s": np.float32(2.5) * np.ones((), np.float32)},
    "empty": {"a": np.zeros((0, 2), np.float32), "b": np.zeros((0,), np.int32)},
}
# Written by the encoder before it wrote whole rows with json.dumps: the text must not change.
RESPONSE_TEXTS = {
    ("translator", "row"): '{"predictions": [{"translation": "a dog runs", "score": -0.1, "tokens": [5, 6, 2]}, {"translation": "é ü €", "score": NaN, "tokens": [7, 2, 0]}, {"translation": "� bad", "score": Infinity, "tokens": [2, 0, 0]}]}',  # noqa: E501
    ("translator", "columnar"): '{"outputs": {"translation": ["a dog runs", "é ü €", "� bad"], "score": [-0.1, NaN, Infinity], "tokens": [[5, 6, 2], [7, 2, 0], [2, 0, 0]]}}',  # noqa: E501
    ("floats", "row"): '{"predictions": [0.33333333333333331, 1e+16, 100000.0, -0.0, 9e+06]}',
    ("floats", "columnar"): '{"outputs": [0.33333333333333331, 1e+16, 100000.0, -0.0, 9e+06]}',
    ("ints", "row"): '{"predictions": [{"big": 4611686018427387904, "u": 18446744073709551615}, {"big": -9223372036854775808, "u": 0}]}',  # noqa: E501
    ("ints", "columnar"): '{"outputs": {"big": [4611686018427387904, -9223372036854775808], "u": [18446744073709551615, 0]}}',  # noqa: E501
    ("nested", "row"): '{"predictions": [{"x": [[0, 1], [2, 3], [4, 5]], "flag": true}, {"x": [[6, 7], [8, 9], [10, 11]], "flag": false}]}',  # noqa: E501
    ("nested", "columnar"): '{"outputs": {"x": [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9], [10, 11]]], "flag": [true, false]}}',  # noqa: E501
    ("bytes", "row"): '{"predictions": [[{"b64": "AP8="}, {"b64": "YWI="}]]}',
    ("bytes", "columnar"): '{"outputs": [[{"b64": "AP8="}, {"b64": "YWI="}]]}',
    ("scalar", "columnar"): '{"outputs": 2.5}',
    ("empty", "row"): '{"predictions": []}',
    ("empty", "columnar"): '{"outputs": {"a": [], "b": []}}',
}


@pytest.mark.parametrize(("case", "request_format"), sorted(RESPONSE_TEXTS))
def test_response_text_is_unchanged(case, request_format):
    text = json_tensor.predict_response(RESPONSE_CASES[case], request_format)
    assert text == RESPONSE_TEXTS[case, request_format]
