"""The TensorFlow Serving deployment files parse, agree with each other, and our local server
accepts the same flags and config files; the GPU variants differ only in image and devices;
verify_tf_serving.sh says so when Docker cannot run."""

import argparse
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving.batching import BatchOptions
from serving.compose_flags import local_flags
from serving.flags import add_server_flags, server_options
from serving.protos import BatchingParameters, MonitoringConfig

DEPLOY = Path(__file__).resolve().parents[2] / "serving" / "deploy"
SCRIPT = DEPLOY / "verify_tf_serving.sh"


def read_proto(name, proto_class):
    return text_format.Parse((DEPLOY / name).read_text(), proto_class())


@pytest.fixture(scope="module")
def compose():
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]["translator"]


@pytest.fixture(scope="module")
def kube():
    documents = yaml.safe_load_all((DEPLOY / "kubernetes.yaml").read_text())
    return {doc["kind"]: doc for doc in documents}


def read_yaml(path):
    return yaml.safe_load((DEPLOY / path).read_text())


def test_config_files_parse_as_tf_serving_protos():
    models = read_proto("models.config", model_server_config_pb2.ModelServerConfig)
    (model,) = models.model_config_list.config
    assert (model.name, model.base_path, model.model_platform) == (
        "translator", "/models/translator", "tensorflow"
    )
    assert model.model_version_policy.latest.num_versions == 1
    batching = read_proto("batching_parameters.txt", BatchingParameters)
    assert batching.max_batch_size.value == 64 and batching.batch_timeout_micros.value == 5000
    assert BatchOptions.from_proto(batching).num_batch_threads == 4
    monitoring = read_proto("monitoring.config", MonitoringConfig)
    assert monitoring.prometheus_config.enable
    assert monitoring.prometheus_config.path == "/monitoring/prometheus/metrics"


def test_compose_service(compose):
    assert compose["image"].startswith("tensorflow/serving:")
    assert set(compose["ports"]) == {"8500:8500", "8501:8501"}
    mounts = {volume.split(":")[1]: volume.split(":")[0] for volume in compose["volumes"]}
    assert mounts["/models/translator"] == "../../models/translator"
    for flag in compose["command"]:
        if flag.split("=")[1].startswith("/config/"):
            mounted = mounts[flag.split("=")[1]]
            assert (DEPLOY / mounted).is_file(), mounted


def test_local_server_accepts_the_compose_flags(tmp_path):
    parser = argparse.ArgumentParser()
    add_server_flags(parser)
    flags = local_flags(DEPLOY / "docker-compose.yml", tmp_path)
    options = server_options(parser.parse_args(flags))
    assert options.model_config.model_config_list.config[0].name == "translator"
    assert options.batching.max_batch_size.value == 64
    assert options.prometheus_path == "/monitoring/prometheus/metrics"
    assert options.model_config_poll_seconds == 60 and options.file_system_poll_seconds == 5


def test_kubernetes_objects(kube, compose):
    assert set(kube) == {
        "PersistentVolumeClaim", "Deployment", "Service", "HorizontalPodAutoscaler"
    }
    deployment = kube["Deployment"]
    pod = deployment["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["image"] == compose["image"]
    assert container["args"] == compose["command"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert ports == {"grpc": 8500, "http": 8501}
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/v1/models/translator", "port": "http"}
    assert container["resources"]["requests"]["cpu"]  # the HPA scales on CPU utilisation
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    export = volumes[mounts["/models/translator"]]["persistentVolumeClaim"]["claimName"]
    assert export == kube["PersistentVolumeClaim"]["metadata"]["name"]
    assert volumes[mounts["/config"]]["configMap"]["name"] == "translator-serving-config"

    labels = pod["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    service = kube["Service"]
    assert service["spec"]["selector"] == labels
    assert {p["port"] for p in service["spec"]["ports"]} == {8500, 8501}
    hpa = kube["HorizontalPodAutoscaler"]["spec"]
    assert hpa["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert hpa["scaleTargetRef"]["kind"] == "Deployment"
    assert 1 <= hpa["minReplicas"] < hpa["maxReplicas"]


def test_compose_gpu_variant_changes_only_image_and_devices(compose):
    (name, gpu), = read_yaml("docker-compose.gpu.yml")["services"].items()
    assert name == "translator"
    assert set(gpu) == {"image", "deploy"}  # flags, files, ports and export from the CPU file
    assert gpu["image"] == compose["image"] + "-gpu"  # the same pinned release
    (device,) = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert device == {"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}


def test_kubernetes_gpu_variant_patches_the_deployment(kube, compose):
    assert read_yaml("kustomization.yaml")["resources"] == ["kubernetes.yaml"]
    overlay = read_yaml("gpu/kustomization.yaml")
    assert overlay["resources"] == [".."]
    (patch_file,) = [patch["path"] for patch in overlay["patches"]]
    patch = read_yaml(Path("gpu") / patch_file)
    deployment = kube["Deployment"]
    assert patch["kind"] == "Deployment"
    assert patch["metadata"]["name"] == deployment["metadata"]["name"]
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    (base_container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["name"] == base_container["name"]  # merged into it, by name
    assert container["image"] == base_container["image"] + "-gpu" == compose["image"] + "-gpu"
    assert container["resources"] == {"limits": {"nvidia.com/gpu": 1}}
    (toleration,) = patch["spec"]["template"]["spec"]["tolerations"]
    assert toleration["key"] == "nvidia.com/gpu"


def test_ci_workflow_installs_the_project_then_runs_the_script():
    workflow = yaml.safe_load((DEPLOY.parents[1] / ".github/workflows/tf-serving.yml").read_text())
    (job,) = workflow["jobs"].values()
    assert job["runs-on"].startswith("ubuntu-")  # GitHub's Ubuntu runners have Docker
    runs = [step.get("run") for step in job["steps"]]
    assert runs.index("make venv") < runs.index("serving/deploy/verify_tf_serving.sh")


def fake_docker(bin_dir: Path, log: Path, info_status: int = 0) -> None:
    """A `docker` that logs its arguments (and the compose files it is given) and fails
    `docker info` with `info_status` and `docker compose up`."""
    script = bin_dir / "docker"
    script.write_text(f"""#!/bin/bash
echo "docker $*" >>{log}
[[ $1 == info ]] && exit {info_status}
for arg; do [[ $arg == *.yml && -f $arg ]] && cat "$arg" >>{log}; done
[[ " $* " == *" up "* ]] && exit 1
exit 0
""")
    script.chmod(0o755)


def run_script(path: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=path)
    return subprocess.run(
        [shutil.which("bash"), str(SCRIPT), *args], env=env, capture_output=True, text=True,
        timeout=120,
    )


def test_script_without_docker_exits_2(tmp_path):
    (tmp_path / "dirname").symlink_to(shutil.which("dirname"))  # all it needs before the check
    result = run_script(str(tmp_path))
    assert result.returncode == 2
    assert "docker is not installed here" in result.stderr
    assert "nothing compared" in result.stderr


def test_script_without_a_docker_daemon_exits_2(tmp_path):
    log = tmp_path / "docker.log"
    fake_docker(tmp_path, log, info_status=1)
    result = run_script(f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    assert result.returncode == 2
    assert "the Docker daemon is not reachable" in result.stderr
    assert log.read_text() == "docker info\n"  # nothing started


def test_script_stops_what_it_started_when_compose_fails(tmp_path, fixture_models):
    log = tmp_path / "docker.log"
    fake_docker(tmp_path, log)
    export = fixture_models / "translator"
    result = run_script(f"{tmp_path}{os.pathsep}{os.environ['PATH']}", "--export", str(export))
    assert result.returncode == 2, result.stderr
    assert "docker compose up failed; nothing compared" in result.stderr
    calls = [line for line in log.read_text().splitlines() if line.startswith("docker ")]
    assert calls[:2] == ["docker info", "docker compose version"]
    up, down = calls[2:]
    assert f"-f {DEPLOY / 'docker-compose.yml'} -f " in up and up.endswith(" up -d")
    assert down.endswith(" down --volumes --remove-orphans")
    assert f'- "{export}:/models/translator:ro"' in log.read_text()  # the export replaces ../..
    override = Path(up.split(" -f ")[2].split()[0])
    assert not override.parent.exists()  # its work directory is gone
