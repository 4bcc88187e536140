"""`keras-transformer serve`: serve an export with the local TF-Serving-compatible server.

Takes `tensorflow_model_server`'s flags (`--model_name`, `--model_base_path`, `--port`,
`--rest_api_port`, `--model_config_file`, `--enable_batching`, ...); see `serving/README.md`.
"""

from __future__ import annotations

import argparse

from serving.flags import add_server_flags


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a SavedModel export over TF Serving's REST and gRPC APIs",
        description="Serve a SavedModel export (<base>/<version>/) over the REST and gRPC APIs "
        "of TensorFlow Serving, with the same flags as tensorflow_model_server.",
    )
    add_server_flags(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from serving.allocator import restart_with_jemalloc

    restart_with_jemalloc()  # where installed (the command starts over, with it)
    from serving.heap import limit_arenas

    limit_arenas()  # under glibc's malloc, before the server starts its threads
    from serving.server import serve

    return serve(args)
