"""Whether the code being traced will run under XLA."""

from __future__ import annotations

import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # no public way to ask "under XLA?"


def under_xla() -> bool:
    """Whether the graph being traced will be compiled by XLA (`jit_compile=True`), which needs
    static shapes."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
