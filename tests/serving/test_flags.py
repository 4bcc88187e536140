"""Server flags named as tensorflow_model_server's, and the config files they point to."""

import argparse

import pytest

from serving.flags import add_server_flags, load_model_config, server_options


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_server_flags(parser)
    return parser.parse_args(argv)


def test_single_model_flags_and_defaults(tmp_path):
    options = server_options(parse(
        "--model_name=translator", f"--model_base_path={tmp_path}", "--rest_api_port=8501"
    ))
    (model,) = options.model_config.model_config_list.config
    assert (model.name, model.base_path) == ("translator", str(tmp_path))
    assert (options.host, options.grpc_port, options.rest_port) == ("127.0.0.1", 8500, 8501)
    assert options.file_system_poll_seconds == 1 and options.rest_timeout_seconds == 30
    assert options.batching is None and options.prometheus_path is None
    assert options.tags == ("serve",) and options.warmup
    assert (options.intra_op_threads, options.inter_op_threads) == (0, 0)  # TensorFlow's choice


def test_boolean_flags_accept_tf_spellings(tmp_path):
    base = f"--model_base_path={tmp_path}"
    assert server_options(parse(base, "--enable_batching")).batching is not None
    assert server_options(parse(base, "--enable_batching=true")).batching is not None
    assert server_options(parse(base, "--enable_batching=false")).batching is None
    with pytest.raises(SystemExit):
        parse(base, "--enable_batching=maybe")


def test_config_files(tmp_path):
    (tmp_path / "models.config").write_text(
        'model_config_list { config { name: "a" base_path: "rel/a" model_platform: "tensorflow"'
        ' version_labels { key: "stable" value: 1 } } config { name: "b" base_path: "/b" } }'
    )
    (tmp_path / "batching.txt").write_text(
        "max_batch_size { value: 16 } batch_timeout_micros { value: 1000 } "
        "pad_variable_length_inputs: true"
    )
    (tmp_path / "monitoring.config").write_text("prometheus_config { enable: true }")
    options = server_options(parse(
        f"--model_config_file={tmp_path / 'models.config'}",
        "--enable_batching",
        f"--batching_parameters_file={tmp_path / 'batching.txt'}",
        f"--monitoring_config_file={tmp_path / 'monitoring.config'}",
        "--model_name=ignored_with_a_config_file",
    ))
    a, b = options.model_config.model_config_list.config
    assert a.base_path.endswith("/rel/a") and a.base_path.startswith("/")
    assert dict(a.version_labels) == {"stable": 1} and b.name == "b"
    assert options.batching.max_batch_size.value == 16
    assert options.prometheus_path == "/monitoring/prometheus/metrics"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "Both --model_base_path and --model_config_file are empty"),
        (("--model_base_path=/m", "--batching_parameters_file=/x"), "without --enable_batching"),
        (("--model_base_path=/m", "--rest_api_port=8500"), "must differ"),
        (("--model_base_path=/m", "--tensorflow_intra_op_parallelism=-1"), "must be >= 0"),
    ],
)
def test_inconsistent_flags(argv, message):
    with pytest.raises(ValueError, match=message):
        server_options(parse(*argv))


def test_bad_model_configs(tmp_path):
    path = tmp_path / "models.config"
    path.write_text("model_config_list { config { name: 'a' } }")
    with pytest.raises(ValueError, match="needs a name and a base_path"):
        load_model_config(str(path))
    path.write_text("model_config_list { config { name: 'a' base_path: '/a' } "
                    "config { name: 'a' base_path: '/b' } }")
    with pytest.raises(ValueError, match="Duplicate model names"):
        load_model_config(str(path))
    path.write_text("not a proto")
    with pytest.raises(ValueError, match="not a valid ModelServerConfig"):
        load_model_config(str(path))
