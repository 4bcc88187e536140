"""The request path shared by REST and gRPC: resolve the servable, check the inputs against the
signature, run it (batched or on a worker thread) and record the metrics."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from serving.batching import Batcher, BatchOptions
from serving.errors import ServingError, invalid_argument
from serving.model_manager import ModelManager
from serving.monitoring import ServingMetrics
from serving.signatures import check_inputs

Arrays = dict[str, np.ndarray]


class Predictor:
    """Runs requests against the servables of a `ModelManager`.

    Args:
        manager: resolves model name / version / label to a servable.
        metrics: where request and runtime metrics go.
        batching: batch concurrent requests with these options (`None`: run each on its own).
        num_threads: worker threads when batching is off.
        max_instances: largest dim 0 accepted in one request.
    """

    def __init__(
        self,
        manager: ModelManager,
        metrics: ServingMetrics,
        batching: BatchOptions | None = None,
        num_threads: int = 4,
        max_instances: int = 1024,
    ):
        self.manager = manager
        self.metrics = metrics
        self._max_instances = max_instances
        self._batcher = Batcher(batching, self._execute, metrics) if batching else None
        self._executor = None if batching else ThreadPoolExecutor(
            num_threads, thread_name_prefix="model_run"
        )

    def servable(self, name: str, version: int | None = None, label: str | None = None) -> Any:
        return self.manager.servable(name, version, label)

    async def run(self, servable: Any, signature: str, inputs: Arrays, api: str) -> Arrays:
        """Runs `signature` of `servable` on `inputs` (alias -> array).

        Args:
            servable: a servable from `servable()`.
            signature: signature key (`""`: serving_default).
            inputs: one array per signature input.
            api: the API name for metrics (`"Predict"`, `"Classify"`, `"Regress"`).

        Raises:
            ServingError: INVALID_ARGUMENT when the inputs do not match the signature or exceed
                `max_instances`; FAILED_PRECONDITION for an unknown signature; whatever the
                model run raised.
        """
        spec = servable.signature(signature)
        check_inputs(spec, inputs)
        for alias, array in inputs.items():
            if array.ndim and array.shape[0] > self._max_instances:
                raise invalid_argument(
                    f"Input {alias} has {array.shape[0]} instances; this server accepts at most "
                    f"{self._max_instances} per request"
                )
        if self._batcher is not None:
            return await self._batcher.run(servable, spec.name, inputs, api)
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(
            self._executor, self._execute, servable, spec.name, inputs, api
        )

    def _execute(self, servable: Any, signature: str, inputs: Arrays, api: str) -> Arrays:
        start = time.perf_counter()
        outputs = servable.run(signature, inputs)
        self.metrics.runtime_latency.observe(
            (time.perf_counter() - start) * 1e6, servable.name, api, "TF2"
        )
        return outputs

    def record(self, model: str, api: str, entrypoint: str, error: ServingError | None,
               seconds: float) -> None:
        """Counts a finished request (and its latency when it succeeded)."""
        self.metrics.request_count.increment(model, error.code if error else "OK")
        if error is None:
            self.metrics.request_latency.observe(seconds * 1e6, model, api, entrypoint)

    def close(self) -> None:
        """Waits for running model calls, then stops the worker threads."""
        if self._batcher is not None:
            self._batcher.close()
        if self._executor is not None:
            self._executor.shutdown(wait=True)
