"""Send one fixed set of requests to two TF-Serving-compatible servers; print every difference.

Both servers must serve the same export under the same model name: typically real
`tensorflow_model_server` (left) and the local server of this package (right), which is what
`serving/deploy/verify_tf_serving.sh` runs. The requests (`cases()`) address the translator
contract of the `serving_default` signature (`text` strings in; `translation`, `score`, `tokens`
out): model status, metadata, predict in row and columnar format, and every error case of the
REST and gRPC contract (unknown model, version, label and signature, malformed JSON and paths,
wrong input names, dtypes and shapes, ...), each over REST and gRPC where the API has it.

What is compared, per request:
* REST: the HTTP status, whether the answer is JSON (`Content-Type: application/json`), and the
  parsed body. Indentation and key order are not part of the contract; values are, exactly
  (floats included, and `1` is not `1.0`).
* gRPC: the status code and the whole response message; output tensors as dtype, shape, values
  and which TensorProto fields carry them (typed `*_val` fields or `tensor_content`).
* Error messages: equal, except where the contract pins only part of the text (`pinned`):
  rapidjson's parse-error wording, messages that quote the request back in rapidjson's
  formatting, and errors raised by TensorFlow kernels at run time (model- and build-dependent).
  There both messages must contain the pinned part (`""`: only the status code counts).

Exit status: 0 when every answer matches, 1 when any differs, 2 when the comparison could not
run (a server unreachable or never ready).

Example:
    python -m serving.verify --model translator \\
        --left-rest http://127.0.0.1:8501 --left-grpc 127.0.0.1:8500 \\
        --right-rest http://127.0.0.1:9501 --right-grpc 127.0.0.1:9500 --wait 300
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import math
import sys
from collections.abc import Iterator
from typing import Any

import requests

from serving.client import GrpcClient, RestClient, ServerError

SENTENCES = ("I have three hundred forty-two apples.", "The number is twelve.", "Café für zwei.")
UNKNOWN = "nosuch"  # a model, label and signature name no server has
UNKNOWN_VERSION = 987654321


@dataclasses.dataclass(frozen=True)
class RestCase:
    """One REST request.

    Attributes:
        name: what the request checks, printed with its result.
        method: HTTP method.
        path: path (and query) after the server root.
        body: raw request body (`None`: no body).
        pinned: `None` if error messages must be equal; else the part of the message the
            contract pins, which both messages must contain (`""`: any message).
    """

    name: str
    method: str
    path: str
    body: bytes | None = None
    pinned: str | None = None


@dataclasses.dataclass(frozen=True)
class GrpcCase:
    """One gRPC request: `method` of `service` (`"prediction"` or `"model"`) with `request`.

    `name` and `pinned` are as for `RestCase`.
    """

    name: str
    service: str
    method: str
    request: Any
    pinned: str | None = None


Case = RestCase | GrpcCase


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode()


def rest_cases(model: str, version: int) -> list[RestCase]:
    """The REST requests for `model`, whose served version is `version`."""
    base = f"/v1/models/{model}"
    at_version = f"{base}/versions/{version}"
    predict = f"{base}:predict"
    sentences = list(SENTENCES)
    b64 = [{"b64": base64.b64encode(s.encode()).decode()} for s in SENTENCES]
    row = _json({"instances": sentences})
    return [
        RestCase("status", "GET", base),
        RestCase("status of the served version", "GET", at_version),
        RestCase("status ignores a label", "GET", f"{base}/labels/{UNKNOWN}"),
        RestCase("status of an unknown model", "GET", f"/v1/models/{UNKNOWN}"),
        RestCase("status of an unknown version", "GET", f"{base}/versions/{UNKNOWN_VERSION}"),
        RestCase("metadata", "GET", f"{base}/metadata"),
        RestCase("metadata of the served version", "GET", f"{at_version}/metadata"),
        RestCase("metadata of an unknown model", "GET", f"/v1/models/{UNKNOWN}/metadata"),
        RestCase(
            "metadata of an unknown version", "GET",
            f"{base}/versions/{UNKNOWN_VERSION}/metadata",
        ),
        RestCase("metadata of an unknown label", "GET", f"{base}/labels/{UNKNOWN}/metadata"),
        RestCase("predict, row format", "POST", predict, row),
        RestCase(
            "predict, row format with named inputs", "POST", predict,
            _json({"instances": [{"text": s} for s in sentences]}),
        ),
        RestCase("predict, row format, base64 strings", "POST", predict, _json({"instances": b64})),
        RestCase(
            "predict, columnar format", "POST", predict, _json({"inputs": {"text": sentences}})
        ),
        RestCase(
            "predict, columnar format, plain list", "POST", predict, _json({"inputs": sentences})
        ),
        RestCase(
            "predict at the served version, signature named", "POST", f"{at_version}:predict",
            _json({"signature_name": "serving_default", "instances": sentences[:1]}),
        ),
        RestCase(
            "predict ignores unknown top-level keys", "POST", predict,
            _json({"instances": sentences[:1], "extra": 1}),
        ),
        RestCase("predict on an unknown model", "POST", f"/v1/models/{UNKNOWN}:predict", row),
        RestCase(
            "predict on an unknown version", "POST",
            f"{base}/versions/{UNKNOWN_VERSION}:predict", row,
        ),
        RestCase("predict on an unknown label", "POST", f"{base}/labels/{UNKNOWN}:predict", row),
        RestCase(
            "predict on an unknown signature", "POST", predict,
            _json({"signature_name": UNKNOWN, "instances": sentences}),
        ),
        RestCase("malformed JSON", "POST", predict, b'{"instances": [', "JSON Parse error: "),
        RestCase(
            "malformed JSON to an unknown model (parsed first)", "POST",
            f"/v1/models/{UNKNOWN}:predict", b"{,}", "JSON Parse error: ",
        ),
        RestCase("empty body", "POST", predict, b""),
        RestCase("body not an object", "POST", predict, b'["Hi."]', "Is not object"),
        RestCase(
            "signature_name not a string", "POST", predict,
            _json({"signature_name": 1, "instances": sentences}),
            "'signature_name' key must be a string value.",
        ),
        RestCase(
            "both instances and inputs", "POST", predict,
            _json({"instances": sentences, "inputs": sentences}),
            "expecting only one of 'inputs' or 'instances' keys",
        ),
        RestCase("neither instances nor inputs", "POST", predict, _json({"signature_name": ""})),
        RestCase(
            "instances not a list", "POST", predict, _json({"instances": "Hi."}),
            "Expecting 'instances' to be an list/array",
        ),
        RestCase(
            "empty instances", "POST", predict, _json({"instances": []}),
            "No values in 'instances' array",
        ),
        RestCase(
            "wrong input name, row format", "POST", predict,
            _json({"instances": [{"txt": "Hi."}]}), "does not have named input: txt",
        ),
        RestCase(
            "wrong input name, columnar format", "POST", predict,
            _json({"inputs": {"txt": sentences}}),
        ),
        RestCase(
            "wrong dtype, row format", "POST", predict, _json({"instances": [1, 2]}),
            "is not of expected type: string",
        ),
        RestCase(
            "wrong dtype, columnar format", "POST", predict, _json({"inputs": {"text": [1.5]}}),
            "is not of expected type: string",
        ),
        RestCase(
            "undecodable base64", "POST", predict, _json({"instances": [{"b64": "@@@"}]}),
            "Unable to base64 decode",
        ),
        RestCase(
            "ragged instances", "POST", predict, _json({"instances": [["a", "b"], ["c"]]}),
            "Expecting tensor size",
        ),
        RestCase(
            "wrong rank (model-dependent)", "POST", predict,
            _json({"instances": [["a"], ["b"]]}), "",
        ),
        RestCase("GET on a predict URL", "GET", predict),
        RestCase("POST on a status URL", "POST", base, row),
        RestCase("unknown verb", "POST", f"{base}:translate", row),
        RestCase("query string on a predict URL", "POST", f"{predict}?x=1", row),
        RestCase("trailing slash", "GET", f"{base}/"),
        RestCase("no model name", "GET", "/v1/models"),
        RestCase("path outside /v1/", "GET", "/healthz"),
        RestCase("Prometheus metrics page", "GET", "/monitoring/prometheus/metrics"),
    ]


def grpc_cases(model: str, version: int) -> list[GrpcCase]:
    """The gRPC requests for `model`, whose served version is `version`."""
    import tensorflow as tf
    from tensorflow_serving.apis import (
        get_model_metadata_pb2,
        get_model_status_pb2,
        model_pb2,
        predict_pb2,
    )

    def spec(name: str = model, number: int | None = None, label: str | None = None,
             signature: str | None = None) -> model_pb2.ModelSpec:
        result = model_pb2.ModelSpec(name=name)
        if number is not None:
            result.version.value = number
        if label is not None:
            result.version_label = label
        if signature is not None:
            result.signature_name = signature
        return result

    def predict(model_spec: model_pb2.ModelSpec | None = None, inputs: Any = None,
                output_filter: tuple[str, ...] = ()) -> predict_pb2.PredictRequest:
        request = predict_pb2.PredictRequest(output_filter=list(output_filter))
        if model_spec is not None:
            request.model_spec.CopyFrom(model_spec)
        for alias, value in (inputs or {"text": list(SENTENCES)}).items():
            request.inputs[alias].CopyFrom(tf.make_tensor_proto(value))
        return request

    def metadata(model_spec: model_pb2.ModelSpec, fields: tuple[str, ...] = ("signature_def",)):
        return get_model_metadata_pb2.GetModelMetadataRequest(
            model_spec=model_spec, metadata_field=list(fields)
        )

    def status(model_spec: model_pb2.ModelSpec):
        return get_model_status_pb2.GetModelStatusRequest(model_spec=model_spec)

    def case(name: str, method: str, request: Any, pinned: str | None = None) -> GrpcCase:
        service = "model" if method == "GetModelStatus" else "prediction"
        return GrpcCase(name, service, method, request, pinned)

    return [
        case("status", "GetModelStatus", status(spec())),
        case("status of the served version", "GetModelStatus", status(spec(number=version))),
        case("status ignores a label", "GetModelStatus", status(spec(label=UNKNOWN))),
        case("status of an unknown model", "GetModelStatus", status(spec(UNKNOWN))),
        case(
            "status of an unknown version", "GetModelStatus",
            status(spec(number=UNKNOWN_VERSION)),
        ),
        case("metadata", "GetModelMetadata", metadata(spec())),
        case("metadata of the served version", "GetModelMetadata", metadata(spec(number=version))),
        case("metadata of an unknown model", "GetModelMetadata", metadata(spec(UNKNOWN))),
        case(
            "metadata of an unknown version", "GetModelMetadata",
            metadata(spec(number=UNKNOWN_VERSION)),
        ),
        case("metadata of an unknown label", "GetModelMetadata", metadata(spec(label=UNKNOWN))),
        case("metadata without a field", "GetModelMetadata", metadata(spec(), ())),
        case(
            "metadata of an unsupported field", "GetModelMetadata",
            metadata(spec(), ("signature_def", "graph_def")), "",
        ),
        case("predict", "Predict", predict(spec())),
        case(
            "predict at the served version, signature named", "Predict",
            predict(spec(number=version, signature="serving_default"), {"text": SENTENCES[:1]}),
        ),
        case("predict with an output filter", "Predict", predict(spec(), None, ("score",))),
        case("predict on an unknown model", "Predict", predict(spec(UNKNOWN))),
        case("predict on an unknown version", "Predict", predict(spec(number=UNKNOWN_VERSION))),
        case("predict on an unknown label", "Predict", predict(spec(label=UNKNOWN))),
        case("predict on an unknown signature", "Predict", predict(spec(signature=UNKNOWN))),
        case("predict without a model spec", "Predict", predict(), ""),
        case(
            "wrong input name", "Predict", predict(spec(), {"txt": list(SENTENCES)}),
            "input size does not match signature",
        ),
        case(
            "an extra input", "Predict",
            predict(spec(), {"text": list(SENTENCES), "extra": list(SENTENCES)}),
            "input size does not match signature",
        ),
        case("wrong dtype", "Predict", predict(spec(), {"text": [1, 2]}), ""),
        case(
            "wrong rank (model-dependent)", "Predict",
            predict(spec(), {"text": [list(SENTENCES)]}), "",
        ),
        case(
            "an unknown output in the filter", "Predict",
            predict(spec(), None, (UNKNOWN,)), "",
        ),
        case(
            "a repeated output in the filter", "Predict",
            predict(spec(), None, ("score", "score")), "",
        ),
    ]


def cases(model: str, version: int) -> list[Case]:
    """Every request, REST first."""
    return [*rest_cases(model, version), *grpc_cases(model, version)]


class Server:
    """One side of the comparison: a REST root URL and a gRPC `host:port`.

    Answers are normalised to plain data: `{"status": ..., ...}` with either the response
    (`"body"`, `"response"`) or the error message (`"error"`).
    """

    def __init__(self, rest_url: str, grpc_target: str, timeout: float = 120.0):
        import grpc
        from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

        self.rest_url = rest_url.rstrip("/")
        self.grpc_target = grpc_target
        self.timeout = timeout
        self._session = requests.Session()
        self._grpc = grpc
        self._channel = grpc.insecure_channel(
            grpc_target, options=[("grpc.max_receive_message_length", 2**31 - 1)]
        )
        self._stubs = {
            "prediction": prediction_service_pb2_grpc.PredictionServiceStub(self._channel),
            "model": model_service_pb2_grpc.ModelServiceStub(self._channel),
        }

    def wait_until_available(self, model: str, timeout: float) -> None:
        """Waits until both ports report a version of `model` AVAILABLE."""
        RestClient(self.rest_url, model).wait_until_available(timeout)
        grpc_client = GrpcClient(self.grpc_target, model)
        try:
            grpc_client.wait_until_available(timeout)
        finally:
            grpc_client.close()

    def served_version(self, model: str) -> int:
        """The highest AVAILABLE version of `model` (REST status)."""
        status = RestClient(self.rest_url, model, timeout=self.timeout).status()
        versions = [
            int(entry["version"]) for entry in status["model_version_status"]
            if entry["state"] == "AVAILABLE"
        ]
        if not versions:
            raise ServerError(404, f"no version of {model} is AVAILABLE at {self.rest_url}")
        return max(versions)

    def answer(self, case: Case) -> dict[str, Any]:
        if isinstance(case, RestCase):
            return self._rest(case)
        return self._rpc(case)

    def _rest(self, case: RestCase) -> dict[str, Any]:
        # As `curl -d` sends it: TF Serving ignores a request's Content-Type.
        headers = {"Content-Type": "application/x-www-form-urlencoded"} if case.body else {}
        response = self._session.request(
            case.method, self.rest_url + case.path, data=case.body, headers=headers,
            timeout=self.timeout,
        )
        media_type = response.headers.get("Content-Type", "").split(";")[0].strip()
        answer: dict[str, Any] = {"status": response.status_code}
        answer["json"] = media_type == "application/json"
        if not answer["json"]:
            return answer
        try:
            body = json.loads(response.text)
        except ValueError:
            answer["invalid_json"] = response.text
            return answer
        if response.ok:
            answer["body"] = body
        elif isinstance(body, dict) and set(body) == {"error"}:
            answer["error"] = body["error"]
        else:  # not the `{"error": ...}` envelope: compared whole
            answer["error_body"] = body
        return answer

    def _rpc(self, case: GrpcCase) -> dict[str, Any]:
        method = getattr(self._stubs[case.service], case.method)
        try:
            response = method(case.request, timeout=self.timeout)
        except self._grpc.RpcError as error:
            return {"status": error.code().name, "error": error.details()}
        return {"status": "OK", "response": message_dict(response)}

    def close(self) -> None:
        self._session.close()
        self._channel.close()


def message_dict(message: Any) -> dict[str, Any]:
    """A gRPC response as plain data; `outputs` tensors as `tensor_dict()`s."""
    from google.protobuf import json_format
    from tensorflow_serving.apis import get_model_metadata_pb2  # noqa: F401  (Any unpacking)

    data = json_format.MessageToDict(
        message, preserving_proto_field_name=True, always_print_fields_with_no_presence=True
    )
    if "outputs" in data:
        data["outputs"] = {alias: tensor_dict(proto) for alias, proto in message.outputs.items()}
    return data


def tensor_dict(proto: Any) -> dict[str, Any]:
    """A TensorProto as dtype, shape, values (nested lists) and the fields carrying it."""
    import tensorflow as tf
    from tensorflow.core.framework import types_pb2

    return {
        "dtype": types_pb2.DataType.Name(proto.dtype),
        "shape": [dim.size for dim in proto.tensor_shape.dim],
        "values": tf.make_ndarray(proto).tolist(),
        "fields": sorted(field.name for field, _ in proto.ListFields()),
    }


def differences(left: Any, right: Any, path: str = "") -> Iterator[str]:
    """Every place where two JSON-like values differ, as `path: left vs right` lines.

    Dicts are compared by key and lists item by item; a value's type counts (`1` is not `1.0`,
    `True` is not `1`); NaN equals NaN.
    """
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(left.keys() | right.keys(), key=str):
            where = f"{path}.{key}" if path else str(key)
            if key not in right:
                yield f"{where}: only left has it ({_short(left[key])})"
            elif key not in left:
                yield f"{where}: only right has it ({_short(right[key])})"
            else:
                yield from differences(left[key], right[key], where)
    elif isinstance(left, list) and isinstance(right, list):
        if len(left) != len(right):
            yield f"{path}: {len(left)} items vs {len(right)} items"
        for index, (a, b) in enumerate(zip(left, right, strict=False)):
            yield from differences(a, b, f"{path}[{index}]")
    elif type(left) is not type(right) or not (left == right or _both_nan(left, right)):
        yield f"{path}: {_short(left)} vs {_short(right)}"


def _both_nan(left: Any, right: Any) -> bool:
    return isinstance(left, float) and math.isnan(left) and math.isnan(right)


def _short(value: Any, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def answer_differences(case: Case, left: dict[str, Any], right: dict[str, Any]) -> list[str]:
    """Differences between two normalised answers to `case` (error messages per `pinned`)."""
    if "error" not in left or "error" not in right or case.pinned is None:
        return list(differences(left, right))
    found = list(differences(
        {k: v for k, v in left.items() if k != "error"},
        {k: v for k, v in right.items() if k != "error"},
    ))
    for side, answer in (("left", left), ("right", right)):
        if case.pinned not in answer["error"]:
            found.append(
                f"error ({side}): {_short(answer['error'])} lacks the contract's {case.pinned!r}"
            )
    return found


def compare(left: Server, right: Server, model: str) -> int:
    """Sends every case to both servers and prints one line per case, then each difference.

    Returns:
        The number of cases whose answers differ.
    """
    version = left.served_version(model)
    differing = 0
    all_cases = cases(model, version)
    for case in all_cases:
        api = "REST" if isinstance(case, RestCase) else "gRPC"
        found = answer_differences(case, left.answer(case), right.answer(case))
        print(f"{'DIFF' if found else 'same'}  {api:4}  {case.name}", flush=True)
        for line in found:
            print(f"        {line}")
        differing += bool(found)
    if differing:
        print(f"{differing} of {len(all_cases)} requests answered differently")
    else:
        print(f"all {len(all_cases)} requests answered the same")
    return differing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m serving.verify",
        description="Send the same requests (status, metadata, predict, every error case) over "
        "REST and gRPC to two TF-Serving-compatible servers serving the same export; print every "
        "difference. Exit status: 0 same, 1 differences, 2 could not compare.",
    )
    for side in ("left", "right"):
        parser.add_argument(f"--{side}-rest", required=True, metavar="URL",
                            help=f"{side} server's REST root, e.g. http://127.0.0.1:8501")
        parser.add_argument(f"--{side}-grpc", required=True, metavar="HOST:PORT",
                            help=f"{side} server's gRPC address, e.g. 127.0.0.1:8500")
    parser.add_argument("--model", default="translator", help="model name (default: translator)")
    parser.add_argument("--wait", type=float, default=0.0, metavar="SECONDS",
                        help="wait this long for both servers to serve the model (default: 0)")
    args = parser.parse_args(argv)
    left = Server(args.left_rest, args.left_grpc)
    right = Server(args.right_rest, args.right_grpc)
    try:
        for side, server in (("left", left), ("right", right)):
            try:
                server.wait_until_available(args.model, args.wait)
            except TimeoutError as error:
                print(f"error: {side} server ({server.rest_url}, {server.grpc_target}): {error}",
                      file=sys.stderr)
                return 2
        return 1 if compare(left, right, args.model) else 0
    finally:
        left.close()
        right.close()


if __name__ == "__main__":
    sys.exit(main())
