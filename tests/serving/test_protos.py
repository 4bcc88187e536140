"""The rebuilt BatchingParameters / MonitoringConfig protos match TF Serving's wire format."""

from google.protobuf import text_format

from serving.protos import BatchingParameters, MonitoringConfig


def test_batching_parameters_field_numbers_and_wrappers():
    params = text_format.Parse(
        """
        max_batch_size { value: 128 }
        batch_timeout_micros { value: 5000 }
        max_enqueued_batches { value: 7 }
        num_batch_threads { value: 2 }
        thread_pool_name { value: "pool" }
        allowed_batch_sizes: 64
        allowed_batch_sizes: 128
        pad_variable_length_inputs: true
        enable_large_batch_splitting { value: true }
        max_execution_batch_size { value: 64 }
        """,
        BatchingParameters(),
    )
    assert params.DESCRIPTOR.full_name == "tensorflow.serving.BatchingParameters"
    numbers = {f.name: f.number for f in params.DESCRIPTOR.fields}
    assert numbers == {
        "max_batch_size": 1, "batch_timeout_micros": 2, "max_enqueued_batches": 3,
        "num_batch_threads": 4, "thread_pool_name": 5, "allowed_batch_sizes": 6,
        "pad_variable_length_inputs": 7, "enable_large_batch_splitting": 8,
        "max_execution_batch_size": 9,
    }
    # Field 1, length-delimited Int64Value{value: 128}: the bytes upstream protoc produces.
    assert BatchingParameters(max_batch_size=params.max_batch_size).SerializeToString() == (
        b"\x0a\x03\x08\x80\x01"
    )
    assert not BatchingParameters().HasField("max_batch_size")
    assert list(params.allowed_batch_sizes) == [64, 128] and params.pad_variable_length_inputs


def test_monitoring_config():
    config = text_format.Parse(
        'prometheus_config { enable: true, path: "/metrics" }', MonitoringConfig()
    )
    assert config.prometheus_config.enable and config.prometheus_config.path == "/metrics"
    assert config.SerializeToString() == b"\x0a\x0c\x08\x01\x12\x08/metrics"
