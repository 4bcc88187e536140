"""The gRPC services over a real socket with tensorflow-serving-api's stubs."""

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.example import example_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving.grpc_service import tensor_proto


@pytest.fixture(scope="module")
def channel(shared_server):
    with grpc.insecure_channel(shared_server.grpc_target) as channel:
        yield channel


@pytest.fixture(scope="module")
def predictions(channel):
    return prediction_service_pb2_grpc.PredictionServiceStub(channel)


def predict_request(inputs: dict, signature: str = "", model: str = "translator", **spec):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.model_spec.signature_name = signature
    for key, value in spec.items():
        if key == "version":
            request.model_spec.version.value = value
        else:
            setattr(request.model_spec, key, value)
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def rpc_error(call, request) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        call(request, timeout=30)
    return caught.value


def test_predict_matches_in_process(predictions, fixture_servable):
    sentences = ["ein kleiner hund", "ja"]
    response = predictions.Predict(predict_request({"text": sentences}), timeout=30)
    expected = fixture_servable.signatures["serving_default"](text=tf.constant(sentences))
    assert set(response.outputs) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(tf.make_ndarray(response.outputs[name]), value.numpy())
    # Typed value fields (TF Serving's default), and the resolved spec echoed back.
    assert list(response.outputs["score"].float_val) == [1.5, 0.5]
    assert response.model_spec.signature_name == "serving_default"
    assert response.model_spec.version.value == 1


def test_output_filter_version_and_label(predictions):
    request = predict_request({"text": ["a b"]}, version=1)
    request.output_filter.append("translation")
    response = predictions.Predict(request, timeout=30)
    assert list(response.outputs) == ["translation"]
    labelled = predictions.Predict(
        predict_request({"token_ids": np.array([[1, 2]], np.int32)}, "ids",
                        version_label="stable"), timeout=30)
    assert tf.make_ndarray(labelled.outputs["output_0"]).tolist() == [3.0]


def test_error_codes(predictions):
    assert rpc_error(predictions.Predict, predict_request({"text": ["a"]}, model="nope")
                     ).code() == grpc.StatusCode.NOT_FOUND
    assert rpc_error(predictions.Predict, predict_request({"text": ["a"]}, version=4)
                     ).code() == grpc.StatusCode.NOT_FOUND
    label = rpc_error(predictions.Predict, predict_request({"text": ["a"]}, version_label="x"))
    assert label.code() == grpc.StatusCode.INVALID_ARGUMENT
    signature = rpc_error(predictions.Predict, predict_request({"text": ["a"]}, "missing"))
    assert signature.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert signature.details() == 'Serving signature key "missing" not found.'
    extra = rpc_error(predictions.Predict, predict_request({"text": ["a"], "x": [1]}))
    assert extra.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "input size does not match signature" in extra.details()
    dtype = rpc_error(predictions.Predict, predict_request({"text": [1.0]}))
    assert dtype.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert dtype.details() == "Expects arg[0] to be string but float is provided"
    bad_filter = predict_request({"text": ["a"]})
    bad_filter.output_filter.append("nope")
    assert rpc_error(predictions.Predict, bad_filter).code() == grpc.StatusCode.INVALID_ARGUMENT
    no_spec = predict_pb2.PredictRequest()
    assert rpc_error(predictions.Predict, no_spec).details() == "Missing ModelSpec"


def test_metadata(predictions):
    request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
    request.model_spec.name = "translator"
    response = predictions.GetModelMetadata(request, timeout=30)
    assert response.model_spec.version.value == 1
    signature_defs = get_model_metadata_pb2.SignatureDefMap()
    assert response.metadata["signature_def"].Unpack(signature_defs)
    assert signature_defs.signature_def["serving_default"].inputs["text"].dtype == tf.string
    del request.metadata_field[:]
    assert "at least one metadata_field" in rpc_error(
        predictions.GetModelMetadata, request).details()


def test_model_status(channel):
    models = model_service_pb2_grpc.ModelServiceStub(channel)
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "translator"
    (status,) = models.GetModelStatus(request, timeout=30).model_version_status
    assert (status.version, status.state) == (1, get_model_status_pb2.ModelVersionStatus.AVAILABLE)
    request.model_spec.name = "nope"
    assert rpc_error(models.GetModelStatus, request).code() == grpc.StatusCode.NOT_FOUND


def test_classify_and_regress(predictions):
    def examples(request, values):
        for value in values:
            example = example_pb2.Example()
            example.features.feature["x"].float_list.value.append(value)
            request.input.example_list.examples.append(example)
        return request

    classify = classification_pb2.ClassificationRequest()
    classify.model_spec.name, classify.model_spec.signature_name = "translator", "classify"
    result = predictions.Classify(examples(classify, [0.0]), timeout=30).result
    assert [(c.label, pytest.approx(c.score)) for c in result.classifications[0].classes] == [
        ("neg", 0.5), ("pos", 0.5)
    ]
    regress = regression_pb2.RegressionRequest()
    regress.model_spec.name, regress.model_spec.signature_name = "translator", "regress"
    result = predictions.Regress(examples(regress, [1.0, 2.0]), timeout=30).result
    assert [r.value for r in result.regressions] == [2.0, 4.0]
    regress.model_spec.signature_name = ""
    assert rpc_error(predictions.Regress, regress).code() == grpc.StatusCode.INVALID_ARGUMENT


def test_tensor_proto_uses_typed_fields():
    proto = tensor_proto(np.array([[1, 2]], np.int64))
    assert list(proto.int64_val) == [1, 2] and not proto.tensor_content
    assert [d.size for d in proto.tensor_shape.dim] == [1, 2]
    strings = tensor_proto(np.array([b"a", b"b"], dtype=object))
    assert list(strings.string_val) == [b"a", b"b"]
    np.testing.assert_array_equal(tf.make_ndarray(tensor_proto(np.ones(3, np.float16))),
                                  np.ones(3, np.float16))


def string_request(dims: list[int], values: list[bytes]) -> predict_pb2.PredictRequest:
    """A Predict request whose `text` tensor states `dims` but carries only `values`."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "translator"
    proto = request.inputs["text"]
    proto.dtype = tf.string.as_datatype_enum
    for size in dims:
        proto.tensor_shape.dim.add(size=size)
    proto.string_val.extend(values)
    return request


def test_shapes_filled_by_repeating_a_value_are_bounded(predictions):
    # TF fills a TensorProto with fewer values than its shape by repeating the last one. Kept:
    response = predictions.Predict(string_request([3], [b"a b"]), timeout=30)
    assert list(response.outputs["translation"].string_val) == [b"b a v1"] * 3
    # but 2**40 elements from one value used to be built in memory (the server hung or was
    # killed); a negative size is no shape at all. Both are refused, and the server stays up.
    huge = rpc_error(predictions.Predict, string_request([1 << 40], [b"a"]))
    assert huge.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "1099511627776 elements; this server builds at most 200000" in huge.details()
    negative = rpc_error(predictions.Predict, string_request([-7], [b"a"]))
    assert negative.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert negative.details() == "tensor parsing error: text has a negative dimension [-7]"
    assert predictions.Predict(string_request([1], [b"a b"]), timeout=30).outputs


def test_undecodable_requests_are_invalid_argument(channel, predictions):
    # Raw bytes, as a client in another language could send them. grpc answers UNKNOWN (a
    # server error) when the request does not parse; it is the client's fault.
    send = channel.unary_unary("/tensorflow.serving.PredictionService/Predict")
    spec = b"\n\x0ctranslator\xff\xfe"  # ModelSpec.name: not UTF-8, which proto3 refuses
    for body in (b"\n" + bytes([len(spec)]) + spec, b"\xff\xff\xff\xff"):
        error = rpc_error(send, body)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
        assert error.details().startswith("Could not parse the request: ")
    assert predictions.Predict(string_request([1], [b"a b"]), timeout=30).outputs
