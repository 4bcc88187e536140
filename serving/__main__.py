"""`python -m serving --model_name NAME --model_base_path DIR --rest_api_port 8501 ...`"""

import argparse
import sys

from serving.allocator import restart_with_jemalloc

restart_with_jemalloc()  # where installed; first, as the program starts over

from serving.heap import limit_arenas  # noqa: E402

limit_arenas()  # before TensorFlow and the server start their threads

from serving.flags import add_server_flags  # noqa: E402
from serving.server import serve  # noqa: E402

parser = argparse.ArgumentParser(
    prog="python -m serving",
    description="Serve SavedModels over TF-Serving-compatible REST and gRPC APIs.",
)
add_server_flags(parser)
sys.exit(serve(parser.parse_args()))
