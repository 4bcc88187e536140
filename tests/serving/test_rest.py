"""The REST API over a real socket, against the contract and the in-process SavedModel."""

import asyncio
import base64
import gzip
import json
import socket
from types import SimpleNamespace
from urllib.parse import urlsplit

import aiohttp
import numpy as np
import pytest
import requests
import tensorflow as tf
from aiohttp import web

from serving.monitoring import ServingMetrics
from serving.process import free_port
from serving.rest import RestApi
from serving.signatures import Signature, TensorInfo


@pytest.fixture(scope="module")
def url(shared_server):
    return shared_server.rest_url


def post(url, path, body, **kwargs):
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(f"{url}{path}", data=data, timeout=30, **kwargs)


def raw_exchange(url, request: bytes, *, then: bytes = b"") -> tuple[int, dict, bytes, bytes]:
    """Sends `request` over a plain socket (for what `requests` will not send), then `then` once
    the server has answered `100 Continue`; returns the final status, headers, body and anything
    that came before them."""
    address = urlsplit(url)
    with socket.create_connection((address.hostname, address.port), timeout=30) as sock:
        sock.sendall(request)
        received, interim = b"", b""
        if then:
            while b"\r\n\r\n" not in received:
                received += sock.recv(65536)
            interim, received = received.split(b"\r\n\r\n", 1)
            sock.sendall(then)
        while chunk := sock.recv(65536):
            received += chunk
    head, body = received.split(b"\r\n\r\n", 1)
    status_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), headers, body, interim


def assert_error(response, status, fragment):
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"} and fragment in body["error"], body


def test_status_json(url):
    response = requests.get(f"{url}/v1/models/translator", timeout=10)
    assert response.headers["Content-Type"] == "application/json"
    assert response.json() == {"model_version_status": [{
        "version": "1", "state": "AVAILABLE",
        "status": {"error_code": "OK", "error_message": ""},
    }]}
    assert requests.get(f"{url}/v1/models/translator/versions/1", timeout=10).ok
    # A label does not narrow (or fail) a status request, as in TF Serving.
    assert requests.get(f"{url}/v1/models/translator/labels/nope", timeout=10).ok


def test_metadata_json(url):
    body = requests.get(f"{url}/v1/models/translator/labels/stable/metadata", timeout=10).json()
    assert body["model_spec"] == {"name": "translator", "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert "__saved_model_init_op" in signatures
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"]["text"]["dtype"] == "DT_STRING"
    assert default["inputs"]["text"]["tensor_shape"] == {
        "dim": [{"size": "-1", "name": ""}], "unknown_rank": False
    }
    assert set(default["outputs"]) == {"translation", "score", "tokens"}


def test_predict_row_and_columnar_match_in_process(url, fixture_servable):
    sentences = ["ein kleiner hund", "guten morgen liebe welt", "ja"]
    expected = fixture_servable.signatures["serving_default"](text=tf.constant(sentences))
    rows = post(url, "/v1/models/translator:predict", {"instances": sentences}).json()
    columns = post(url, "/v1/models/translator/versions/1:predict",
                   {"inputs": {"text": sentences}}).json()
    for i, row in enumerate(rows["predictions"]):
        assert row["translation"] == expected["translation"][i].numpy().decode()
        assert row["score"] == pytest.approx(float(expected["score"][i]))
        assert row["tokens"] == expected["tokens"][i].numpy().tolist()
    assert columns["outputs"]["translation"] == [
        t.decode() for t in expected["translation"].numpy()
    ]
    assert columns["outputs"]["tokens"] == expected["tokens"].numpy().tolist()


def test_other_signatures_labels_and_b64(url):
    ids = post(url, "/v1/models/translator/labels/stable:predict",
               {"signature_name": "ids", "instances": [[1, 2], [3, 4]]})
    assert ids.json() == {"predictions": [3.0, 7.0]}  # single output: name dropped
    typed = post(url, "/v1/models/translator:predict", {
        "signature_name": "typed",
        "instances": [{"x": [1, 2.5], "flag": True, "count": 2}],
    }).json()["predictions"][0]
    assert typed["y"] == 7.0
    assert base64.b64decode(typed["label_bytes"]["b64"]) == "\xff2".encode()
    b64 = base64.b64encode(b"hallo welt").decode()
    answer = post(url, "/v1/models/translator:predict", {"instances": [{"b64": b64}]})
    assert answer.json()["predictions"][0]["translation"] == "welt hallo v1"


def test_classify_and_regress(url):
    classify = post(url, "/v1/models/translator:classify", {
        "signature_name": "classify", "examples": [{"x": 0.0}, {"x": 2.5}],
    }).json()
    assert [[label for label, _ in row] for row in classify["results"]] == [["neg", "pos"]] * 2
    assert classify["results"][0][1][1] == pytest.approx(0.5)
    regress = post(url, "/v1/models/translator:regress", {
        "signature_name": "regress", "context": {"x": 9.0}, "examples": [{"x": 1.5}, {}],
    }).json()
    assert regress == {"results": [3.0, 18.0]}  # the context fills in a missing feature
    # The translator signature cannot serve classify / regress: a clear 400.
    assert_error(post(url, "/v1/models/translator:classify", {"examples": [{"x": 1.0}]}),
                 400, "Expected one or two output Tensors, found 3")
    assert_error(post(url, "/v1/models/translator:regress",
                      {"signature_name": "typed", "examples": [{"x": 1.0}]}),
                 400, "Expected one input Tensor")
    assert_error(post(url, "/v1/models/translator:regress", {"signature_name": "regress"}),
                 400, "key 'examples' is expected")


def test_gzip_bodies_and_ignored_content_type(url):
    body = gzip.compress(json.dumps({"instances": ["a b"]}).encode())
    response = post(url, "/v1/models/translator:predict", body,
                    headers={"Content-Encoding": "gzip", "Content-Type": "text/plain"})
    assert response.json()["predictions"][0]["translation"] == "b a v1"


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "fragment"),
    [
        ("POST", "/v1/models/translator:predict", "{bad json", 400, "JSON Parse error"),
        ("POST", "/v1/models/translator:predict", "", 400, "The document is empty"),
        ("POST", "/v1/models/nope:predict", {"instances": ["a"]}, 404,
         "Servable not found for request: Latest(nope)"),
        ("POST", "/v1/models/nope:predict", "{bad", 400, "JSON Parse error"),
        ("POST", "/v1/models/translator/versions/9:predict", {"instances": ["a"]}, 404,
         "Servable not found for request: Specific(translator, 9)"),
        ("POST", "/v1/models/translator/labels/beta:predict", {"instances": ["a"]}, 400,
         "Unrecognized servable version label: beta"),
        ("POST", "/v1/models/translator:predict", {"instances": [1]}, 400,
         "is not of expected type: string"),
        ("POST", "/v1/models/translator:predict",
         {"signature_name": "ids", "instances": [[1, 2], [3]]}, 400,
         "Expecting tensor size: 2 but got: 1"),
        ("POST", "/v1/models/translator:predict",
         {"signature_name": "ids", "instances": [[1.5]]}, 400, "is not of expected type: int32"),
        ("POST", "/v1/models/translator:predict", {"signature_name": "x", "inputs": []}, 400,
         'Serving signature name: "x" not found in signature def'),
        ("POST", "/v1/models/translator:predict", {"instances": ["a"] * 65}, 400,
         "at most 64 per request"),
        ("GET", "/v1/models/nope", None, 404, "Could not find any versions of model nope"),
        ("GET", "/v1/models/translator/versions/3", None, 404,
         "Could not find version 3 of model translator"),
        ("GET", "/v1/models", None, 400, "Missing model name in request."),
        ("GET", "/v1/models/translator:predict", None, 400, "Malformed request"),
        ("PUT", "/v1/models/translator", "", 400, "Malformed request: PUT /v1/models/translator"),
        ("POST", "/v1/models/translator:predict?x=1", {"instances": ["a"]}, 400, "Malformed"),
        ("POST", "/v1/models/translator:PREDICT", {"instances": ["a"]}, 400, "Malformed"),
        ("GET", "/v1/models/translator/versions/99999999999999999999", None, 400,
         "Failed to convert version"),
    ],
)
def test_errors_are_json_with_contract_status(url, method, path, body, status, fragment):
    data = body if isinstance(body, str) or body is None else json.dumps(body)
    response = requests.request(method, f"{url}{path}", data=data, timeout=30)
    assert_error(response, status, fragment)


def test_undecodable_gzip_body_is_400_and_server_survives(url):
    gzip_header = {"Content-Encoding": "gzip"}
    for _ in range(2):  # and again: the first one did not take the server down
        response = post(url, "/v1/models/translator:predict", b"not gzip at all",
                        headers=gzip_header)
        assert_error(response, 400, "Failed to read the request body: Can not decode "
                                    "content-encoding: gzip")
    # Status requests ignore the body, as TF Serving's do.
    response = requests.get(f"{url}/v1/models/translator", data=b"junk", headers=gzip_header,
                            timeout=10)
    assert response.ok, response.text
    assert post(url, "/v1/models/translator:predict", {"instances": ["ok"]}).ok


@pytest.mark.parametrize("where", ["request line", "header"])
def test_overlong_request_line_or_header_is_json_400(url, where):
    path, header = "/v1/models/translator", ""
    if where == "request line":
        path += "/versions/" + "1" * 8200
    else:
        header = "X-Long: " + "a" * 9000 + "\r\n"
    request = f"GET {path} HTTP/1.1\r\nHost: test\r\n{header}Connection: close\r\n\r\n"
    status, headers, body, _ = raw_exchange(url, request.encode())
    assert status == 400, body
    assert headers["Content-Type"] == "application/json"
    assert json.loads(body) == {
        "error": "Malformed request: request line or header too long (over 8190 bytes)"
    }
    assert requests.get(f"{url}/v1/models/translator", timeout=10).ok


def test_expect_100_continue_is_answered(url):
    body = json.dumps({"instances": ["guten morgen"]}).encode()
    request = (b"POST /v1/models/translator:predict HTTP/1.1\r\nHost: test\r\n"
               b"Expect: 100-continue\r\nConnection: close\r\n"
               b"Content-Length: %d\r\n\r\n" % len(body))
    status, _, answer, interim = raw_exchange(url, request, then=body)
    assert interim == b"HTTP/1.1 100 Continue"
    assert status == 200 and json.loads(answer)["predictions"][0]["translation"] == (
        "morgen guten v1"
    )


def test_oversized_body_is_413_and_server_survives(url):
    big = {"instances": ["x" * 300_000]}
    assert_error(post(url, "/v1/models/translator:predict", big), 413, "exceeds the limit")
    assert post(url, "/v1/models/translator:predict", {"instances": ["ok"]}).ok


def test_non_v1_paths_are_plain_404(url):
    response = requests.get(f"{url}/v2/models/translator", timeout=10)
    assert response.status_code == 404
    assert not response.headers["Content-Type"].startswith("application/json")


def test_non_finite_values_round_trip(url):
    body = {"signature_name": "typed", "inputs": {
        "x": [[float("nan"), 1.0], [float("inf"), 0.0]], "flag": [True, True], "count": [1, 1],
    }}
    response = post(url, "/v1/models/translator:predict", json.dumps(body).encode())
    assert "NaN" in response.text and "Infinity" in response.text
    y = response.json()["outputs"]["y"]
    assert np.isnan(y[0]) and y[1] == np.inf


def test_prometheus_page_counts_requests(url):
    post(url, "/v1/models/translator:predict", {"instances": ["a"]})
    page = requests.get(f"{url}/monitoring/prometheus/metrics", timeout=10)
    assert page.headers["Content-Type"].startswith("text/plain")
    assert '# TYPE :tensorflow:serving:request_count counter' in page.text
    ok_line = next(
        line for line in page.text.splitlines()
        if line.startswith(':tensorflow:serving:request_count{model_name="translator",status="OK"}')
    )
    assert int(ok_line.split()[-1]) >= 1
    assert ':tensorflow:serving:request_latency_bucket{model_name="translator",API="predict",' \
           'entrypoint="REST",le=' in page.text


class SlowPredictor:
    """A predictor whose model takes one second, to trip the REST timeout."""

    manager = None

    def __init__(self):
        self.recorded = []
        self.metrics = ServingMetrics()

    def servable(self, name, version=None, label=None):
        signature = Signature("serving_default", "", {"text": TensorInfo("DT_STRING", (-1,))}, {})
        return SimpleNamespace(signatures={"serving_default": signature})

    async def run(self, servable, signature, inputs, api):
        await asyncio.sleep(1.0)
        return {"translation": inputs["text"]}

    def record(self, model, api, entrypoint, error, seconds):
        self.recorded.append((model, api, entrypoint, error.code if error else "OK"))


def test_slow_requests_answer_504():
    predictor = SlowPredictor()
    api = RestApi(predictor, timeout_seconds=0.2)
    port = free_port()

    async def main():
        runner = web.ServerRunner(api.server())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/v1/models/m:predict", json={"instances": ["a"]}
            ) as response:
                return response.status, await response.json()
        finally:
            await runner.cleanup()

    status, body = asyncio.run(main())
    assert status == 504 and body == {"error": "Request timed out after 200 ms"}
    assert predictor.recorded == [("m", "predict", "REST", "DEADLINE_EXCEEDED")]


class BrokenMetricsPredictor(SlowPredictor):
    """Fails where the handler does not expect a failure: after the answer is computed."""

    async def run(self, servable, signature, inputs, api):
        return {"translation": inputs["text"]}

    def record(self, model, api, entrypoint, error, seconds):
        raise RuntimeError("metrics are broken")


def test_unexpected_handler_failures_are_json_500():
    api = RestApi(BrokenMetricsPredictor())
    port = free_port()

    async def main():
        runner = web.ServerRunner(api.server())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            async with aiohttp.ClientSession() as session, session.post(
                f"http://127.0.0.1:{port}/v1/models/m:predict", json={"instances": ["a"]}
            ) as response:
                return response.status, response.headers["Content-Type"], await response.json()
        finally:
            await runner.cleanup()

    assert asyncio.run(main()) == (500, "application/json", {"error": "Internal Server Error"})


def test_deep_nesting_is_a_client_error_at_every_depth(url):
    # Near the recursion limit a body can parse and then be too deep to quote back in an error
    # message (that answered 500); far beyond it, parsing itself fails. Always 400.
    templates = ('{"instances": %s}', '{"instances": 5, "x": %s}',
                 '{"signature_name": %s, "instances": ["a"]}')
    for depth in [*range(900, 1001), 90_000]:
        nested = "[" * depth + '"a"' + "]" * depth
        for template in templates:
            response = post(url, "/v1/models/translator:predict", template % nested)
            assert response.status_code == 400, (depth, template, response.text[:300])
    assert post(url, "/v1/models/translator:predict", {"instances": ["ok"]}).ok
