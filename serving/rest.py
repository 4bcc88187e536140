"""The REST API on aiohttp, routed and answered as TF Serving's `HttpRestApiHandler`.

Every answer of the `/v1/` handler is JSON (`{"error": ...}` on failure, with TF's status ->
HTTP mapping); other paths get a plain 404; the Prometheus page is served on its own path.
Requests aiohttp cannot parse (a request line or header over its 8190-byte limit, say) are
answered as JSON errors too, by the connection protocol (`_JsonErrorProtocol`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import Any
from urllib.parse import unquote

from aiohttp import HttpVersion11, web
from aiohttp.http_exceptions import LineTooLong
from google.protobuf import json_format

from serving import examples, json_tensor
from serving.errors import ServingError, from_exception, invalid_argument
from serving.prediction import Predictor
from serving.servable import DEFAULT_SIGNATURE

log = logging.getLogger(__name__)
_V1 = re.compile(r"/v1/.*", re.IGNORECASE | re.DOTALL)
_POST = re.compile(
    r"/v1/models/([^/:]+)(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?:(classify|regress|predict)",
    re.IGNORECASE,
)
_GET = re.compile(
    r"/v1/models(?:/([^/:]+))?(?:(?:/versions/(\d+))|(?:/labels/([^/:]+)))?(?:/(metadata))?",
    re.IGNORECASE,
)
_ORIGIN = re.compile(r"https?://")
_CORS_HEADERS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "POST, GET",
    "Access-Control-Allow-Headers": "Content-Type",
}
_INT64_MAX = 2**63 - 1
_BODY_APIS = ("predict", "classify", "regress")  # status and metadata ignore the body


class _BodyTooLarge(Exception):
    pass


@dataclasses.dataclass(frozen=True)
class _Route:
    model: str
    api: str  # predict | classify | regress | status | metadata
    version: int | None
    label: str | None


def _parse_version(text: str | None) -> int | None:
    if text is None:
        return None
    if int(text) > _INT64_MAX:
        raise invalid_argument(f"Failed to convert version: {text} to numeric.")
    return int(text)


class RestApi:
    """Builds the aiohttp server of the REST API.

    Args:
        predictor: runs requests and holds the metrics.
        prometheus_path: where the Prometheus page is served (`None`: not served).
        timeout_seconds: requests that take longer answer 504.
        cors: add TF Serving's CORS headers to every answer.
        max_request_bytes: larger bodies (after decompression) answer 413.

    Example:
        ```python
        runner = web.ServerRunner(RestApi(predictor).server(access_log=None))
        await runner.setup()
        await web.TCPSite(runner, "0.0.0.0", 8501).start()
        ```
    """

    def __init__(
        self,
        predictor: Predictor,
        prometheus_path: str | None = None,
        timeout_seconds: float = 30.0,
        cors: bool = False,
        max_request_bytes: int = 64 << 20,
    ):
        self._predictor = predictor
        self._prometheus_path = prometheus_path
        self._timeout = timeout_seconds
        self._cors = cors
        self._max_request_bytes = max_request_bytes

    def server(self, **protocol_args: Any) -> web.Server:
        """The low-level aiohttp server answering every request; run it with `web.ServerRunner`.

        Args:
            **protocol_args: keyword arguments of `aiohttp.web.RequestHandler` (`access_log`,
                `max_line_size`, ...).
        """
        return _JsonErrorServer(self._handle, **protocol_args)

    async def _handle(self, request: web.BaseRequest) -> web.Response:
        if self._prometheus_path is not None and request.path == self._prometheus_path:
            return web.Response(
                body=self._predictor.metrics.render().encode(),
                headers={"Content-Type": "text/plain"},
            )
        path = request.raw_path
        if not _V1.fullmatch(path):
            raise web.HTTPNotFound()
        headers = dict(_CORS_HEADERS) if self._cors else {}
        if request.method == "OPTIONS":
            status = 200 if _ORIGIN.search(request.headers.get("Origin", "")) else 400
            return web.Response(status=status, headers=headers)

        start = time.perf_counter()
        model, api, error = "", "", None
        body, body_error = b"", None
        try:
            body = await self._read_body(request)
        except _BodyTooLarge:
            headers["Content-Type"] = "application/json"
            message = f"Request body exceeds the limit of {self._max_request_bytes} bytes"
            return web.Response(status=413, body=json_tensor.error_body(message).encode(),
                                headers=headers)
        except web.RequestPayloadError as failure:
            # E.g. `Content-Encoding: gzip` on a body that is not gzip. TF Serving reads such a
            # body as empty ("The document is empty"); saying what failed is more useful.
            # aiohttp's parser error (the cause) has the bare message.
            reason = getattr(failure.__cause__, "message", "") or str(failure)
            body_error = invalid_argument(f"Failed to read the request body: {reason}")
        try:
            route = self._route(request.method, path)
            model, api = route.model, route.api
            if body_error is not None and api in _BODY_APIS:
                raise body_error
            async with asyncio.timeout(self._timeout):  # no extra task, unlike wait_for
                text = await self._answer(route, body)
            status = 200
        except ServingError as failure:
            error = failure
        except TimeoutError:
            error = ServingError(
                "DEADLINE_EXCEEDED", f"Request timed out after {self._timeout * 1000:g} ms"
            )
        except Exception as exception:  # still a JSON answer, and the server stays up
            log.exception("Unexpected failure on %s %s", request.method, path)
            error = from_exception(exception)
        if error is not None:
            status, text = error.http_status, json_tensor.error_body(error.message)
        self._predictor.record(model, api, "REST", error, time.perf_counter() - start)
        headers["Content-Type"] = "application/json"
        response = web.Response(status=status, body=text.encode(), headers=headers)
        if body_error is not None:
            # The parser gave up on this body: close the connection rather than frame another
            # request from what follows, and end the stream so that aiohttp does not drain it
            # (re-raising the decode error into its log) after this answer.
            response.force_close()
            request.content.feed_eof()
        return response

    async def _read_body(self, request: web.BaseRequest) -> bytes:
        """The whole body, decompressed as its `Content-Encoding` says.

        Raises:
            _BodyTooLarge: over `max_request_bytes`, before or after decompression.
            aiohttp.web.RequestPayloadError: the body cannot be decoded.
        """
        if (request.content_length or 0) > self._max_request_bytes:
            raise _BodyTooLarge()
        if request.version == HttpVersion11 and (
            request.headers.get("Expect", "").lower() == "100-continue"
        ):  # curl asks before sending bodies over 1 KiB (aiohttp's router would answer this)
            await request.writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            request.writer.output_size = 0  # the response proper has not started
        body = bytearray()
        while chunk := await request.content.readany():
            body += chunk
            if len(body) > self._max_request_bytes:
                raise _BodyTooLarge()
        return bytes(body)

    @staticmethod
    def _route(method: str, path: str) -> _Route:
        """Matches the path as TF Serving does (case-insensitive, query string included)."""
        match = None
        if method == "POST":
            match = _POST.fullmatch(path)
        elif method == "GET":
            match = _GET.fullmatch(path)
        if match is None:
            raise invalid_argument(f"Malformed request: {method} {path}")
        name, version, label, verb = match.groups()
        if method == "POST":
            # TF matches the verb case-insensitively but dispatches on the exact lower-case word.
            if verb not in ("predict", "classify", "regress"):
                raise invalid_argument(f"Malformed request: {method} {path}")
            api = verb
        else:
            api = "metadata" if verb == "metadata" else "status"
        if not name:
            raise invalid_argument("Missing model name in request.")
        return _Route(
            unquote(name), api, _parse_version(version), None if label is None else unquote(label)
        )

    async def _answer(self, route: _Route, body: bytes) -> str:
        if route.api == "status":  # a label does not narrow the status (as in TF Serving)
            status = self._predictor.manager.status(route.model, route.version)
            return json_format.MessageToJson(status, always_print_fields_with_no_presence=True)
        if route.api == "metadata":
            return self._metadata(route.model, route.version, route.label)
        doc = json_tensor.parse_request(body)
        signature_name = json_tensor.signature_name(doc)
        servable = self._predictor.servable(route.model, route.version, route.label)
        key = signature_name or DEFAULT_SIGNATURE
        if key not in servable.signatures:
            raise invalid_argument(f'Serving signature name: "{key}" not found in signature def')
        signature = servable.signatures[key]
        if route.api == "predict":
            inputs, request_format = json_tensor.predict_inputs(
                doc, signature.inputs, signature_name
            )
            outputs = await self._predictor.run(servable, key, inputs, "Predict")
            return json_tensor.predict_response(outputs, request_format)
        serialized = examples.examples_from_json(doc, route.api)
        results = await examples.run(self._predictor, servable, signature, serialized, route.api)
        return examples.results_json(results, route.api)

    def _metadata(self, model: str, version: int | None, label: str | None) -> str:
        servable = self._predictor.servable(model, version, label)
        signature_defs = json_format.MessageToDict(
            servable.signature_defs,
            preserving_proto_field_name=True,
            always_print_fields_with_no_presence=True,
        )
        return json.dumps({
            "model_spec": {"name": model, "signature_name": "", "version": str(servable.version)},
            "metadata": {"signature_def": signature_defs},
        }, indent=1)


class _JsonErrorProtocol(web.RequestHandler):
    """aiohttp's connection protocol, answering its own errors as `{"error": ...}` JSON.

    aiohttp answers a request it cannot parse (request line or header over `max_line_size` /
    `max_field_size`, a bad method, broken chunking) from the protocol, before any handler or
    middleware runs (aio-libs/aiohttp#3287), in plain text; `handle_error` is where it builds that
    answer, and also the 500 for a handler that raised. TF Serving's clients expect JSON errors.
    """

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        # aiohttp's own answer logs the failure and refuses if a response has already started.
        super().handle_error(request, status, exc, message)
        if isinstance(exc, LineTooLong):
            text = "Malformed request: request line or header too long"
            if len(exc.args) > 1:  # LineTooLong(line, limit, actual_size)
                text += f" (over {exc.args[1]} bytes)"
        elif status < 500 and message:
            text = f"Malformed request: {message}"
        else:  # details stay in the log
            text = HTTPStatus(status).phrase
        response = web.Response(
            status=status,
            body=json_tensor.error_body(text).encode(),
            headers={"Content-Type": "application/json"},
        )
        response.force_close()
        return response


class _JsonErrorServer(web.Server):
    """`aiohttp.web.Server` making `_JsonErrorProtocol` connections.

    Args:
        handler: answers each parsed request.
        **protocol_args: keyword arguments of `aiohttp.web.RequestHandler`.
    """

    def __init__(
        self,
        handler: Callable[[web.BaseRequest], Awaitable[web.StreamResponse]],
        **protocol_args: Any,
    ):
        super().__init__(handler)
        self._protocol_args = protocol_args
        self._protocol_loop = asyncio.get_running_loop()

    def __call__(self) -> web.RequestHandler:
        return _JsonErrorProtocol(self, loop=self._protocol_loop, **self._protocol_args)
