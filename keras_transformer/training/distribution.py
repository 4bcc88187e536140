"""`tf.distribute` strategies by name, and which process of a cluster writes the run directory."""

from __future__ import annotations

import os
from pathlib import Path

import tensorflow as tf

from keras_transformer.training.accumulation import first_batch


def make_strategy(name: str) -> tf.distribute.Strategy:
    """Creates the distribution strategy `name` ("default", "mirrored" or "multi_worker").

    "mirrored" replicates the model on every local GPU, or, on a machine without GPUs, on every
    logical CPU device (split one CPU with `tf.config.set_logical_device_configuration` to try
    data parallelism without accelerators). "multi_worker" reads the cluster from `TF_CONFIG`.

    Args:
        name: strategy name.

    Returns:
        the strategy; "default" is TensorFlow's default (no-op) strategy.

    Raises:
        ValueError: unknown name, or "multi_worker" without a `TF_CONFIG` cluster.
    """
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        gpus = tf.config.list_logical_devices("GPU")
        if gpus:
            return tf.distribute.MirroredStrategy([device.name for device in gpus])
        cpus = [device.name for device in tf.config.list_logical_devices("CPU")]
        # NCCL all-reduce needs GPUs; on CPUs gradients are summed on one device.
        return tf.distribute.MirroredStrategy(
            cpus, cross_device_ops=tf.distribute.ReductionToOneDevice()
        )
    if name == "multi_worker":
        if "TF_CONFIG" not in os.environ:
            raise ValueError(
                "strategy multi_worker needs the cluster in the TF_CONFIG environment variable"
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    raise ValueError(f"unknown strategy {name!r}: use default, mirrored or multi_worker")


def worker_name(strategy: tf.distribute.Strategy) -> str | None:
    """`"<task_type>_<task_id>"` of this process in a multi-worker cluster, else None."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return None
    return f"{resolver.task_type}_{resolver.task_id}"


def is_chief(strategy: tf.distribute.Strategy) -> bool:
    """Whether this process writes the run directory: always outside a cluster; in a cluster,
    the "chief" task, or worker 0 when the cluster has no chief."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or resolver.task_type is None:
        return True
    if resolver.task_type == "chief":
        return True
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    return not has_chief and resolver.task_type == "worker" and resolver.task_id == 0


def worker_directory(run_dir: Path, strategy: tf.distribute.Strategy) -> Path:
    """Where this process keeps its own files: `run_dir` for the chief, else
    `run_dir/workers/<task>` (workers must not overwrite the chief's files)."""
    if is_chief(strategy):
        return run_dir
    return run_dir / "workers" / worker_name(strategy)


def any_worker(strategy: tf.distribute.Strategy, flag: bool) -> bool:
    """True on every worker when `flag` is True on at least one (an all-reduce of the flag)."""
    if strategy.num_replicas_in_sync == 1 or worker_name(strategy) is None:
        return flag
    value = strategy.run(lambda: tf.constant(float(flag)))
    return bool(strategy.reduce(tf.distribute.ReduceOp.MAX, value, axis=None).numpy() > 0)


def patch_for_strategy(model, strategy: tf.distribute.Strategy) -> None:
    """Works around gaps of Keras 3's `fit` under `tf.distribute` strategies.

    Call it after installing the model's train step (`TokenWeightedSteps.install`).

    1. Before the first step, `fit`/`evaluate` average one distributed data batch with
       `strategy.reduce` just to learn its shapes and build the metrics. That fails for batches
       that replicas split unevenly, for a group of accumulated batches (`group_batches`: not
       what the model takes), and under `MultiWorkerMirroredStrategy`, which cannot reduce a
       nested batch (keras-team/keras#20329). The first local replica's share of the (first)
       batch has the right shapes, so the model is built from that instead.
    2. Under `MultiWorkerMirroredStrategy`, after every step the logs are averaged over workers
       with `reduce("MEAN", axis=0)`, which rejects the scalar losses and metrics. The steps
       return them as shape `(1,)` instead, so the same reduction yields the worker average as
       a scalar.

    Nothing is changed for a single replica.

    Args:
        model: a compiled model created under `strategy.scope()`.
        strategy: its strategy.
    """
    multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    if strategy.num_replicas_in_sync == 1 and not multi_worker:
        return

    def maybe_symbolic_build(iterator=None, data_batch=None):
        if iterator is not None:
            for _, _, batches in iterator:
                data_batch = tf.nest.map_structure(
                    lambda value: strategy.experimental_local_results(value)[0], next(batches)
                )
                break
        with strategy.scope():
            model._symbolic_build(data_batch=first_batch(data_batch))

    model._maybe_symbolic_build = maybe_symbolic_build
    if not multi_worker:
        return

    def with_vector_logs(step):
        def vector_logs_step(data):
            return tf.nest.map_structure(lambda value: tf.reshape(value, [1]), step(data))

        return vector_logs_step

    model.train_step = with_vector_logs(model.train_step)
    model.test_step = with_vector_logs(model.test_step)
