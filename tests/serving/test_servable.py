"""Loading a SavedModel version: signatures, metadata, running, warmup."""

import shutil

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_log_pb2

from serving.errors import ServingError
from serving.servable import WARMUP_FILE, Servable, load_servable


@pytest.fixture(scope="module")
def servable(fixture_models):
    return Servable("translator", 1, str(fixture_models / "translator" / "1"))


def test_signatures_and_metadata(servable):
    assert set(servable.signature_defs.signature_def) == {
        "serving_default", "typed", "ids", "classify", "regress", "__saved_model_init_op"
    }
    default = servable.signature("")
    assert default.name == "serving_default"
    assert default.method_name == "tensorflow/serving/predict"
    assert default.inputs["text"].dtype == "DT_STRING" and default.inputs["text"].shape == (-1,)
    assert set(default.outputs) == {"translation", "score", "tokens"}
    assert default.outputs["tokens"].dtype == "DT_INT64"
    with pytest.raises(ServingError) as missing:
        servable.signature("nope")
    assert missing.value.code == "FAILED_PRECONDITION"
    assert missing.value.message == 'Serving signature key "nope" not found.'


def test_run_matches_the_saved_model_called_in_process(servable, fixture_servable):
    text = np.array([b"ein kleiner hund", b"ja"], dtype=object)
    outputs = servable.run("serving_default", {"text": text})
    expected = fixture_servable.signatures["serving_default"](text=tf.constant(text))
    assert set(outputs) == set(expected)
    for name, value in expected.items():
        np.testing.assert_array_equal(outputs[name], value.numpy())
    assert outputs["translation"].tolist() == [b"hund kleiner ein v1", b"ja v1"]


def test_bad_inputs_are_invalid_argument(servable):
    with pytest.raises(ServingError) as rank:
        servable.run("ids", {"token_ids": np.ones((2,), np.int32)})
    assert rank.value.code == "INVALID_ARGUMENT"
    with pytest.raises(ServingError) as dtype:
        servable.run("ids", {"token_ids": np.array([["a"]], dtype=object)})
    assert dtype.value.code == "INVALID_ARGUMENT"


def write_warmup(path, requests):
    (path / "assets.extra").mkdir()
    with tf.io.TFRecordWriter(str(path / WARMUP_FILE)) as writer:
        for inputs in requests:
            request = predict_pb2.PredictRequest()
            request.model_spec.signature_name = "ids"
            for name, value in inputs.items():
                request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
            log = prediction_log_pb2.PredictionLog()
            log.predict_log.request.CopyFrom(request)
            writer.write(log.SerializeToString())


def test_warmup_requests_are_replayed_and_failures_fail_the_load(fixture_models, tmp_path):
    good = tmp_path / "good"
    shutil.copytree(fixture_models / "translator" / "1", good)
    write_warmup(good, [{"token_ids": np.ones((1, 3), np.int32)}] * 2)
    assert load_servable("m", 1, str(good)).warm_up() == 2
    bad = tmp_path / "bad"
    shutil.copytree(fixture_models / "translator" / "1", bad)
    write_warmup(bad, [{"wrong_name": np.ones((1, 3), np.int32)}])
    with pytest.raises(ServingError, match="input size does not match signature"):
        load_servable("m", 1, str(bad))
    assert load_servable("m", 1, str(bad), warmup=False).version == 1


def test_missing_saved_model_is_an_error(tmp_path):
    with pytest.raises(tf.errors.NotFoundError):
        Servable("m", 1, str(tmp_path))
