"""Clients for a TF-Serving-compatible server (ours or real `tensorflow_model_server`).

`RestClient` speaks the REST API with `requests` (no TensorFlow import); `GrpcClient` speaks
gRPC with tensorflow-serving-api's stubs. Both have `translate(sentences)` for a translator
signature (`text` -> `translation`, `score`, `tokens`), `predict(inputs)` for any signature, and
`status()` / `metadata()`. `client_for_url("http://host:8501" | "grpc://host:8500", model)` picks
one.

Example:
    client = client_for_url("http://127.0.0.1:8501", "translator")
    client.translate(["Ein Hund läuft."])  # -> ["A dog runs."]
"""

from __future__ import annotations

import abc
import dataclasses
import time
from typing import Any
from urllib.parse import quote, urlsplit

import requests


class ServerError(RuntimeError):
    """A request the server answered with an error.

    Attributes:
        code: HTTP status (REST) or gRPC status code name (gRPC).
        message: the server's message.
    """

    def __init__(self, code: int | str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclasses.dataclass(frozen=True)
class Translation:
    """One translated sentence with what the translator signature returns besides the text."""

    text: str
    score: float | None = None
    tokens: tuple[int, ...] | None = None


class _Client(abc.ABC):
    """What both clients share: model addressing and the translate helpers."""

    def __init__(
        self,
        model_name: str,
        version: int | None = None,
        label: str | None = None,
        signature_name: str = "serving_default",
        timeout: float = 60.0,
        input_name: str = "text",
        output_name: str = "translation",
    ):
        if version is not None and label is not None:
            raise ValueError("Give a version or a label, not both")
        self.model_name = model_name
        self.version = version
        self.label = label
        self.signature_name = signature_name
        self.timeout = timeout
        self.input_name = input_name
        self.output_name = output_name

    @abc.abstractmethod
    def predict(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Calls the signature with one value per input; returns the outputs by name."""

    @abc.abstractmethod
    def status(self) -> dict[str, Any]:
        """The model status, shaped like the REST status JSON."""

    def translate_full(self, sentences: list[str]) -> list[Translation]:
        """Translates a batch; keeps `score` and `tokens` when the signature returns them."""
        if not sentences:
            return []
        outputs = self.predict({self.input_name: list(sentences)})
        texts = [_text(t) for t in outputs[self.output_name]]
        scores = outputs.get("score")
        tokens = outputs.get("tokens")
        return [
            Translation(
                text,
                float(scores[i]) if scores is not None else None,
                tuple(int(t) for t in tokens[i]) if tokens is not None else None,
            )
            for i, text in enumerate(texts)
        ]

    def translate(self, sentences: list[str]) -> list[str]:
        """Translates a batch of sentences."""
        return [t.text for t in self.translate_full(sentences)]

    def wait_until_available(self, timeout: float = 60.0) -> None:
        """Polls the model status until a version is AVAILABLE (or raises `TimeoutError`)."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if any(v["state"] == "AVAILABLE" for v in self.status()["model_version_status"]):
                    return
            except (ServerError, OSError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"Model {self.model_name} not available after {timeout}s")
            time.sleep(0.2)


def _text(value: Any) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else str(value)


class RestClient(_Client):
    """REST client.

    Args:
        url: server root, e.g. `http://127.0.0.1:8501`.
        model_name: the model to address.
        version / label: pin a version or a version label (default: the newest).
        signature_name: signature to call.
        timeout: seconds per HTTP request.
        input_name / output_name: the translator signature's text input and output.
    """

    def __init__(self, url: str, model_name: str, **kwargs: Any):
        super().__init__(model_name, **kwargs)
        self.url = url.rstrip("/")
        self._session = requests.Session()

    @property
    def model_url(self) -> str:
        path = f"{self.url}/v1/models/{quote(self.model_name, safe='')}"
        if self.version is not None:
            path += f"/versions/{self.version}"
        elif self.label is not None:
            path += f"/labels/{quote(self.label, safe='')}"
        return path

    def _request(self, method: str, url: str, body: dict | None = None) -> Any:
        response = self._session.request(method, url, json=body, timeout=self.timeout)
        try:
            payload = response.json()
        except ValueError:
            payload = {"error": response.text}
        if not response.ok:
            raise ServerError(response.status_code, payload.get("error", response.text))
        return payload

    def predict(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Calls the signature with columnar inputs; returns output name -> nested lists.

        A signature with a single output comes back as `{"": value}` (the REST API drops the
        name in that case).
        """
        body = {"signature_name": self.signature_name, "inputs": inputs}
        outputs = self._request("POST", f"{self.model_url}:predict", body)["outputs"]
        return outputs if isinstance(outputs, dict) else {"": outputs}

    def status(self) -> dict[str, Any]:
        return self._request("GET", self.model_url)

    def metadata(self) -> dict[str, Any]:
        return self._request("GET", f"{self.model_url}/metadata")


class GrpcClient(_Client):
    """gRPC client (imports TensorFlow for the TensorProto conversions).

    Args:
        target: `host:port` of the gRPC port.
        model_name / version / label / signature_name / timeout / input_name / output_name: as
            for `RestClient`.
    """

    def __init__(self, target: str, model_name: str, **kwargs: Any):
        super().__init__(model_name, **kwargs)
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self.target = target
        self._grpc = grpc
        self._channel = grpc.insecure_channel(
            target, options=[("grpc.max_receive_message_length", 2**31 - 1)]
        )
        self._predictions = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._models = model_service_pb2_grpc.ModelServiceStub(self._channel)
        self.last_version: int | None = None

    def _spec(self, spec, signature: bool = True) -> None:
        spec.name = self.model_name
        if self.version is not None:
            spec.version.value = self.version
        elif self.label is not None:
            spec.version_label = self.label
        if signature:
            spec.signature_name = self.signature_name

    def _call(self, method, request):
        try:
            return method(request, timeout=self.timeout)
        except self._grpc.RpcError as error:
            raise ServerError(error.code().name, error.details()) from None

    def predict(self, inputs: dict[str, Any]) -> dict[str, Any]:
        """Calls the signature; returns output name -> numpy array (strings as bytes)."""
        import tensorflow as tf
        from tensorflow_serving.apis import predict_pb2

        request = predict_pb2.PredictRequest()
        self._spec(request.model_spec)
        for name, value in inputs.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
        response = self._call(self._predictions.Predict, request)
        self.last_version = response.model_spec.version.value
        return {name: tf.make_ndarray(proto) for name, proto in response.outputs.items()}

    def status(self) -> dict[str, Any]:
        from google.protobuf import json_format
        from tensorflow_serving.apis import get_model_status_pb2

        request = get_model_status_pb2.GetModelStatusRequest()
        self._spec(request.model_spec, signature=False)
        response = self._call(self._models.GetModelStatus, request)
        return json_format.MessageToDict(response, always_print_fields_with_no_presence=True)

    def metadata(self) -> dict[str, Any]:
        from google.protobuf import json_format
        from tensorflow_serving.apis import get_model_metadata_pb2

        request = get_model_metadata_pb2.GetModelMetadataRequest(metadata_field=["signature_def"])
        self._spec(request.model_spec, signature=False)
        response = self._call(self._predictions.GetModelMetadata, request)
        signature_defs = get_model_metadata_pb2.SignatureDefMap()
        response.metadata["signature_def"].Unpack(signature_defs)
        return {
            "model_spec": json_format.MessageToDict(response.model_spec),
            "metadata": {"signature_def": json_format.MessageToDict(
                signature_defs, preserving_proto_field_name=True
            )},
        }

    def close(self) -> None:
        self._channel.close()


def client_for_url(url: str, model_name: str, **kwargs: Any) -> RestClient | GrpcClient:
    """`http(s)://host:port` -> `RestClient`, `grpc://host:port` -> `GrpcClient`.

    Raises:
        ValueError: any other scheme.
    """
    scheme = urlsplit(url).scheme
    if scheme in ("http", "https"):
        return RestClient(url, model_name, **kwargs)
    if scheme == "grpc":
        return GrpcClient(urlsplit(url).netloc, model_name, **kwargs)
    raise ValueError(f"Expected an http://, https:// or grpc:// URL, got {url!r}")
