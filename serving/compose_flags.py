"""Run the local server exactly as a docker-compose TF Serving service runs its container.

`docker compose` starts `tensorflow/serving` with the service's `command` (flags appended to the
image's `tensorflow_model_server --port=8500 --rest_api_port=8501 ...`) and its bind mounts.
`local_flags()` turns the same service into flags for `python -m serving` on this machine: a
flag value under a mounted container path points at the host path instead, and the
`--model_config_file` is rewritten into `workdir` with its `base_path`s mapped the same way.
Ports are left out (the caller chooses them).

Example:
    python -m serving.compose_flags serving/deploy/docker-compose.yml --workdir /tmp/w \\
        --mount /models/translator=/tmp/export   # one flag per line
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

MODEL_CONFIG_FLAG = "--model_config_file"


def service(compose_file: Path, name: str) -> dict:
    """The service called `name` in a compose file.

    Raises:
        ValueError: the file has no such service (the message names the file).
    """
    services = (yaml.safe_load(compose_file.read_text()) or {}).get("services") or {}
    if name not in services:
        raise ValueError(f"{compose_file}: no service {name!r} (it has: {', '.join(services)})")
    return services[name]


def bind_mounts(compose_file: Path, spec: dict) -> dict[str, Path]:
    """Container path -> host path of a service's bind mounts (short `host:container[:mode]` or
    long `{source, target}` syntax); relative host paths are relative to the compose file."""
    mounts = {}
    for volume in spec.get("volumes", []):
        if isinstance(volume, dict):
            source, target = volume["source"], volume["target"]
        else:
            source, target = volume.split(":")[:2]
        mounts[target.rstrip("/")] = (compose_file.parent / source).resolve()
    return mounts


def host_path(path: str, mounts: dict[str, Path]) -> str:
    """`path` inside the container as a host path (unchanged when no mount holds it)."""
    for target in sorted(mounts, key=len, reverse=True):
        if path == target or path.startswith(target + "/"):
            return str(mounts[target]) + path[len(target):]
    return path


def local_flags(
    compose_file: str | Path,
    workdir: str | Path,
    mounts: dict[str, str | Path] | None = None,
    service_name: str = "translator",
) -> list[str]:
    """The service's flags for the local server, with container paths mapped to host paths.

    Args:
        compose_file: the docker-compose file.
        workdir: where the rewritten model config file goes.
        mounts: container path -> host path, replacing the compose file's bind mounts (e.g. the
            export mounted at `/models/translator`).
        service_name: the TF Serving service.

    Returns:
        The `command` flags, paths mapped (`--model_config_file` pointing into `workdir`).
    """
    compose_file = Path(compose_file)
    spec = service(compose_file, service_name)
    mapped = bind_mounts(compose_file, spec)
    mapped.update({target.rstrip("/"): Path(host) for target, host in (mounts or {}).items()})
    flags = []
    for flag in spec.get("command", []):
        name, equals, value = flag.partition("=")
        value = host_path(value, mapped)
        if name == MODEL_CONFIG_FLAG:
            value = str(_mapped_model_config(Path(value), mapped, Path(workdir)))
        flags.append(name + equals + value)
    return flags


def _mapped_model_config(path: Path, mounts: dict[str, Path], workdir: Path) -> Path:
    try:
        config = text_format.Parse(path.read_text(), model_server_config_pb2.ModelServerConfig())
    except text_format.ParseError as error:
        raise ValueError(f"{path}: {error}") from None
    for model in config.model_config_list.config:
        model.base_path = host_path(model.base_path, mounts)
    workdir.mkdir(parents=True, exist_ok=True)
    written = workdir / path.name
    written.write_text(text_format.MessageToString(config))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m serving.compose_flags",
        description="Print a compose TF Serving service's flags for `python -m serving`, one per "
        "line, container paths mapped to host paths.",
    )
    parser.add_argument("compose_file", type=Path)
    parser.add_argument("--workdir", type=Path, required=True,
                        help="where the rewritten model config file goes")
    parser.add_argument("--mount", action="append", default=[], metavar="CONTAINER=HOST",
                        help="mount HOST at CONTAINER instead of the compose file's mount")
    parser.add_argument("--service", default="translator")
    args = parser.parse_args(argv)
    mounts = {}
    for mount in args.mount:
        target, equals, host = mount.partition("=")
        if not (equals and target and host):
            parser.error(f"--mount {mount!r}: expected CONTAINER=HOST")
        mounts[target] = host
    try:
        flags = local_flags(args.compose_file, args.workdir, mounts, args.service)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(flags))
    return 0


if __name__ == "__main__":
    sys.exit(main())
