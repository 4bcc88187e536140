"""TF Serving's metrics, exported in the Prometheus text format of its `PrometheusExporter`.

Names are the TensorFlow metric names with every character outside `[a-zA-Z0-9_]` turned into
`:` (`/tensorflow/serving/request_count` -> `:tensorflow:serving:request_count`); histograms
use TF's bucket limits and are in microseconds where TF's are.
"""

from __future__ import annotations

import re
import sys
import threading


def exponential_buckets(scale: float, growth: float, count: int) -> tuple[float, ...]:
    """TF's `Buckets::Exponential`: `count` limits `scale * growth**i`, then an open last one."""
    return (*(scale * growth**i for i in range(count)), sys.float_info.max)


def prometheus_name(name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", ":", name)


def _labels(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    def escape(value: str) -> str:
        return value.replace("\\", "\\\\").replace('"', '\\"')

    return ",".join(f'{name}="{escape(value)}"' for name, value in zip(names, values, strict=True))


class Counter:
    """A cumulative count per label combination."""

    def __init__(self, name: str, *label_names: str):
        self.name = prometheus_name(name)
        self.label_names = label_names
        self._values: dict[tuple[str, ...], int] = {}
        self._lock = threading.Lock()

    def increment(self, *labels: str, by: int = 1) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0) + by

    def value(self, *labels: str) -> int:
        with self._lock:
            return self._values.get(labels, 0)

    def render(self) -> list[str]:
        with self._lock:
            items = sorted(self._values.items())
        lines = [f"# TYPE {self.name} counter"]
        lines += [f"{self.name}{{{_labels(self.label_names, k)}}} {v}" for k, v in items]
        return lines


class Histogram:
    """A distribution per label combination; bucket `i` counts values in
    `[limit[i-1], limit[i])`, like TensorFlow's `Histogram`."""

    def __init__(self, name: str, buckets: tuple[float, ...], *label_names: str):
        self.name = prometheus_name(name)
        self.buckets = buckets
        self.label_names = label_names
        self._points: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}
        self._lock = threading.Lock()

    def observe(self, value: float, *labels: str) -> None:
        index = next(
            (i for i, limit in enumerate(self.buckets) if value < limit), len(self.buckets) - 1
        )
        with self._lock:
            counts, total = self._points.setdefault(labels, ([0] * len(self.buckets), [0.0]))
            counts[index] += 1
            total[0] += value

    def count(self, *labels: str) -> int:
        """How many values were observed (for tests and benchmarks)."""
        with self._lock:
            counts, _ = self._points.get(labels, ([0], [0.0]))
            return sum(counts)

    def render(self) -> list[str]:
        with self._lock:
            points = sorted((k, (list(c), t[0])) for k, (c, t) in self._points.items())
        lines = [f"# TYPE {self.name} histogram"]
        for labels, (counts, total) in points:
            text = _labels(self.label_names, labels)
            prefix = f"{self.name}_bucket{{{text}{',' if text else ''}"
            cumulative = 0
            for i, (limit, count) in enumerate(zip(self.buckets, counts, strict=True)):
                cumulative += count
                bound = "+Inf" if i == len(self.buckets) - 1 else f"{limit:.6g}"
                lines.append(f'{prefix}le="{bound}"}} {cumulative}')
            lines.append(f"{self.name}_sum{{{text}}} {total:.6g}")
            lines.append(f"{self.name}_count{{{text}}} {cumulative}")
        return lines


class ServingMetrics:
    """The metrics the server records (those of TF Serving that apply here)."""

    def __init__(self):
        latency = exponential_buckets(10, 1.8, 33)  # microseconds, up to ~20 minutes
        sizes = exponential_buckets(1, 2, 14)
        self.request_count = Counter(
            "/tensorflow/serving/request_count", "model_name", "status"
        )
        self.request_latency = Histogram(
            "/tensorflow/serving/request_latency", latency, "model_name", "API", "entrypoint"
        )
        self.runtime_latency = Histogram(
            "/tensorflow/serving/runtime_latency", latency, "model_name", "API", "runtime"
        )
        self.example_counts = Histogram(
            "/tensorflow/serving/request_example_counts", exponential_buckets(1, 2, 15), "model"
        )
        self.input_batch_size = Histogram(
            "/tensorflow/serving/batching_session/input_batch_size", sizes
        )
        self.processed_batch_size = Histogram(
            "/tensorflow/serving/batching_session/processed_batch_size", sizes
        )
        self.padding_size = Histogram(
            "/tensorflow/serving/batching_session/padding_size", sizes, "execution_batch_size"
        )

    def render(self) -> str:
        """The Prometheus text page."""
        metrics = (
            self.example_counts,
            self.input_batch_size,
            self.padding_size,
            self.processed_batch_size,
            self.request_count,
            self.request_latency,
            self.runtime_latency,
        )
        return "\n".join(line for metric in metrics for line in metric.render()) + "\n"
