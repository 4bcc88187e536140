"""Load generation for the serving benchmarks (`serve.py`, `soak.py`): asyncio clients for the
REST and gRPC APIs in one thread, so that the load takes little of the CPUs it shares with the
server and the figures are the server's. Measured at 32 clients: 0.12 ms of CPU per request
(REST or gRPC) against 0.69 ms for `serving.client.RestClient` and 0.43 ms for `GrpcClient`, one
thread per client.

Example:
    async with AsyncClients(rest_url, grpc_target, "translator") as clients:
        text, version = await clients.translate("Ein Hund.", GRPC)
"""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import grpc
import numpy as np
from tensorflow.core.framework import types_pb2
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

REST_ROW, REST_COLUMNAR, GRPC = "REST row", "REST columnar", "gRPC"
PREDICT_METHOD = "/tensorflow.serving.PredictionService/Predict"


class AsyncClients:
    """One aiohttp session and one gRPC channel to a server, shared by any number of coroutines.

    Args:
        rest_url: the server's REST root, e.g. `http://127.0.0.1:8501`.
        grpc_target: `host:port` of its gRPC port.
        model: the model to address (newest version).
        input_name / output_name: the translator signature's string input and output.
        timeout: seconds per request.
    """

    def __init__(self, rest_url: str, grpc_target: str, model: str, input_name: str = "text",
                 output_name: str = "translation", timeout: float = 600):
        self.model, self.input_name, self.output_name = model, input_name, output_name
        self.models_url = f"{rest_url}/v1/models/"
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None
        self._grpc_target = grpc_target
        self._channel: grpc.aio.Channel | None = None

    async def __aenter__(self) -> AsyncClients:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),  # one connection per concurrent request
            timeout=aiohttp.ClientTimeout(total=self._timeout),
        )
        self._channel = grpc.aio.insecure_channel(
            self._grpc_target, options=[("grpc.max_send_message_length", 64 << 20)]
        )
        self._stub = prediction_service_pb2_grpc.PredictionServiceStub(self._channel)
        self._raw_predict = self._channel.unary_unary(
            PREDICT_METHOD, response_deserializer=predict_pb2.PredictResponse.FromString
        )
        return self

    async def __aexit__(self, *exc_info) -> None:
        await self._session.close()
        await self._channel.close()

    async def rest(self, method: str, path: str, body: bytes = b"") -> tuple[int, dict]:
        """Sends raw bytes to `/v1/models/<path>`; returns (HTTP status, parsed JSON or
        `{"error": <start of the text>}` when the answer is not JSON)."""
        async with self._session.request(method, self.models_url + path, data=body) as response:
            text = await response.read()
        try:
            return response.status, json.loads(text)
        except ValueError:
            return response.status, {"error": text[:200].decode(errors="replace")}

    async def predict_bytes(self, body: bytes) -> predict_pb2.PredictResponse:
        """Sends raw bytes as a gRPC PredictRequest (raises `grpc.aio.AioRpcError`)."""
        return await self._raw_predict(body, timeout=self._timeout)

    async def translate(self, sentence: str, protocol: str) -> tuple[str, int | None]:
        """Translates one sentence; returns (translation, serving version; None over REST).

        Raises:
            RuntimeError: a REST answer other than 200.
            grpc.aio.AioRpcError: a gRPC error.
        """
        if protocol == GRPC:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = self.model
            proto = request.inputs[self.input_name]
            proto.dtype = types_pb2.DT_STRING
            proto.tensor_shape.dim.add(size=1)
            proto.string_val.append(sentence.encode())
            response = await self._stub.Predict(request, timeout=self._timeout)
            return (response.outputs[self.output_name].string_val[0].decode(),
                    response.model_spec.version.value)
        if protocol == REST_ROW:
            body = {"instances": [sentence]}
        else:
            body = {"inputs": {self.input_name: [sentence]}}
        status, answer = await self.rest("POST", f"{self.model}:predict",
                                         json.dumps(body).encode())
        if status != 200:
            raise RuntimeError(f"HTTP {status}: {answer.get('error', answer)}")
        if protocol == REST_ROW:
            return answer["predictions"][0][self.output_name], None
        return answer["outputs"][self.output_name][0], None


async def closed_loop(clients: AsyncClients, sentences: list[str], concurrency: int,
                      requests: int, protocol: str = REST_COLUMNAR) -> dict:
    """`requests` single-sentence requests from `concurrency` clients, each sending its next
    request when its last one is answered.

    Returns:
        {"requests", "wall" (seconds), "latencies" (seconds, one per request)}.
    """
    latencies: list[float] = []
    counter = iter(range(requests))

    async def client() -> None:
        for index in counter:
            start = time.perf_counter()
            await clients.translate(sentences[index % len(sentences)], protocol)
            latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return {"requests": requests, "wall": time.perf_counter() - start,
            "latencies": np.array(latencies)}
