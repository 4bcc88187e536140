"""Run the local server as a child process on free loopback ports (demo, notebooks, tests, bench).

Example:
    >>> flags = ["--model_name=translator", "--model_base_path=models/t"]
    >>> with LocalServer(flags) as server:  # doctest: +SKIP
    ...     server.wait_ready("translator")
    ...     requests.post(f"{server.rest_url}/v1/models/translator:predict", json=...)
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on `host` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class LocalServer:
    """`python -m serving ARGS` on free gRPC and REST ports of 127.0.0.1, stopped with SIGTERM.

    Args:
        args: server flags other than `--port` and `--rest_api_port` (those are chosen here).
        log_path: where the server's output goes; default: a temporary file.
        command: the program to start (default `python -m serving`; e.g. the
            `keras-transformer serve` command line).
    """

    def __init__(
        self,
        args: list[str],
        log_path: str | os.PathLike | None = None,
        command: list[str] | None = None,
    ):
        self.grpc_port, self.rest_port = free_port(), free_port()
        self.rest_url = f"http://127.0.0.1:{self.rest_port}"
        self.grpc_target = f"127.0.0.1:{self.grpc_port}"
        if log_path is None:
            handle, log_path = tempfile.mkstemp(prefix="serving-", suffix=".log")
            os.close(handle)
        self.log_path = Path(log_path)
        argv = [
            *(command or [sys.executable, "-m", "serving"]),
            f"--port={self.grpc_port}", f"--rest_api_port={self.rest_port}", *args,
        ]
        python_path = os.pathsep.join(
            filter(None, [str(PROJECT_ROOT), os.environ.get("PYTHONPATH")])
        )
        env = dict(os.environ, PYTHONPATH=python_path, TF_CPP_MIN_LOG_LEVEL="2")
        self._log = open(self.log_path, "wb")  # noqa: SIM115  (closed in stop())
        self.process = subprocess.Popen(
            argv, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def log(self) -> str:
        """Everything the server printed so far."""
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, model_name: str, timeout: float = 120) -> None:
        """Waits until the REST port answers the model's status (the server opens its ports only
        once the model is loaded). Raises with the server's log if it exits or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if requests.get(f"{self.rest_url}/v1/models/{model_name}", timeout=2).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"server not ready after {timeout} s:\n{self.log()}")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM (the server finishes in-flight requests), SIGKILL after `timeout` seconds."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.process.returncode

    def __enter__(self) -> LocalServer:
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
