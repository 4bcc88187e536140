"""Command-line flags of the local server (named as `tensorflow_model_server`'s) and the
text-format config files they point to.

Importing this module is cheap (no TensorFlow), so `keras-transformer serve --help` is fast.
"""

from __future__ import annotations

import argparse
import dataclasses
import os

from google.protobuf import message, text_format
from tensorflow_serving.config import model_server_config_pb2

from serving.protos import BatchingParameters, MonitoringConfig

DEFAULT_PROMETHEUS_PATH = "/monitoring/prometheus/metrics"


def _bool(text: str) -> bool:
    lowered = text.lower()
    if lowered in ("1", "true", "yes"):
        return True
    if lowered in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """Registers the server flags. Boolean flags take `--flag`, `--flag=true` or `--flag=false`."""

    def flag(name: str, **kwargs) -> None:
        if kwargs.get("type") is _bool:
            kwargs.update(nargs="?", const=True, metavar="BOOL")
        parser.add_argument(f"--{name}", **kwargs)

    flag("host", default="127.0.0.1", help="interface to bind (local server only)")
    flag("port", type=int, default=8500, help="gRPC port")
    flag("rest_api_port", type=int, default=0, help="HTTP/REST port (0: no REST)")
    flag("rest_api_timeout_in_ms", type=int, default=30000,
         help="REST requests that run longer answer 504")
    flag("rest_api_enable_cors_support", type=_bool, default=False)
    flag("rest_api_num_threads", type=int, default=4 * (os.cpu_count() or 1),
         help="threads that run the model when batching is off")
    flag("tensorflow_intra_op_parallelism", type=int, default=0,
         help="threads one TensorFlow op may use (0: TensorFlow's choice, every core)")
    flag("tensorflow_inter_op_parallelism", type=int, default=0,
         help="TensorFlow ops run at once (0: TensorFlow's choice)")
    flag("model_name", default="default", help="model name in single-model mode")
    flag("model_base_path", default="", help="parent of the numbered version dirs")
    flag("model_config_file", default="", help="text-format ModelServerConfig")
    flag("model_config_file_poll_wait_seconds", type=float, default=0,
         help="re-read --model_config_file this often (0: read once)")
    flag("file_system_poll_wait_seconds", type=float, default=1,
         help="scan base paths for versions this often (0: once)")
    flag("enable_batching", type=_bool, default=False)
    flag("batching_parameters_file", default="", help="text-format BatchingParameters")
    flag("monitoring_config_file", default="", help="text-format MonitoringConfig")
    flag("enable_model_warmup", type=_bool, default=True,
         help="replay assets.extra/tf_serving_warmup_requests at load")
    flag("saved_model_tags", default="serve", help="comma-separated meta-graph tags")
    flag("max_num_load_retries", type=int, default=5)
    flag("load_retry_interval_micros", type=int, default=60_000_000)
    flag("max_request_bytes", type=int, default=64 << 20,
         help="larger REST bodies / gRPC messages are refused (local server only)")
    flag("max_instances_per_request", type=int, default=1024,
         help="larger batches in one request are refused (local server only)")


@dataclasses.dataclass(frozen=True)
class ServerOptions:
    """Everything the server needs, with the config files already parsed."""

    host: str
    grpc_port: int
    rest_port: int
    model_config: model_server_config_pb2.ModelServerConfig
    model_config_file: str
    model_config_poll_seconds: float
    file_system_poll_seconds: float
    batching: message.Message | None
    prometheus_path: str | None
    rest_timeout_seconds: float
    cors: bool
    num_threads: int
    intra_op_threads: int
    inter_op_threads: int
    warmup: bool
    tags: tuple[str, ...]
    max_load_retries: int
    load_retry_interval_seconds: float
    max_request_bytes: int
    max_instances_per_request: int


def parse_text_proto(path: str, proto_class: type[message.Message]) -> message.Message:
    """Reads a text-format protobuf file, as `tensorflow_model_server` does for its flags."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    try:
        return text_format.Parse(text, proto_class())
    except text_format.ParseError as error:
        raise ValueError(f"{path}: not a valid {proto_class.DESCRIPTOR.name}: {error}") from error


def load_model_config(path: str) -> model_server_config_pb2.ModelServerConfig:
    """Parses a `models.config` file and checks what this server supports.

    Base paths must be local directories; relative ones are resolved against the current
    directory.
    """
    config = parse_text_proto(path, model_server_config_pb2.ModelServerConfig)
    check_model_config(config)
    return config


def check_model_config(config: model_server_config_pb2.ModelServerConfig) -> None:
    """Checks a ModelServerConfig (a model list, unique names, TensorFlow platform) and makes
    its base paths absolute.

    Raises:
        ValueError: what is wrong with it.
    """
    if config.WhichOneof("config") != "model_config_list":
        raise ValueError("ModelServerConfig must hold a model_config_list")
    names = [model.name for model in config.model_config_list.config]
    if len(set(names)) != len(names):
        raise ValueError(f"Duplicate model names in config: {names}")
    for model in config.model_config_list.config:
        if not model.name or not model.base_path:
            raise ValueError(f"Each model needs a name and a base_path: {model}")
        if model.model_platform not in ("", "tensorflow"):
            raise ValueError(f"Unsupported model_platform {model.model_platform!r} ({model.name})")
        model.base_path = os.path.abspath(model.base_path)


def server_options(args: argparse.Namespace) -> ServerOptions:
    """Validates the flags and parses the files they name.

    Raises:
        ValueError: on inconsistent flags or unparsable config files.
    """
    if args.model_config_file:
        model_config = load_model_config(args.model_config_file)
    elif args.model_base_path:
        model_config = model_server_config_pb2.ModelServerConfig()
        model_config.model_config_list.config.add(
            name=args.model_name, base_path=args.model_base_path, model_platform="tensorflow"
        )
        check_model_config(model_config)
    else:
        raise ValueError("Both --model_base_path and --model_config_file are empty")

    batching = None
    if args.enable_batching:
        batching = BatchingParameters()
        if args.batching_parameters_file:
            batching = parse_text_proto(args.batching_parameters_file, BatchingParameters)
    elif args.batching_parameters_file:
        raise ValueError("--batching_parameters_file is set without --enable_batching")

    prometheus_path = None
    if args.monitoring_config_file:
        monitoring = parse_text_proto(args.monitoring_config_file, MonitoringConfig)
        if monitoring.prometheus_config.enable:
            prometheus_path = monitoring.prometheus_config.path or DEFAULT_PROMETHEUS_PATH

    if args.rest_api_port and args.rest_api_port == args.port:
        raise ValueError("--rest_api_port must differ from --port")
    for name in ("tensorflow_intra_op_parallelism", "tensorflow_inter_op_parallelism"):
        if getattr(args, name) < 0:
            raise ValueError(f"--{name} must be >= 0 (0: TensorFlow's choice)")
    return ServerOptions(
        host=args.host,
        grpc_port=args.port,
        rest_port=args.rest_api_port,
        model_config=model_config,
        model_config_file=args.model_config_file,
        model_config_poll_seconds=args.model_config_file_poll_wait_seconds,
        file_system_poll_seconds=args.file_system_poll_wait_seconds,
        batching=batching,
        prometheus_path=prometheus_path,
        rest_timeout_seconds=args.rest_api_timeout_in_ms / 1000,
        cors=args.rest_api_enable_cors_support,
        num_threads=max(1, args.rest_api_num_threads),
        intra_op_threads=args.tensorflow_intra_op_parallelism,
        inter_op_threads=args.tensorflow_inter_op_parallelism,
        warmup=args.enable_model_warmup,
        tags=tuple(tag.strip() for tag in args.saved_model_tags.split(",") if tag.strip()),
        max_load_retries=max(0, args.max_num_load_retries),
        load_retry_interval_seconds=args.load_retry_interval_micros / 1e6,
        max_request_bytes=args.max_request_bytes,
        max_instances_per_request=args.max_instances_per_request,
    )
