"""The server process: startup, version swaps under load, broken versions, batching, SIGTERM.

Each test starts its own server subprocess; these are the slow, end-to-end tests.
"""

import os
import re
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from serving_fixtures import SERVE_COMMAND, write_fixture_model

from serving.client import GrpcClient, RestClient, ServerError
from serving.process import LocalServer

pytestmark = pytest.mark.slow


def wait_for(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(what)


def refuses(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def metric(page: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", page, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def publish(source, base, version: int, staging) -> None:
    """Writes elsewhere, then renames into place: never a half-written version."""
    shutil.copytree(source, staging / str(version))
    os.rename(staging / str(version), base / str(version))


def test_versions_swap_without_failed_requests(fixture_models, tmp_path):
    base, staging = tmp_path / "translator", tmp_path / "staging"
    base.mkdir()
    staging.mkdir()
    server = LocalServer(
        [f"--model_base_path={base}", "--model_name=translator",
         "--file_system_poll_wait_seconds=0.2", "--max_num_load_retries=0"],
        tmp_path / "server.log", command=SERVE_COMMAND,
    )
    try:
        # No version yet: the server waits without opening its ports.
        wait_for(lambda: "Waiting for a loadable version" in server.log(), 90, server.log())
        assert server.process.poll() is None
        assert refuses(server.rest_port) and refuses(server.grpc_port)
        publish(fixture_models / "translator" / "1", base, 1, staging)
        server.wait_ready("translator")

        clients = [RestClient(server.rest_url, "translator"),
                   GrpcClient(server.grpc_target, "translator")]
        answers = {id(c): [] for c in clients}
        failures, stop = [], threading.Event()

        def hammer(client):
            while not stop.is_set():
                try:
                    answers[id(client)].append(client.translate(["a b c"])[0])
                except Exception as error:  # any failed request fails the test
                    failures.append(repr(error))

        threads = [threading.Thread(target=hammer, args=(c,)) for c in clients]
        for thread in threads:
            thread.start()
        write_fixture_model(staging / "2", "v2")
        os.rename(staging / "2", base / "2")
        try:
            wait_for(lambda: all(a and a[-1] == "c b a v2" for a in answers.values()), 60,
                     "answers never switched to version 2")
            time.sleep(0.5)
        finally:
            stop.set()
            for thread in threads:
                thread.join()
        assert failures == []
        for sequence in answers.values():
            switch = sequence.index("c b a v2")
            assert set(sequence[:switch]) == {"c b a v1"}
            assert set(sequence[switch:]) == {"c b a v2"}
        status = clients[0].status()["model_version_status"]
        assert [(s["version"], s["state"]) for s in status] == [("2", "AVAILABLE"), ("1", "END")]

        # A corrupt version: the old one keeps serving, the status shows the error.
        (staging / "3").mkdir()
        (staging / "3" / "saved_model.pb").write_bytes(b"not a SavedModel")
        os.rename(staging / "3", base / "3")
        broken = wait_for(
            lambda: [s for s in clients[0].status()["model_version_status"]
                     if s["version"] == "3" and s["state"] == "END"],
            30, "version 3 never failed",
        )[0]
        assert broken["status"]["error_code"] != "OK" and broken["status"]["error_message"]
        assert clients[0].translate(["x y"]) == ["y x v2"]
        assert clients[1].translate(["x y"]) == ["y x v2"]
    finally:
        assert server.stop() == 0


def test_batching_merges_concurrent_requests_and_sigterm_drains(fixture_models, tmp_path):
    (tmp_path / "batching.txt").write_text(
        "max_batch_size { value: 16 }\nbatch_timeout_micros { value: 1000000 }\n"
        "num_batch_threads { value: 1 }\n"
    )
    server = LocalServer(
        [f"--model_base_path={fixture_models / 'translator'}", "--model_name=translator",
         "--enable_batching", f"--batching_parameters_file={tmp_path / 'batching.txt'}",
         f"--monitoring_config_file={fixture_models / 'monitoring.config'}",
         "--rest_api_enable_cors_support", "--tensorflow_intra_op_parallelism=1",
         "--tensorflow_inter_op_parallelism=3"],
        tmp_path / "server.log",
    )
    try:
        server.wait_ready("translator")
        # As TensorFlow reports them after the flags were applied.
        assert "TensorFlow threads: intra-op 1, inter-op 3" in server.log()
        rest = RestClient(server.rest_url, "translator")
        grpc_client = GrpcClient(server.grpc_target, "translator")
        sentences = [f"satz nummer {i}" for i in range(8)]
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(
                lambda i: (rest if i % 2 else grpc_client).translate([sentences[i]])[0], range(8)
            ))
        assert results == [f"{i} nummer satz v1" for i in range(8)]
        page = requests.get(f"{server.rest_url}/monitoring/prometheus/metrics", timeout=10).text
        prefix = ":tensorflow:serving:batching_session:"
        assert metric(page, prefix + "input_batch_size_count{}") == 8
        assert metric(page, prefix + "processed_batch_size_sum{}") == 8
        assert metric(page, prefix + "processed_batch_size_count{}") <= 2  # merged

        preflight = requests.options(f"{server.rest_url}/v1/models/translator:predict",
                                     headers={"Origin": "http://example.org"}, timeout=10)
        assert preflight.status_code == 200
        assert preflight.headers["Access-Control-Allow-Origin"] == "*"

        # Requests waiting in the batch queue when SIGTERM arrives still complete.
        with ThreadPoolExecutor(4) as pool:
            futures = [pool.submit((rest if i % 2 else grpc_client).translate, [f"spät {i}"])
                       for i in range(4)]
            time.sleep(0.4)
            server.process.terminate()
            assert [f.result()[0] for f in futures] == [f"{i} spät v1" for i in range(4)]
        assert server.process.wait(30) == 0
        assert "Server stopped" in server.log()
        with pytest.raises((ServerError, OSError, requests.ConnectionError)):
            rest.translate(["too late"])
    finally:
        server.stop()
