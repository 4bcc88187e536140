"""Status codes map to HTTP and gRPC as in TF Serving."""

import grpc
import pytest

from serving.errors import ServingError, from_exception, http_status


@pytest.mark.parametrize(
    ("code", "http"),
    [
        ("CANCELLED", 499), ("UNKNOWN", 500), ("INVALID_ARGUMENT", 400),
        ("DEADLINE_EXCEEDED", 504), ("NOT_FOUND", 404), ("ALREADY_EXISTS", 409),
        ("PERMISSION_DENIED", 403), ("RESOURCE_EXHAUSTED", 429), ("FAILED_PRECONDITION", 400),
        ("ABORTED", 409), ("OUT_OF_RANGE", 400), ("UNIMPLEMENTED", 501), ("INTERNAL", 500),
        ("UNAVAILABLE", 503), ("DATA_LOSS", 500), ("UNAUTHENTICATED", 401),
    ],
)
def test_http_and_grpc_mapping(code, http):
    error = ServingError(code, "m")
    assert error.http_status == http == http_status(code)
    assert error.grpc_status == getattr(grpc.StatusCode, code)


def test_ok_is_not_an_error():
    assert http_status("OK") == 200
    with pytest.raises(ValueError):
        ServingError("OK", "fine")


def test_from_exception_keeps_tensorflow_codes():
    import tensorflow as tf

    error = from_exception(tf.errors.NotFoundError(None, None, "no file"))
    assert (error.code, error.message) == ("NOT_FOUND", "no file")
    assert from_exception(TypeError("Can not cast")).code == "INVALID_ARGUMENT"
    assert from_exception(ZeroDivisionError("x")).code == "INTERNAL"
    same = ServingError("ABORTED", "a")
    assert from_exception(same) is same
