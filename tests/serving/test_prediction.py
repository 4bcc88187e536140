"""The shared request path: input checks, limits, direct vs batched runs, metrics."""

import asyncio
import threading

import numpy as np
import pytest

from serving.batching import BatchOptions
from serving.errors import ServingError
from serving.monitoring import ServingMetrics
from serving.prediction import Predictor
from serving.signatures import Signature, TensorInfo


class DoublingServable:
    """`y = 2 x`; records the batch sizes and threads it ran on."""

    name, version = "m", 1

    def __init__(self):
        self.batches, self.threads = [], set()

    def signature(self, name):
        return Signature("serving_default", "", {"x": TensorInfo("DT_FLOAT", (-1,))},
                         {"y": TensorInfo("DT_FLOAT", (-1,))})

    def run(self, signature, inputs):
        self.batches.append(len(inputs["x"]))
        self.threads.add(threading.current_thread().name)
        return {"y": 2 * inputs["x"]}


def run(predictor, servable, *requests):
    async def main():
        try:
            return await asyncio.gather(
                *(predictor.run(servable, "", request, "Predict") for request in requests),
                return_exceptions=True,
            )
        finally:
            predictor.close()

    return asyncio.run(main())


def test_direct_runs_on_worker_threads_and_records_runtime_latency():
    metrics, servable = ServingMetrics(), DoublingServable()
    predictor = Predictor(manager=None, metrics=metrics, num_threads=2)
    (result,) = run(predictor, servable, {"x": np.array([1.0, 2.0])})
    np.testing.assert_array_equal(result["y"], [2.0, 4.0])
    assert servable.threads and all(t.startswith("model_run") for t in servable.threads)
    assert metrics.runtime_latency.count("m", "Predict", "TF2") == 1


def test_batched_runs_merge_requests():
    servable = DoublingServable()
    predictor = Predictor(None, ServingMetrics(), BatchOptions(batch_timeout_micros=100_000))
    results = run(predictor, servable, *({"x": np.array([float(i)])} for i in range(3)))
    assert servable.batches == [3]
    assert [r["y"].tolist() for r in results] == [[0.0], [2.0], [4.0]]


def test_inputs_are_checked_before_running():
    servable = DoublingServable()
    predictor = Predictor(None, ServingMetrics(), max_instances=2)
    wrong, too_many = run(predictor, servable, {"z": np.ones(1)}, {"x": np.ones(3)})
    assert isinstance(wrong, ServingError) and "Missing but required: {x}" in wrong.message
    assert isinstance(too_many, ServingError) and "at most 2 per request" in too_many.message
    assert servable.batches == []


@pytest.mark.parametrize("error", [None, ServingError("NOT_FOUND", "x")])
def test_record_counts_status_and_latency_of_successes(error):
    metrics = ServingMetrics()
    predictor = Predictor(None, metrics)
    predictor.record("m", "predict", "REST", error, 0.002)
    predictor.close()
    assert metrics.request_count.value("m", error.code if error else "OK") == 1
    assert metrics.request_latency.count("m", "predict", "REST") == (0 if error else 1)
