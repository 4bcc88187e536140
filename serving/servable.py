"""One loaded version of a model: its signatures, their metadata, and how to run them.

Loads any TF2 SavedModel in TF Serving's layout; nothing here knows what the model does.
"""

from __future__ import annotations

import logging
import os

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the tokenizer ops a translator graph uses)
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, prediction_log_pb2

from serving.errors import ServingError, from_exception
from serving.signatures import Signature, TensorInfo, check_inputs

log = logging.getLogger(__name__)

DEFAULT_SIGNATURE = "serving_default"
WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_WARMUP_RECORDS = 1000


def _tensor_info(proto) -> TensorInfo:
    shape = proto.tensor_shape
    dims = None if shape.unknown_rank else tuple(dim.size for dim in shape.dim)
    return TensorInfo(types_pb2.DataType.Name(proto.dtype), dims)


def read_signature_defs(path: str, tags: tuple[str, ...]) -> get_model_metadata_pb2.SignatureDefMap:
    """Reads the signature defs of the meta-graph tagged exactly `tags` from `saved_model.pb`."""
    with tf.io.gfile.GFile(os.path.join(path, "saved_model.pb"), "rb") as file:
        saved_model = saved_model_pb2.SavedModel.FromString(file.read())
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            signature_defs = get_model_metadata_pb2.SignatureDefMap()
            for name, signature_def in meta_graph.signature_def.items():
                signature_defs.signature_def[name].CopyFrom(signature_def)
            return signature_defs
    raise ValueError(f"No meta-graph tagged {sorted(tags)} in {path}")


class Servable:
    """A SavedModel version loaded for serving.

    Args:
        name: model name.
        version: version number (the directory name).
        path: the version directory.
        tags: meta-graph tags to load.
    """

    def __init__(self, name: str, version: int, path: str, tags: tuple[str, ...] = ("serve",)):
        self.name = name
        self.version = version
        self.path = path
        self.signature_defs = read_signature_defs(path, tags)
        self._model = tf.saved_model.load(path, tags=list(tags))
        self.signatures = {
            key: Signature(
                key,
                proto.method_name,
                {alias: _tensor_info(info) for alias, info in proto.inputs.items()},
                {alias: _tensor_info(info) for alias, info in proto.outputs.items()},
            )
            for key, proto in self.signature_defs.signature_def.items()
        }
        self._functions = dict(self._model.signatures)

    def signature(self, name: str) -> Signature:
        """The signature called `name` (`""` means `serving_default`).

        Raises:
            ServingError: FAILED_PRECONDITION when there is no such signature (the gRPC wording;
                the REST layer rewords it).
        """
        key = name or DEFAULT_SIGNATURE
        if key not in self.signatures:
            raise ServingError("FAILED_PRECONDITION", f'Serving signature key "{key}" not found.')
        return self.signatures[key]

    def run(self, signature_name: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Runs one signature on numpy inputs; returns numpy outputs.

        Args:
            signature_name: signature key (`""`: serving_default).
            inputs: exactly the signature's inputs (callers check with `check_inputs`).

        Raises:
            ServingError: with the canonical code of whatever failed (usually INVALID_ARGUMENT).
        """
        signature = self.signature(signature_name)
        function = self._functions.get(signature.name)
        if function is None:
            raise ServingError("FAILED_PRECONDITION", f"Signature {signature.name} is not callable")
        try:
            tensors = {
                alias: tf.constant(value, dtype=tf.as_dtype(
                    types_pb2.DataType.Value(signature.inputs[alias].dtype)))
                for alias, value in inputs.items()
            }
            outputs = function(**tensors)
            return {alias: tensor.numpy() for alias, tensor in outputs.items()}
        except Exception as error:  # a bad request must never take the server down
            raise from_exception(error) from error

    def warm_up(self) -> int:
        """Replays `assets.extra/tf_serving_warmup_requests` (predict logs); returns the count.

        Raises:
            ValueError: more than 1000 records, or a record of a kind this server cannot replay.
            ServingError: a warmup request failed (which fails the load, as in TF Serving).
        """
        warmup_path = os.path.join(self.path, WARMUP_FILE)
        if not tf.io.gfile.exists(warmup_path):
            return 0
        count = 0
        for record in tf.data.TFRecordDataset(warmup_path):
            count += 1
            if count > MAX_WARMUP_RECORDS:
                raise ValueError(f"More than {MAX_WARMUP_RECORDS} warmup records in {warmup_path}")
            entry = prediction_log_pb2.PredictionLog.FromString(record.numpy())
            if entry.WhichOneof("log_type") != "predict_log":
                raise ValueError(f"Unsupported warmup record: {entry.WhichOneof('log_type')}")
            request = entry.predict_log.request
            check_inputs(self.signature(request.model_spec.signature_name), request.inputs)
            inputs = {alias: tf.make_ndarray(proto) for alias, proto in request.inputs.items()}
            self.run(request.model_spec.signature_name, inputs)
        log.info("Warmed up %s version %d with %d requests", self.name, self.version, count)
        return count


def load_servable(
    name: str, version: int, path: str, tags: tuple[str, ...] = ("serve",), warmup: bool = True
) -> Servable:
    """Loads a version and (optionally) replays its warmup requests, TF Serving's load step."""
    servable = Servable(name, version, path, tags)
    if warmup:
        servable.warm_up()
    return servable
