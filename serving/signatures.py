"""What a signature looks like from outside: input and output aliases with dtypes and shapes.

Kept free of TensorFlow so that the JSON conversions can be used (and tested) without it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from serving.errors import invalid_argument


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """dtype (a `tensorflow.DataType` name such as `"DT_FLOAT"`) and shape (`None` = unknown
    rank, `-1` = unknown size) of one signature input or output."""

    dtype: str
    shape: tuple[int, ...] | None


@dataclasses.dataclass(frozen=True)
class Signature:
    """A SignatureDef: method name plus input and output aliases."""

    name: str
    method_name: str
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]


def check_inputs(signature: Signature, names: Iterable[str]) -> None:
    """Raises INVALID_ARGUMENT (TF Serving's message) unless `names` are the signature's inputs."""
    expected, sent = set(signature.inputs), set(names)
    if expected != sent:
        raise invalid_argument(
            f"input size does not match signature: {len(sent)}!={len(expected)} "
            f"len({{{','.join(sorted(sent))}}}) != len({{{','.join(sorted(expected))}}}). "
            f"Sent extra: {{{','.join(sorted(sent - expected))}}}. "
            f"Missing but required: {{{','.join(sorted(expected - sent))}}}."
        )
