"""Fixtures for the serving tests: a fixture SavedModel, its config files, a shared server."""

from __future__ import annotations

from pathlib import Path

import pytest
from serving_fixtures import write_fixture_model

from serving.process import LocalServer


@pytest.fixture(scope="session")
def fixture_models(tmp_path_factory) -> Path:
    """`<root>/translator/1` (tag "v1") and the deploy-style config files pointing at it."""
    root = tmp_path_factory.mktemp("models")
    write_fixture_model(root / "translator" / "1", "v1")
    (root / "models.config").write_text(
        'model_config_list { config { name: "translator" base_path: "%s" '
        'model_platform: "tensorflow" version_labels { key: "stable" value: 1 } } }'
        % (root / "translator")
    )
    (root / "monitoring.config").write_text(
        'prometheus_config { enable: true, path: "/monitoring/prometheus/metrics" }'
    )
    return root


@pytest.fixture(scope="session")
def shared_server(fixture_models, tmp_path_factory):
    """One server for the read-only REST / gRPC / client tests."""
    log_path = tmp_path_factory.mktemp("logs") / "shared_server.log"
    server = LocalServer(
        [
            f"--model_config_file={fixture_models / 'models.config'}",
            f"--monitoring_config_file={fixture_models / 'monitoring.config'}",
            "--max_request_bytes=200000",
            "--max_instances_per_request=64",
            "--rest_api_timeout_in_ms=20000",
        ],
        log_path,
    )
    try:
        server.wait_ready("translator")
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def fixture_servable(fixture_models):
    """The fixture SavedModel loaded in-process: the reference answers."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401

    return tf.saved_model.load(str(fixture_models / "translator" / "1"))
