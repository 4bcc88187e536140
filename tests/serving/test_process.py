"""`LocalServer`: the server as a child process on free ports."""

import pytest

from serving.process import LocalServer


@pytest.mark.slow
def test_a_server_that_cannot_load_its_model_exits_1_and_wait_ready_shows_the_log(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "saved_model.pb").write_bytes(b"garbage")
    server = LocalServer(
        [f"--model_base_path={tmp_path / 'm'}", "--max_num_load_retries=0"], tmp_path / "log"
    )
    assert server.rest_port != server.grpc_port
    with pytest.raises(RuntimeError, match=r"1 model\(s\) did not become available"):
        server.wait_ready("default", timeout=90)
    assert server.stop() == 1
