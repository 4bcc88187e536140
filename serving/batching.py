"""Dynamic batching: concurrent requests to one signature are merged along dim 0, run once, and
the outputs split back, configured by TF Serving's `BatchingParameters`.

As in TF Serving's batching session: a batch is formed when it is full or its oldest request has
waited `batch_timeout_micros`, and a batch thread is free; `allowed_batch_sizes` pads the batch
with copies of a real row; `pad_variable_length_inputs` pads non-batch dimensions with each
tensor's first element; `enable_large_batch_splitting` splits big requests into execution-sized
pieces. Unlike TF Serving, requests whose shapes cannot be merged (padding off) are queued apart
instead of failing the whole batch.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from serving.errors import ServingError, from_exception, invalid_argument
from serving.monitoring import ServingMetrics

Arrays = dict[str, np.ndarray]
Execute = Callable[[Any, str, Arrays, str], Arrays]


@dataclasses.dataclass(frozen=True)
class BatchOptions:
    """`BatchingParameters` with TensorFlow's defaults filled in."""

    max_batch_size: int = 1000
    batch_timeout_micros: int = 0
    max_enqueued_batches: int = 10
    num_batch_threads: int = os.cpu_count() or 1
    thread_pool_name: str = "model_server_batch_threads"
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int | None = None
    allowed_batch_sizes: tuple[int, ...] = ()
    pad_variable_length_inputs: bool = False

    @classmethod
    def from_proto(cls, params) -> BatchOptions:
        """Reads a `BatchingParameters` message; unset wrapper fields keep the defaults.

        Raises:
            ValueError: invalid sizes or `allowed_batch_sizes` (not increasing, or the last entry
                differs from the largest batch that can be executed).
        """
        values = {}
        for field in ("max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                      "num_batch_threads", "thread_pool_name", "enable_large_batch_splitting",
                      "max_execution_batch_size"):
            if params.HasField(field):
                values[field] = getattr(params, field).value
        return cls(
            **values,
            allowed_batch_sizes=tuple(params.allowed_batch_sizes),
            pad_variable_length_inputs=params.pad_variable_length_inputs,
        )

    @property
    def execution_batch_size(self) -> int:
        """The largest batch run at once (`max_execution_batch_size` only with splitting)."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size:
            return self.max_execution_batch_size
        return self.max_batch_size

    def __post_init__(self) -> None:
        for name in ("max_batch_size", "max_enqueued_batches", "num_batch_threads",
                     "execution_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.execution_batch_size > self.max_batch_size:
            raise ValueError("max_execution_batch_size must be <= max_batch_size")
        sizes = self.allowed_batch_sizes
        if sizes:
            if any(b <= a for a, b in itertools.pairwise(sizes)) or sizes[0] < 1:
                raise ValueError(f"allowed_batch_sizes must be increasing: {list(sizes)}")
            if sizes[-1] != self.execution_batch_size:
                raise ValueError(
                    f"The last entry of allowed_batch_sizes ({sizes[-1]}) must equal "
                    f"max_batch_size ({self.execution_batch_size})"
                )


@dataclasses.dataclass
class _Task:
    inputs: Arrays
    size: int
    future: asyncio.Future
    enqueued_at: float


@dataclasses.dataclass
class _Queue:
    tasks: collections.deque = dataclasses.field(default_factory=collections.deque)
    rows: int = 0
    changed: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)


def batch_size(inputs: Arrays) -> int:
    """The common dim 0 of a request's inputs."""
    sizes = set()
    for array in inputs.values():
        if array.ndim == 0:
            raise invalid_argument("Batching Run() input tensors must have at least one dimension")
        sizes.add(array.shape[0])
    if len(sizes) != 1:
        raise invalid_argument("Batching Run() input tensors must have equal 0th-dimension size")
    return sizes.pop()


def _pad_to(array: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """Pads every non-batch dimension of `array` up to `dims` with its first element."""
    if array.shape[1:] == dims:
        return array
    if array.size == 0:
        raise ServingError("FAILED_PRECONDITION", "Cannot pad an empty tensor")
    widths = [(0, 0)] + [(0, want - have) for have, want in zip(array.shape[1:], dims, strict=True)]
    return np.pad(array, widths, mode="constant", constant_values=array.flat[0])


def merge_inputs(
    tasks: list[Arrays], pad: bool, allowed_batch_sizes: tuple[int, ...]
) -> tuple[Arrays, int]:
    """Concatenates the inputs of several requests along dim 0.

    Args:
        tasks: each request's inputs (same keys, equal ranks).
        pad: pad non-batch dimensions to the largest in the batch (else they must be equal).
        allowed_batch_sizes: round the batch up to the smallest of these (if any), adding copies
            of the first row of the last request.

    Returns:
        (merged inputs, number of padding rows added at the end).
    """
    rows = sum(batch_size(inputs) for inputs in tasks)
    target = next((size for size in allowed_batch_sizes if size >= rows), rows)
    if len(tasks) == 1 and target == rows:  # nothing to merge or pad: no copy
        return tasks[0], 0
    merged = {}
    for name in tasks[0]:
        arrays = [inputs[name] for inputs in tasks]
        if len({a.ndim for a in arrays}) != 1:
            raise invalid_argument(f"Tensors with name '{name}' have different ranks")
        if pad:
            dims = tuple(max(sizes) for sizes in zip(*(a.shape[1:] for a in arrays), strict=True))
            arrays = [_pad_to(a, dims) for a in arrays]
        elif len({a.shape[1:] for a in arrays}) != 1:
            raise ServingError(
                "FAILED_PRECONDITION",
                f"Tensors with name '{name}' from different tasks have different shapes and "
                "padding is turned off.",
            )
        if target > rows:
            arrays.append(np.repeat(arrays[-1][:1], target - rows, axis=0))
        merged[name] = np.concatenate(arrays, axis=0)
    return merged, target - rows


def split_outputs(outputs: Arrays, sizes: list[int], padding: int) -> list[Arrays]:
    """Cuts batched outputs back into one dict per request (dropping padding rows)."""
    total = sum(sizes) + padding
    for array in outputs.values():
        if array.ndim == 0:
            raise ServingError("FAILED_PRECONDITION", "Batched output tensor has 0 dimensions")
        if array.shape[0] != total:
            raise ServingError(
                "FAILED_PRECONDITION",
                "Batched output tensor's 0th dimension does not equal the sum of the 0th "
                "dimension sizes of the input tensors",
            )
    bounds = list(itertools.accumulate(sizes, initial=0))
    return [
        {name: array[start:end] for name, array in outputs.items()}
        for start, end in itertools.pairwise(bounds)
    ]


class Batcher:
    """Batches `execute(servable, signature, inputs, api)` calls made from one event loop.

    Args:
        options: the batching parameters.
        execute: runs one merged batch (called on a batch thread).
        metrics: receives input, processed and padding batch sizes.
    """

    def __init__(self, options: BatchOptions, execute: Execute, metrics: ServingMetrics):
        self.options = options
        self._execute = execute
        self._metrics = metrics
        self._executor = ThreadPoolExecutor(
            options.num_batch_threads, thread_name_prefix=options.thread_pool_name
        )
        self._threads = asyncio.Semaphore(options.num_batch_threads)
        self._queues: dict[tuple, _Queue] = {}
        self._running: set[asyncio.Task] = set()

    async def run(self, servable: Any, signature: str, inputs: Arrays, api: str) -> Arrays:
        """Runs one request as part of a batch and returns its own slice of the outputs.

        Only requests for the same servable, signature and API (`"Predict"`, ...) share a batch.

        Raises:
            ServingError: INVALID_ARGUMENT for an input without a batch dimension or a request
                larger than `max_batch_size`; UNAVAILABLE when the queue is full; whatever
                running the batch raised.
        """
        size = batch_size(inputs)
        self._metrics.input_batch_size.observe(size)
        options = self.options
        if size > options.max_batch_size:
            raise invalid_argument(
                f"Task size {size} is larger than maximum input batch size "
                f"{options.max_batch_size}"
            )
        piece = options.execution_batch_size
        if size <= piece:
            return await self._enqueue((servable, signature, api), inputs, size)
        starts = range(0, size, piece)
        parts = await asyncio.gather(*(
            self._enqueue(
                (servable, signature, api), {k: v[s:s + piece] for k, v in inputs.items()},
                min(piece, size - s),
            )
            for s in starts
        ))
        return {name: np.concatenate([p[name] for p in parts], axis=0) for name in parts[0]}

    async def _enqueue(self, target: tuple, inputs: Arrays, size: int) -> Arrays:
        options = self.options
        shapes = () if options.pad_variable_length_inputs else tuple(
            sorted((name, array.shape[1:]) for name, array in inputs.items())
        )
        key = (*target, shapes)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = _Queue()
            self._spawn(self._pump(key, queue))
        if queue.rows + size > options.max_enqueued_batches * options.execution_batch_size:
            raise ServingError(
                "UNAVAILABLE", "The batch scheduling queue to which this task was submitted is full"
            )
        loop = asyncio.get_running_loop()
        task = _Task(inputs, size, loop.create_future(), loop.time())
        queue.tasks.append(task)
        queue.rows += size
        queue.changed.set()
        return await task.future

    def _spawn(self, coroutine) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _pump(self, key: tuple, queue: _Queue) -> None:
        """Forms batches from one queue while it has requests."""
        try:
            while queue.tasks:
                await self._threads.acquire()
                try:
                    await self._wait_for_batch(queue)
                    tasks = self._take(queue)
                except BaseException:
                    self._threads.release()
                    raise
                if tasks:
                    self._spawn(self._process(key[:3], tasks))
                else:
                    self._threads.release()
        finally:
            if self._queues.get(key) is queue:
                del self._queues[key]

    async def _wait_for_batch(self, queue: _Queue) -> None:
        loop = asyncio.get_running_loop()
        deadline = queue.tasks[0].enqueued_at + self.options.batch_timeout_micros / 1e6
        while queue.rows < self.options.execution_batch_size:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            queue.changed.clear()
            try:
                async with asyncio.timeout(remaining):
                    await queue.changed.wait()
            except TimeoutError:
                return

    def _take(self, queue: _Queue) -> list[_Task]:
        tasks, rows = [], 0
        while queue.tasks and rows + queue.tasks[0].size <= self.options.execution_batch_size:
            task = queue.tasks.popleft()
            queue.rows -= task.size
            if not task.future.done():  # skip requests whose caller already gave up
                tasks.append(task)
                rows += task.size
        return tasks

    async def _process(self, target: tuple, tasks: list[_Task]) -> None:
        try:
            results = await asyncio.get_running_loop().run_in_executor(
                self._executor, self._run_batch, target, [t.inputs for t in tasks],
                [t.size for t in tasks],
            )
        except Exception as exception:  # every request of the batch gets the error
            error = from_exception(exception)
            for task in tasks:
                if not task.future.done():
                    task.future.set_exception(error)
        else:
            for task, result in zip(tasks, results, strict=True):
                if not task.future.done():
                    task.future.set_result(result)
        finally:
            self._threads.release()

    def _run_batch(self, target: tuple, inputs: list[Arrays], sizes: list[int]) -> list[Arrays]:
        """On a batch thread, so the event loop keeps reading requests: merges the requests'
        inputs, runs them once and cuts the outputs back into one dict per request."""
        merged, padding = merge_inputs(
            inputs, self.options.pad_variable_length_inputs, self.options.allowed_batch_sizes
        )
        executed = sum(sizes) + padding
        self._metrics.processed_batch_size.observe(executed)
        self._metrics.padding_size.observe(padding, str(executed))
        servable, signature, api = target
        return split_outputs(self._execute(servable, signature, merged, api), sizes, padding)

    def close(self) -> None:
        """Waits for running batches and stops the batch threads."""
        self._executor.shutdown(wait=True)
