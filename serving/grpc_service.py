"""gRPC services on grpc.aio with tensorflow-serving-api's generated stubs:
`tensorflow.serving.PredictionService` (Predict, GetModelMetadata, Classify, Regress) and
`tensorflow.serving.ModelService` (GetModelStatus, HandleReloadConfigRequest)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.framework import tensor_pb2, types_pb2
from tensorflow.core.protobuf import error_codes_pb2
from tensorflow_serving.apis import (
    classification_pb2,
    get_model_metadata_pb2,
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
    predict_pb2,
    prediction_service_pb2_grpc,
    regression_pb2,
)

from serving import examples
from serving.errors import ServingError, from_exception, invalid_argument
from serving.flags import check_model_config
from serving.prediction import Predictor

_MAX_MESSAGE = 1024
# numpy dtype -> (DataType, typed TensorProto field) as TF Serving fills them by default.
_TYPED_FIELDS = {
    np.dtype(np.float32): (types_pb2.DT_FLOAT, "float_val"),
    np.dtype(np.float64): (types_pb2.DT_DOUBLE, "double_val"),
    np.dtype(np.int32): (types_pb2.DT_INT32, "int_val"),
    np.dtype(np.int16): (types_pb2.DT_INT16, "int_val"),
    np.dtype(np.int8): (types_pb2.DT_INT8, "int_val"),
    np.dtype(np.uint8): (types_pb2.DT_UINT8, "int_val"),
    np.dtype(np.int64): (types_pb2.DT_INT64, "int64_val"),
    np.dtype(np.uint32): (types_pb2.DT_UINT32, "uint32_val"),
    np.dtype(np.uint64): (types_pb2.DT_UINT64, "uint64_val"),
    np.dtype(np.bool_): (types_pb2.DT_BOOL, "bool_val"),
    np.dtype(object): (types_pb2.DT_STRING, "string_val"),
}


def tensor_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """A TensorProto with the values in the typed `*_val` field (TF Serving's default)."""
    if array.dtype not in _TYPED_FIELDS:
        return tf.make_tensor_proto(array)
    dtype, field = _TYPED_FIELDS[array.dtype]
    proto = tensor_pb2.TensorProto(dtype=dtype)
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    getattr(proto, field).extend(array.ravel().tolist())
    return proto


def tensor_from_proto(alias: str, proto: tensor_pb2.TensorProto, max_elements: int) -> np.ndarray:
    """`tf.make_ndarray` for a request tensor, refusing shapes it cannot or must not build.

    A TensorProto may hold fewer values than its shape has elements (TF repeats the last one),
    so a few bytes can ask for any size: more than `max_elements` elements, or a negative size,
    is INVALID_ARGUMENT before anything is allocated.
    """
    dims = [dim.size for dim in proto.tensor_shape.dim]
    if any(size < 0 for size in dims):
        raise invalid_argument(f"tensor parsing error: {alias} has a negative dimension {dims}")
    elements = math.prod(dims)
    if elements > max_elements:
        raise invalid_argument(
            f"tensor parsing error: {alias} has shape {dims}, {elements} elements; this server "
            f"builds at most {max_elements} elements per input tensor"
        )
    return tf.make_ndarray(proto)


def _model_spec(request) -> tuple[str, int | None, str | None]:
    if not request.HasField("model_spec"):
        raise invalid_argument("Missing ModelSpec")
    spec = request.model_spec
    choice = spec.WhichOneof("version_choice")
    version = spec.version.value if choice == "version" else None
    label = spec.version_label if choice == "version_label" else None
    return spec.name, version, label


def _echo_spec(spec, servable, signature: str | None = None) -> None:
    """The model spec a response reports: the resolved version and signature."""
    spec.name = servable.name
    spec.version.value = servable.version
    if signature is not None:
        spec.signature_name = signature


def _message(error: ServingError) -> str:
    if len(error.message) <= _MAX_MESSAGE:
        return error.message
    return error.message[:_MAX_MESSAGE] + "...TRUNCATED"


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    """Predict / GetModelMetadata / Classify / Regress over gRPC.

    Args:
        predictor: runs requests and holds the metrics.
        max_elements: the most elements one request tensor may have (see `tensor_from_proto`).
    """

    def __init__(self, predictor: Predictor, max_elements: int):
        self._predictor = predictor
        self._max_elements = max_elements

    async def _call(self, api: str, request, context, work: Callable[[], Awaitable[Any]]):
        start, error = time.perf_counter(), None
        model = request.model_spec.name
        try:
            return await work()
        except Exception as exception:  # every failure becomes a status, never a crash
            error = from_exception(exception)
            await context.abort(error.grpc_status, _message(error))
        finally:
            self._predictor.record(model, api, "GRPC", error, time.perf_counter() - start)

    async def Predict(self, request: predict_pb2.PredictRequest, context):
        async def work():
            name, version, label = _model_spec(request)
            servable = self._predictor.servable(name, version, label)
            signature = servable.signature(request.model_spec.signature_name)
            inputs = {}
            for index, (alias, proto) in enumerate(sorted(request.inputs.items())):
                expected = signature.inputs.get(alias)
                if expected is not None and types_pb2.DataType.Name(proto.dtype) != expected.dtype:
                    raise invalid_argument(
                        f"Expects arg[{index}] to be {expected.dtype[3:].lower()} but "
                        f"{types_pb2.DataType.Name(proto.dtype)[3:].lower()} is provided"
                    )
                inputs[alias] = tensor_from_proto(alias, proto, self._max_elements)
            wanted = list(request.output_filter)
            for alias in wanted:
                if alias not in signature.outputs:
                    raise invalid_argument(
                        f"output tensor alias not found in signature: {alias} Outputs expected "
                        f"to be in the set {{{','.join(sorted(signature.outputs))}}}."
                    )
            if len(set(wanted)) != len(wanted):
                raise invalid_argument("duplicate output tensor alias in output_filter")
            outputs = await self._predictor.run(servable, signature.name, inputs, "Predict")
            response = predict_pb2.PredictResponse()
            for alias, array in outputs.items():
                if not wanted or alias in wanted:
                    response.outputs[alias].CopyFrom(tensor_proto(array))
            _echo_spec(response.model_spec, servable, signature.name)
            return response

        return await self._call("Predict", request, context, work)

    async def GetModelMetadata(self, request, context):
        async def work():
            if not request.metadata_field:
                raise invalid_argument(
                    "GetModelMetadataRequest must specify at least one metadata_field"
                )
            for field in request.metadata_field:
                if field != "signature_def":
                    raise invalid_argument(f"Metadata field {field} is not supported")
            name, version, label = _model_spec(request)
            servable = self._predictor.servable(name, version, label)
            response = get_model_metadata_pb2.GetModelMetadataResponse()
            _echo_spec(response.model_spec, servable)
            response.metadata["signature_def"].Pack(servable.signature_defs)
            return response

        return await self._call("GetModelMetadata", request, context, work)

    async def _examples(self, request, api: str) -> tuple[Any, Any, list]:
        name, version, label = _model_spec(request)
        servable = self._predictor.servable(name, version, label)
        signature = servable.signature(request.model_spec.signature_name)
        serialized = examples.examples_from_input(request.input)
        results = await examples.run(self._predictor, servable, signature, serialized, api)
        return servable, signature, results

    async def Classify(self, request, context):
        async def work():
            servable, signature, results = await self._examples(request, "classify")
            response = classification_pb2.ClassificationResponse()
            for row in results:
                classes = response.result.classifications.add()
                for label, score in row:
                    classes.classes.add(label=label, score=score)
            _echo_spec(response.model_spec, servable, signature.name)
            return response

        return await self._call("Classify", request, context, work)

    async def Regress(self, request, context):
        async def work():
            servable, signature, results = await self._examples(request, "regress")
            response = regression_pb2.RegressionResponse()
            for value in results:
                response.result.regressions.add(value=value)
            _echo_spec(response.model_spec, servable, signature.name)
            return response

        return await self._call("Regress", request, context, work)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    """GetModelStatus and HandleReloadConfigRequest over gRPC."""

    def __init__(self, predictor: Predictor):
        self._manager = predictor.manager

    async def GetModelStatus(self, request: get_model_status_pb2.GetModelStatusRequest, context):
        try:
            name, version, _ = _model_spec(request)  # a label does not narrow the status
            return self._manager.status(name, version)
        except ServingError as error:
            await context.abort(error.grpc_status, _message(error))

    async def HandleReloadConfigRequest(self, request, context):
        response = model_management_pb2.ReloadConfigResponse()
        try:
            check_model_config(request.config)
            await asyncio.get_running_loop().run_in_executor(
                None, self._manager.reload_config, request.config
            )
        except Exception as exception:  # reported in the response status, as TF Serving does
            error = from_exception(exception)
            response.status.error_code = error_codes_pb2.Code.Value(error.code)
            response.status.error_message = error.message
        return response


@dataclasses.dataclass(frozen=True)
class _Unparsable:
    """Request bytes that are not a valid message (e.g. a string field that is not UTF-8)."""

    error: str


def _parse_failures_are_invalid_argument(
    handler: grpc.RpcMethodHandler,
) -> grpc.RpcMethodHandler:
    """A unary handler that answers INVALID_ARGUMENT to undecodable bytes (grpc's own answer
    is UNKNOWN, i.e. a server error, with a traceback in the log)."""
    parse, behaviour = handler.request_deserializer, handler.unary_unary

    def deserialize(data: bytes):
        try:
            return parse(data)
        except DecodeError as error:
            return _Unparsable(str(error))

    async def run(request, context):
        if isinstance(request, _Unparsable):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"Could not parse the request: {request.error}"
            )
        return await behaviour(request, context)

    return grpc.unary_unary_rpc_method_handler(run, deserialize, handler.response_serializer)


class _TolerantHandlers(grpc.GenericRpcHandler):
    """Serves a generated service's handlers with `_parse_failures_are_invalid_argument`."""

    def __init__(self, handlers: grpc.GenericRpcHandler):
        self._handlers = handlers
        self._wrapped: dict[str, grpc.RpcMethodHandler] = {}

    def service(self, handler_call_details):
        method = handler_call_details.method
        if method not in self._wrapped:
            handler = self._handlers.service(handler_call_details)
            if handler is None:
                return None
            self._wrapped[method] = _parse_failures_are_invalid_argument(handler)
        return self._wrapped[method]


class _Registrar:
    """What the generated `add_*Servicer_to_server` functions call, wrapping their handlers."""

    def __init__(self, server: grpc.aio.Server):
        self._server = server

    def add_generic_rpc_handlers(self, handlers) -> None:
        self._server.add_generic_rpc_handlers(tuple(_TolerantHandlers(h) for h in handlers))


def add_services(server: grpc.aio.Server, predictor: Predictor, max_request_bytes: int) -> None:
    """Adds both services; a request tensor may have as many elements as a request has bytes."""
    registrar = _Registrar(server)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(predictor, max_request_bytes), registrar
    )
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(predictor), registrar)
