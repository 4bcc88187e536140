"""Input-set checks with TF Serving's message."""

import pytest

from serving.errors import ServingError
from serving.signatures import Signature, TensorInfo, check_inputs

SIGNATURE = Signature(
    "s", "tensorflow/serving/predict",
    {"a": TensorInfo("DT_FLOAT", (-1,)), "b": TensorInfo("DT_INT64", None)}, {},
)


def test_matching_inputs_pass():
    check_inputs(SIGNATURE, ["b", "a"])


def test_mismatch_names_extra_and_missing():
    with pytest.raises(ServingError) as caught:
        check_inputs(SIGNATURE, ["a", "c"])
    assert caught.value.code == "INVALID_ARGUMENT"
    assert caught.value.message == (
        "input size does not match signature: 2!=2 len({a,c}) != len({a,b}). "
        "Sent extra: {c}. Missing but required: {b}."
    )
