"""Prometheus text output in TF Serving's exporter format."""

import pytest

from serving.monitoring import Counter, Histogram, ServingMetrics, exponential_buckets


def test_counter_lines():
    counter = Counter("/tensorflow/serving/request_count", "model_name", "status")
    counter.increment("m", "OK")
    counter.increment("m", "OK")
    counter.increment('q"x', "NOT_FOUND")
    assert counter.render() == [
        "# TYPE :tensorflow:serving:request_count counter",
        ':tensorflow:serving:request_count{model_name="m",status="OK"} 2',
        ':tensorflow:serving:request_count{model_name="q\\"x",status="NOT_FOUND"} 1',
    ]
    assert counter.value("m", "OK") == 2


def test_histogram_buckets_are_cumulative_with_tf_bucket_semantics():
    histogram = Histogram("/a/b-c", (1.0, 2.0, 4.0, 1e300), "api")
    for value in (0.5, 1.0, 3.0, 99.0):  # 1.0 falls in [1, 2), like TF's upper_bound
        histogram.observe(value, "Predict")
    assert histogram.render() == [
        "# TYPE :a:b:c histogram",
        ':a:b:c_bucket{api="Predict",le="1"} 1',
        ':a:b:c_bucket{api="Predict",le="2"} 2',
        ':a:b:c_bucket{api="Predict",le="4"} 3',
        ':a:b:c_bucket{api="Predict",le="+Inf"} 4',
        ':a:b:c_sum{api="Predict"} 103.5',
        ':a:b:c_count{api="Predict"} 4',
    ]
    assert histogram.count("Predict") == 4 and histogram.count("Other") == 0


def test_tf_bucket_layouts_and_page():
    latency = exponential_buckets(10, 1.8, 33)
    assert len(latency) == 34 and latency[:3] == pytest.approx((10, 18, 32.4))
    metrics = ServingMetrics()
    metrics.processed_batch_size.observe(3)
    page = metrics.render()
    assert page.endswith("\n")
    assert "# TYPE :tensorflow:serving:request_latency histogram" in page
    assert ':tensorflow:serving:batching_session:processed_batch_size_bucket{le="4"} 1' in page
    assert ":tensorflow:serving:batching_session:processed_batch_size_count{} 1" in page
