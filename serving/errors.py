"""Errors as data: a status code plus a message, mapped to HTTP and gRPC like TF Serving."""

from __future__ import annotations

import grpc

# TF Serving's ToHTTPStatusCode(): the REST status for each canonical error code.
_HTTP_STATUS = {
    "OK": 200,
    "CANCELLED": 499,
    "UNKNOWN": 500,
    "INVALID_ARGUMENT": 400,
    "DEADLINE_EXCEEDED": 504,
    "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409,
    "PERMISSION_DENIED": 403,
    "RESOURCE_EXHAUSTED": 429,
    "FAILED_PRECONDITION": 400,
    "ABORTED": 409,
    "OUT_OF_RANGE": 400,
    "UNIMPLEMENTED": 501,
    "INTERNAL": 500,
    "UNAVAILABLE": 503,
    "DATA_LOSS": 500,
    "UNAUTHENTICATED": 401,
}


def http_status(code: str) -> int:
    """The REST status TF Serving answers for a canonical code name (`"NOT_FOUND"` -> 404)."""
    return _HTTP_STATUS[code]


class ServingError(Exception):
    """A request failure with a canonical status code (the names of `tensorflow.error.Code`).

    Args:
        code: canonical code name, e.g. `"INVALID_ARGUMENT"` or `"NOT_FOUND"`.
        message: the bare message clients see (REST `{"error": message}`, gRPC details).
    """

    def __init__(self, code: str, message: str):
        if code not in _HTTP_STATUS or code == "OK":
            raise ValueError(f"Not an error code: {code!r}")
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def http_status(self) -> int:
        return http_status(self.code)

    @property
    def grpc_status(self) -> grpc.StatusCode:
        return grpc.StatusCode[self.code]


def invalid_argument(message: str) -> ServingError:
    return ServingError("INVALID_ARGUMENT", message)


def not_found(message: str) -> ServingError:
    return ServingError("NOT_FOUND", message)


def from_exception(error: BaseException) -> ServingError:
    """Turns whatever running a model raised into a `ServingError`.

    TensorFlow runtime errors keep their canonical code (most are INVALID_ARGUMENT, i.e. 400).
    The Python-side checks of a concrete function (wrong dtype or shape for a `TensorSpec`) raise
    `TypeError` / `ValueError`, which are the caller's fault: INVALID_ARGUMENT as well.
    """
    if isinstance(error, ServingError):
        return error
    code_value = getattr(error, "error_code", None)
    if isinstance(code_value, int):
        from tensorflow.core.protobuf import error_codes_pb2

        code = error_codes_pb2.Code.Name(code_value)
        message = getattr(error, "message", str(error))
        return ServingError(code if code != "OK" else "UNKNOWN", message)
    if isinstance(error, (TypeError, ValueError)):
        return invalid_argument(str(error))
    return ServingError("INTERNAL", f"{type(error).__name__}: {error}")
