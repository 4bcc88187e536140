"""serving.verify: the same requests to two servers, every difference printed.

Two local servers on the same export must answer every request the same (exit 0); a server on
another export (another version with other outputs) must be reported (exit 1); an unreachable
server is "could not compare" (exit 2). The local servers run with the flags and files of
serving/deploy/docker-compose.yml, as verify_tf_serving.sh runs them.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from serving_fixtures import write_fixture_model

from serving import verify
from serving.compose_flags import local_flags
from serving.process import LocalServer, free_port

COMPOSE = Path(__file__).resolve().parents[2] / "serving" / "deploy" / "docker-compose.yml"

# What the contract says each request gets (HTTP status and whether the answer is JSON; gRPC
# code), for a server serving the fixture export at version 1 with the deploy files.
REST_EXPECTED = {
    **dict.fromkeys([
        "status", "status of the served version", "status ignores a label", "metadata",
        "metadata of the served version", "predict, row format",
        "predict, row format with named inputs", "predict, row format, base64 strings",
        "predict, columnar format", "predict, columnar format, plain list",
        "predict at the served version, signature named",
        "predict ignores unknown top-level keys",
        # TF Serving feeds the tensor to the graph without checking the signature's shape:
        # the fixture runs on a [2, 1] string tensor
        "wrong rank (model-dependent)",
    ], (200, True)),
    **dict.fromkeys([
        "status of an unknown model", "status of an unknown version",
        "metadata of an unknown model", "metadata of an unknown version",
        "predict on an unknown model", "predict on an unknown version",
    ], (404, True)),
    **dict.fromkeys([
        "metadata of an unknown label", "predict on an unknown label",
        "predict on an unknown signature", "malformed JSON",
        "malformed JSON to an unknown model (parsed first)", "empty body", "body not an object",
        "signature_name not a string", "both instances and inputs",
        "neither instances nor inputs", "instances not a list", "empty instances",
        "wrong input name, row format", "wrong input name, columnar format",
        "wrong dtype, row format", "wrong dtype, columnar format", "undecodable base64",
        "ragged instances", "GET on a predict URL",
        "POST on a status URL", "unknown verb", "query string on a predict URL",
        "trailing slash", "no model name",
    ], (400, True)),
    "path outside /v1/": (404, False),
    "Prometheus metrics page": (200, False),
}
GRPC_EXPECTED = {
    **dict.fromkeys([
        "status", "status of the served version", "status ignores a label", "metadata",
        "metadata of the served version", "predict",
        "predict at the served version, signature named", "predict with an output filter",
        "wrong rank (model-dependent)",
    ], "OK"),
    **dict.fromkeys([
        "status of an unknown model", "status of an unknown version",
        "metadata of an unknown model", "metadata of an unknown version",
        "predict on an unknown model", "predict on an unknown version",
    ], "NOT_FOUND"),
    **dict.fromkeys([
        "metadata of an unknown label", "metadata without a field",
        "metadata of an unsupported field", "predict on an unknown label",
        "predict without a model spec", "wrong input name", "an extra input", "wrong dtype",
        "an unknown output in the filter", "a repeated output in the filter",
    ], "INVALID_ARGUMENT"),
    "predict on an unknown signature": "FAILED_PRECONDITION",
}


def start_server(base_path: Path, workdir: Path) -> LocalServer:
    flags = local_flags(COMPOSE, workdir, {"/models/translator": base_path})
    server = LocalServer(flags, workdir / "server.log")
    server.wait_ready("translator")
    return server


@pytest.fixture(scope="module")
def servers(fixture_models, tmp_path_factory):
    """Two servers on the fixture export (version 1, tag v1), one on another (version 2, v2)."""
    other = tmp_path_factory.mktemp("other_export")
    write_fixture_model(other / "2", "v2")
    started = []
    try:
        for base_path in (fixture_models / "translator", fixture_models / "translator", other):
            started.append(start_server(base_path, tmp_path_factory.mktemp("server")))
        yield started
    finally:
        for server in started:
            server.stop()


def run_main(left: LocalServer, right: LocalServer, capsys) -> tuple[int, str]:
    status = verify.main([
        "--left-rest", left.rest_url, "--left-grpc", left.grpc_target,
        "--right-rest", right.rest_url, "--right-grpc", right.grpc_target, "--wait", "30",
    ])
    return status, capsys.readouterr().out


@pytest.mark.slow
def test_every_request_gets_the_contract_status(servers):
    server = verify.Server(servers[0].rest_url, servers[0].grpc_target)
    try:
        answers = {
            (type(case).__name__, case.name): server.answer(case)
            for case in verify.cases("translator", 1)
        }
    finally:
        server.close()
    rest = {name: (a["status"], a["json"]) for (kind, name), a in answers.items()
            if kind == "RestCase"}
    grpc = {name: a["status"] for (kind, name), a in answers.items() if kind == "GrpcCase"}
    assert rest == REST_EXPECTED
    assert grpc == GRPC_EXPECTED
    row = answers["RestCase", "predict, row format"]["body"]["predictions"]
    assert [p["translation"] for p in row] == [
        " ".join(reversed(s.split())) + " v1" for s in verify.SENTENCES
    ]
    outputs = answers["GrpcCase", "predict with an output filter"]["response"]["outputs"]
    assert set(outputs) == {"score"}
    assert outputs["score"]["dtype"] == "DT_FLOAT" and outputs["score"]["shape"] == [3]
    assert outputs["score"]["fields"] == ["dtype", "float_val", "tensor_shape"]


@pytest.mark.slow
def test_two_servers_on_the_same_export_answer_the_same(servers, capsys):
    status, output = run_main(servers[0], servers[1], capsys)
    assert status == 0, output
    assert "DIFF" not in output
    count = len(verify.cases("translator", 1))
    assert f"all {count} requests answered the same" in output
    assert output.count("same  ") == count


@pytest.mark.slow
def test_a_different_export_is_reported(servers, capsys):
    status, output = run_main(servers[0], servers[2], capsys)
    assert status == 1
    lines = output.splitlines()
    assert "DIFF  REST  predict, row format" in lines
    assert "DIFF  gRPC  predict" in lines
    assert "DIFF  REST  status" in lines
    status_diff = lines.index("DIFF  REST  status") + 1
    assert lines[status_diff] == "        body.model_version_status[0].version: '1' vs '2'"
    assert any("v1'" in line and "v2'" in line and "translation" in line for line in lines)
    # the served version 1 exists only on the left
    assert "DIFF  REST  predict at the served version, signature named" in lines
    assert "        status: 200 vs 404" in lines
    # errors that do not depend on the export answer the same
    assert "same  REST  predict on an unknown model" in lines
    assert "same  gRPC  predict on an unknown signature" in lines
    assert lines[-1].endswith("requests answered differently")


def test_an_unreachable_server_is_could_not_compare(capsys):
    closed = f"127.0.0.1:{free_port()}"
    argv = ["--left-rest", f"http://{closed}", "--left-grpc", closed,
            "--right-rest", f"http://{closed}", "--right-grpc", closed]
    assert verify.main(argv) == 2
    assert "error: left server" in capsys.readouterr().err


def test_differences_compare_types_and_values():
    left = {"a": [1, 2.0, math.nan], "b": {"c": True}, "d": "x"}
    assert list(verify.differences(left, left)) == []
    right = {"a": [1.0, 2.0], "b": {"c": 1}, "e": "x"}
    assert list(verify.differences(left, right)) == [
        "a: 3 items vs 2 items",
        "a[0]: 1 vs 1.0",
        "b.c: True vs 1",
        "d: only left has it ('x')",
        "e: only right has it ('x')",
    ]


def test_error_messages_are_compared_whole_unless_the_contract_pins_a_part():
    exact = verify.RestCase("exact", "GET", "/")
    pinned = verify.RestCase("pinned", "GET", "/", pinned="JSON Parse error: ")
    left = {"status": 400, "json": True, "error": "JSON Parse error: Missing a name at offset: 1"}
    right = {"status": 400, "json": True, "error": "JSON Parse error: Expecting value at offset: 1"}
    assert verify.answer_differences(pinned, left, right) == []
    assert verify.answer_differences(exact, left, right) == [
        f"error: {left['error']!r} vs {right['error']!r}"
    ]
    wrong = dict(right, error="Bad JSON")
    assert verify.answer_differences(pinned, left, wrong) == [
        "error (right): 'Bad JSON' lacks the contract's 'JSON Parse error: '"
    ]
    assert verify.answer_differences(pinned, left, dict(right, status=404)) == [
        "status: 400 vs 404"
    ]
