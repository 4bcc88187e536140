"""serving.compose_flags: a compose service's flags for the local server, container paths mapped to
host paths (the model config file rewritten)."""

from pathlib import Path

import pytest
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving.compose_flags import host_path, local_flags, main

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "serving" / "deploy"


def base_paths(config_file: Path) -> list[str]:
    config = text_format.Parse(
        config_file.read_text(), model_server_config_pb2.ModelServerConfig()
    )
    return [model.base_path for model in config.model_config_list.config]


def test_deploy_service_flags_point_at_host_files(tmp_path):
    export = tmp_path / "export"
    flags = local_flags(DEPLOY / "docker-compose.yml", tmp_path / "work",
                        {"/models/translator": export})
    values = dict(flag.split("=", 1) for flag in flags)
    assert values["--batching_parameters_file"] == str(DEPLOY / "batching_parameters.txt")
    assert values["--monitoring_config_file"] == str(DEPLOY / "monitoring.config")
    assert values["--file_system_poll_wait_seconds"] == "5"  # not a path: unchanged
    config_file = Path(values["--model_config_file"])
    assert config_file == tmp_path / "work" / "models.config"
    assert base_paths(config_file) == [str(export)]
    # the rest of the config is the deploy file's
    deployed = (DEPLOY / "models.config").read_text().replace("/models/translator", str(export))
    assert config_file.read_text() == text_format.MessageToString(text_format.Parse(
        deployed, model_server_config_pb2.ModelServerConfig()
    ))


def test_compose_mounts_are_used_without_overrides(tmp_path):
    flags = local_flags(DEPLOY / "docker-compose.yml", tmp_path)
    assert f"--model_config_file={tmp_path / 'models.config'}" in flags
    assert base_paths(tmp_path / "models.config") == [str(ROOT / "models" / "translator")]


def test_long_volume_syntax_and_path_prefixes(tmp_path):
    compose = tmp_path / "compose.yml"
    compose.write_text(
        "services:\n  tfs:\n    volumes:\n"
        "      - {type: bind, source: ./m, target: /models}\n"
        "      - ./deep:/models/deep:ro\n"
        "    command: [--monitoring_config_file=/models/deep/monitoring.config,"
        " --saved_model_tags=/modelsX]\n"
    )
    flags = local_flags(compose, tmp_path / "work", service_name="tfs")
    assert flags == [
        f"--monitoring_config_file={tmp_path / 'deep' / 'monitoring.config'}",  # longest mount
        "--saved_model_tags=/modelsX",  # a prefix of the name, not of the path
    ]
    mounts = {"/models": Path("/host")}
    assert host_path("/models", mounts) == "/host"
    assert host_path("/models/a/1", mounts) == "/host/a/1"
    assert host_path("/elsewhere", mounts) == "/elsewhere"


def test_cli_prints_one_flag_per_line(tmp_path, capsys):
    assert main([str(DEPLOY / "docker-compose.yml"), "--workdir", str(tmp_path),
                 "--mount", f"/models/translator={tmp_path}"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == local_flags(DEPLOY / "docker-compose.yml", tmp_path,
                                {"/models/translator": tmp_path})


def test_cli_errors_name_the_file_or_flag(tmp_path, capsys):
    assert main([str(DEPLOY / "docker-compose.yml"), "--workdir", str(tmp_path),
                 "--service", "web"]) == 2
    assert "docker-compose.yml: no service 'web' (it has: translator)" in capsys.readouterr().err
    broken = tmp_path / "models.config"
    broken.write_text("model_config_list { config { nme: 'x' } }")
    compose = tmp_path / "compose.yml"
    compose.write_text(
        f"services:\n  translator:\n    volumes: ['{broken}:/config/models.config']\n"
        "    command: [--model_config_file=/config/models.config]\n"
    )
    assert main([str(compose), "--workdir", str(tmp_path / "work")]) == 2
    assert f"{broken}: 1:" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main([str(compose), "--workdir", str(tmp_path), "--mount", "/models"])
    assert exit_info.value.code == 2
    assert "--mount '/models': expected CONTAINER=HOST" in capsys.readouterr().err
