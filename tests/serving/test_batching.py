"""Dynamic batching: merging, limits, padding and splitting, with a numpy stand-in model."""

import asyncio
import threading
import time

import numpy as np
import pytest

from serving.batching import Batcher, BatchOptions, batch_size, merge_inputs, split_outputs
from serving.errors import ServingError
from serving.monitoring import ServingMetrics
from serving.protos import BatchingParameters


class RecordingModel:
    """`y = 2x + row sum`; records the batch sizes it was called with."""

    def __init__(self, delay: float = 0.0, fail: bool = False):
        self.batches: list[tuple[int, ...]] = []
        self.delay = delay
        self.fail = fail
        self.lock = threading.Lock()

    def __call__(self, servable, signature, inputs, api):
        x = inputs["x"]
        with self.lock:
            self.batches.append(x.shape)
        time.sleep(self.delay)
        if self.fail:
            raise ValueError("model exploded")
        return {"y": 2 * x + x.sum(axis=1, keepdims=True)}


def reference(x: np.ndarray) -> np.ndarray:
    return 2 * x + x.sum(axis=1, keepdims=True)


def run_all(options: BatchOptions, model: RecordingModel, requests: list[np.ndarray]):
    metrics = ServingMetrics()

    async def main():
        batcher = Batcher(options, model, metrics)
        try:
            return await asyncio.gather(
                *(batcher.run("servable", "sig", {"x": x}, "Predict") for x in requests),
                return_exceptions=True,
            )
        finally:
            batcher.close()

    return asyncio.run(main()), metrics


def test_concurrent_requests_are_merged_and_answers_unchanged():
    requests = [np.full((1, 3), i, np.float32) for i in range(6)]
    model = RecordingModel(delay=0.05)
    options = BatchOptions(max_batch_size=8, batch_timeout_micros=200_000, num_batch_threads=1)
    results, metrics = run_all(options, model, requests)
    assert model.batches == [(6, 3)]
    for x, result in zip(requests, results, strict=True):
        np.testing.assert_array_equal(result["y"], reference(x))
    assert metrics.processed_batch_size.count() == 1
    assert metrics.input_batch_size.count() == 6


def test_batches_never_exceed_max_batch_size():
    requests = [np.ones((2, 1), np.float32) * i for i in range(5)]
    model = RecordingModel()
    options = BatchOptions(max_batch_size=4, batch_timeout_micros=100_000, num_batch_threads=1)
    results, _ = run_all(options, model, requests)
    assert max(shape[0] for shape in model.batches) <= 4
    assert sum(shape[0] for shape in model.batches) == 10
    for x, result in zip(requests, results, strict=True):
        np.testing.assert_array_equal(result["y"], reference(x))


def test_without_padding_different_shapes_are_batched_apart():
    requests = [np.ones((1, 2), np.float32), np.ones((1, 3), np.float32)]
    model = RecordingModel()
    options = BatchOptions(batch_timeout_micros=50_000, num_batch_threads=1)
    results, _ = run_all(options, model, requests)
    assert sorted(model.batches) == [(1, 2), (1, 3)]
    assert [r["y"].shape for r in results] == [(1, 2), (1, 3)]


def test_pad_variable_length_inputs_uses_first_element_like_tf_serving():
    requests = [np.array([[7, 1]], np.float32), np.array([[5, 1, 1, 1]], np.float32)]
    model = RecordingModel()
    options = BatchOptions(
        batch_timeout_micros=100_000, num_batch_threads=1, pad_variable_length_inputs=True
    )
    results, _ = run_all(options, model, requests)
    assert model.batches == [(2, 4)]
    # The short row was padded with its first element (7), as TF Serving's AddPadding does.
    np.testing.assert_array_equal(results[0]["y"], reference(np.array([[7, 1, 7, 7]], np.float32)))
    np.testing.assert_array_equal(results[1]["y"], reference(requests[1]))


def test_allowed_batch_sizes_pad_with_a_real_row_and_drop_it():
    merged, padding = merge_inputs(
        [{"x": np.array([[1.0]])}, {"x": np.array([[2.0], [3.0]])}], False, (4, 8)
    )
    assert padding == 1
    np.testing.assert_array_equal(merged["x"][:, 0], [1, 2, 3, 2])
    parts = split_outputs({"y": merged["x"] * 10}, [1, 2], padding)
    np.testing.assert_array_equal(parts[1]["y"][:, 0], [20, 30])
    with pytest.raises(ServingError, match="0th dimension does not equal"):
        split_outputs({"y": np.ones((3, 1))}, [1, 2], padding)


def test_oversized_requests_are_rejected_or_split():
    big = np.arange(10, dtype=np.float32).reshape(5, 2)
    results, _ = run_all(BatchOptions(max_batch_size=4), RecordingModel(), [big])
    assert isinstance(results[0], ServingError)
    assert results[0].message == "Task size 5 is larger than maximum input batch size 4"

    model = RecordingModel()
    options = BatchOptions(
        max_batch_size=8, enable_large_batch_splitting=True, max_execution_batch_size=2,
        num_batch_threads=2,
    )
    results, _ = run_all(options, model, [big])
    assert sorted(shape[0] for shape in model.batches) == [1, 2, 2]
    np.testing.assert_array_equal(results[0]["y"], reference(big))


def test_a_failing_batch_fails_each_request_with_a_status():
    results, _ = run_all(
        BatchOptions(batch_timeout_micros=50_000), RecordingModel(fail=True),
        [np.ones((1, 1), np.float32)] * 2,
    )
    assert all(isinstance(r, ServingError) and r.code == "INVALID_ARGUMENT" for r in results)


def test_full_queue_answers_unavailable():
    options = BatchOptions(
        max_batch_size=1, max_enqueued_batches=1, num_batch_threads=1, batch_timeout_micros=0
    )
    results, _ = run_all(options, RecordingModel(delay=0.1), [np.ones((1, 1))] * 3)
    # One batch may wait in the queue; the others find it full (TF: max_enqueued_batches).
    codes = [r.code if isinstance(r, ServingError) else "OK" for r in results]
    assert codes == ["OK", "UNAVAILABLE", "UNAVAILABLE"]


def test_options_from_proto():
    assert BatchOptions.from_proto(BatchingParameters()) == BatchOptions()
    params = BatchingParameters(allowed_batch_sizes=[8, 32], pad_variable_length_inputs=True)
    params.max_batch_size.value = 32
    params.batch_timeout_micros.value = 1000
    options = BatchOptions.from_proto(params)
    assert (options.max_batch_size, options.execution_batch_size) == (32, 32)
    assert options.batch_timeout_micros == 1000 and options.pad_variable_length_inputs
    params.allowed_batch_sizes[:] = [8, 16]
    with pytest.raises(ValueError, match="must equal max_batch_size"):
        BatchOptions.from_proto(params)
    params.allowed_batch_sizes[:] = [16, 8, 32]
    with pytest.raises(ValueError, match="increasing"):
        BatchOptions.from_proto(params)


def test_inputs_without_a_batch_dimension_cannot_be_batched():
    # As in TF Serving: a signature with scalar inputs (e.g. a beam width) fails under batching.
    results, _ = run_all(BatchOptions(), RecordingModel(), [np.float32(3.0) * np.ones(())])
    assert results[0].code == "INVALID_ARGUMENT"
    assert results[0].message == "Batching Run() input tensors must have at least one dimension"
    with pytest.raises(ServingError, match="equal 0th-dimension size"):
        batch_size({"a": np.ones(2), "b": np.ones(3)})
