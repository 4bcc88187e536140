"""The two TF Serving config protos that the `tensorflow-serving-api` wheel does not ship.

`BatchingParameters` (tensorflow_serving/servables/tensorflow/session_bundle_config.proto) and
`MonitoringConfig` (tensorflow_serving/config/monitoring_config.proto) are rebuilt here from their
field lists, with the same package, names and field numbers, so `--batching_parameters_file` and
`--monitoring_config_file` written for `tensorflow_model_server` parse unchanged with
`google.protobuf.text_format`. They live in a private descriptor pool so that they can never
clash with a real copy of those files.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

_FIELD = descriptor_pb2.FieldDescriptorProto


def _scalar(name: str, number: int, field_type: int, repeated: bool = False):
    label = _FIELD.LABEL_REPEATED if repeated else _FIELD.LABEL_OPTIONAL
    return name, number, field_type, label, None


def _message(name: str, number: int, type_name: str):
    return name, number, _FIELD.TYPE_MESSAGE, _FIELD.LABEL_OPTIONAL, type_name


# The fields of the upstream .proto files: (name, number, type, label, message type).
_INT64 = ".google.protobuf.Int64Value"
_BATCHING_FIELDS = (
    _message("max_batch_size", 1, _INT64),
    _message("batch_timeout_micros", 2, _INT64),
    _message("max_enqueued_batches", 3, _INT64),
    _message("num_batch_threads", 4, _INT64),
    _message("thread_pool_name", 5, ".google.protobuf.StringValue"),
    _scalar("allowed_batch_sizes", 6, _FIELD.TYPE_INT64, repeated=True),
    _scalar("pad_variable_length_inputs", 7, _FIELD.TYPE_BOOL),
    _message("enable_large_batch_splitting", 8, ".google.protobuf.BoolValue"),
    _message("max_execution_batch_size", 9, _INT64),
)
_PROMETHEUS_FIELDS = (
    _scalar("enable", 1, _FIELD.TYPE_BOOL),
    _scalar("path", 2, _FIELD.TYPE_STRING),
)
_MONITORING_FIELDS = (
    _message("prometheus_config", 1, ".tensorflow.serving.PrometheusConfig"),
)


def _add_message(file_proto: descriptor_pb2.FileDescriptorProto, name: str, fields) -> None:
    message = file_proto.message_type.add(name=name)
    for field_name, number, field_type, label, type_name in fields:
        field = message.field.add(name=field_name, number=number, type=field_type, label=label)
        if type_name:
            field.type_name = type_name


def _build_pool() -> descriptor_pool.DescriptorPool:
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    batching = descriptor_pb2.FileDescriptorProto(
        name="serving/batching_parameters.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    _add_message(batching, "BatchingParameters", _BATCHING_FIELDS)
    monitoring = descriptor_pb2.FileDescriptorProto(
        name="serving/monitoring_config.proto", package="tensorflow.serving", syntax="proto3"
    )
    _add_message(monitoring, "PrometheusConfig", _PROMETHEUS_FIELDS)
    _add_message(monitoring, "MonitoringConfig", _MONITORING_FIELDS)
    pool.Add(batching)
    pool.Add(monitoring)
    return pool


_POOL = _build_pool()
BatchingParameters = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("tensorflow.serving.BatchingParameters")
)
MonitoringConfig = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName("tensorflow.serving.MonitoringConfig")
)
