"""REST and gRPC clients against a running server: same answers as the SavedModel."""

import pytest
import tensorflow as tf

from serving.client import GrpcClient, RestClient, ServerError, Translation, client_for_url

SENTENCES = ["ein kleiner hund läuft", "guten morgen"]


@pytest.fixture(scope="module", params=["rest", "grpc"])
def client(request, shared_server):
    if request.param == "rest":
        return client_for_url(shared_server.rest_url, "translator")
    return client_for_url(f"grpc://{shared_server.grpc_target}", "translator")


def test_translate_matches_in_process(client, fixture_servable):
    expected = fixture_servable.signatures["serving_default"](text=tf.constant(SENTENCES))
    assert client.translate(SENTENCES) == [t.decode() for t in expected["translation"].numpy()]
    full = client.translate_full(SENTENCES)
    assert full[1] == Translation(
        "morgen guten v1", float(expected["score"][1]),
        tuple(expected["tokens"][1].numpy().tolist()),
    )
    assert client.translate([]) == []


def test_status_metadata_and_version_pinning(client):
    client.wait_until_available(timeout=5)
    assert client.status()["model_version_status"][0]["state"] == "AVAILABLE"
    signature_defs = client.metadata()["metadata"]["signature_def"]["signature_def"]
    assert "serving_default" in signature_defs
    pinned = type(client)(
        client.url if isinstance(client, RestClient) else client.target, "translator",
        label="stable",
    )
    assert pinned.translate(["a b"]) == ["b a v1"]


def test_errors_raise_server_error(client):
    missing = type(client)(
        client.url if isinstance(client, RestClient) else client.target, "nope"
    )
    with pytest.raises(ServerError) as caught:
        missing.translate(["x"])
    assert caught.value.code in (404, "NOT_FOUND")
    assert "Servable not found" in caught.value.message


def test_client_for_url_schemes():
    assert isinstance(client_for_url("http://h:1", "m"), RestClient)
    grpc_client = client_for_url("grpc://h:2", "m", signature_name="ids")
    assert isinstance(grpc_client, GrpcClient) and grpc_client.target == "h:2"
    assert grpc_client.signature_name == "ids"
    with pytest.raises(ValueError):
        client_for_url("ftp://h", "m")
    with pytest.raises(ValueError):
        RestClient("http://h", "m", version=1, label="x")
    assert RestClient("http://h/", "m a", version=3).model_url == "http://h/v1/models/m%20a/versions/3"
