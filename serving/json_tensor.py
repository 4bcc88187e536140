"""JSON <-> tensors for the REST API, following TF Serving's `util/json_tensor.cc`.

Request side: row (`instances`) and columnar (`inputs`) formats, `{"b64": ...}` strings, TF's
strict typing (a JSON `true` is not a number, `2.0` is not an integer), NaN/Infinity tokens.
Response side: `predictions` / `outputs` keyed by the request format, the output name dropped when
the signature has one output, floats written the way TF Serving writes them.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from serving.errors import ServingError, invalid_argument
from serving.signatures import TensorInfo

ROW, COLUMNAR = "row", "columnar"
_B64 = "b64"
_DEBUG_STRING_BYTES = 256
_MAX_DIMS = 64  # numpy's limit (TensorFlow's is 254)

_NUMPY_DTYPES = {
    "DT_FLOAT": np.float32,
    "DT_DOUBLE": np.float64,
    "DT_INT32": np.int32,
    "DT_INT16": np.int16,
    "DT_INT8": np.int8,
    "DT_UINT8": np.uint8,
    "DT_INT64": np.int64,
    "DT_UINT32": np.uint32,
    "DT_UINT64": np.uint64,
    "DT_BOOL": np.bool_,
    "DT_STRING": np.object_,
}
# JSON integers accepted per integer dtype: narrow types go through TF's 32-bit int_val field.
_INT_RANGES = {
    "DT_INT32": (-(2**31), 2**31 - 1),
    "DT_INT16": (-(2**31), 2**31 - 1),
    "DT_INT8": (-(2**31), 2**31 - 1),
    "DT_UINT8": (-(2**31), 2**31 - 1),
    "DT_INT64": (-(2**63), 2**63 - 1),
    "DT_UINT32": (0, 2**32 - 1),
    "DT_UINT64": (0, 2**64 - 1),
}


def type_name(dtype: str) -> str:
    """TF's `DataTypeString`: `"DT_FLOAT"` -> `"float"`."""
    return dtype.removeprefix("DT_").lower()


def debug_string(value: Any) -> str:
    """Compact JSON of `value`, cut at 256 bytes, for error messages.

    A document that parsed just under the recursion limit can be too deep to write back from a
    deeper stack: it is then shown by its type alone.
    """
    try:
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
    except RecursionError:
        text = f"<{_json_type(value)} nested too deeply to show>"
    return text[:_DEBUG_STRING_BYTES]


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if value is True:
        return "True"
    if value is False:
        return "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


def _first_key_wins(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        obj.setdefault(key, value)
    return obj


_DECODER = json.JSONDecoder(object_pairs_hook=_first_key_wins)
_ENCODER = json.JSONEncoder(ensure_ascii=False)  # made once: json.dumps(..., kw) makes one a call


def parse_request(body: bytes) -> dict[str, Any]:
    """Parses a request body into a JSON object.

    Like rapidjson with `kParseStopWhenDoneFlag`: trailing data after the object is ignored, bytes
    that are not UTF-8 are kept (they come back out of string values unchanged), duplicate keys
    keep their first value, and `NaN` / `Infinity` / `-Infinity` are numbers.

    Raises:
        ServingError: INVALID_ARGUMENT ("JSON Parse error: ...", "... Is not object").
    """
    text = body.decode("utf-8", errors="surrogateescape")
    start = len(text) - len(text.lstrip())
    if start == len(text):
        raise invalid_argument("JSON Parse error: The document is empty")
    try:
        doc, _ = _DECODER.raw_decode(text, start)
    except json.JSONDecodeError as error:
        raise invalid_argument(f"JSON Parse error: {error.msg} at offset: {error.pos}") from None
    except RecursionError:
        raise invalid_argument("JSON Parse error: nesting too deep") from None
    if not isinstance(doc, dict):
        raise invalid_argument(f"JSON Value: {debug_string(doc)} Is not object")
    return doc


def signature_name(doc: Mapping[str, Any]) -> str:
    """The optional `signature_name` of a request (`""` when absent)."""
    name = doc.get("signature_name", "")
    if not isinstance(name, str):
        raise invalid_argument(
            f"JSON Value: {debug_string(doc)} not formatted correctly. "
            "'signature_name' key must be a string value."
        )
    return name


def is_b64_object(value: Any) -> bool:
    """True for `{"b64": "<string>"}`, the JSON spelling of binary strings."""
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get(_B64), str)


def decode_b64(value: Any) -> bytes:
    """Decodes a `{"b64": ...}` object (standard, padded alphabet)."""
    if not is_b64_object(value):
        raise invalid_argument(
            f"JSON Value: {debug_string(value)} not formatted correctly for base64 data"
        )
    try:
        return base64.b64decode(value[_B64], validate=True)
    except (binascii.Error, ValueError):
        raise invalid_argument("Unable to base64 decode") from None


def _type_error(value: Any, dtype: str) -> ServingError:
    return invalid_argument(
        f"JSON Value: {debug_string(value)} Type: {_json_type(value)} "
        f"is not of expected type: {type_name(dtype)}"
    )


def _leaf_converter(dtype: str) -> Callable[[Any], Any]:
    """A function checking one JSON scalar against `dtype` and returning the Python value."""
    if dtype in ("DT_FLOAT", "DT_DOUBLE"):

        def to_float(value: Any) -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise _type_error(value, dtype)
            try:
                return float(value)
            except OverflowError:  # a huge JSON integer: rapidjson makes it a double -> inf
                return math.copysign(math.inf, value)

        return to_float
    if dtype in _INT_RANGES:
        low, high = _INT_RANGES[dtype]

        def to_int(value: Any) -> int:
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise _type_error(value, dtype)
            return value

        return to_int
    if dtype == "DT_BOOL":

        def to_bool(value: Any) -> bool:
            if not isinstance(value, bool):
                raise _type_error(value, dtype)
            return value

        return to_bool
    if dtype == "DT_STRING":

        def to_bytes(value: Any) -> bytes:
            if isinstance(value, dict):
                return decode_b64(value)
            if not isinstance(value, str):
                raise _type_error(value, dtype)
            return value.encode("utf-8", errors="surrogateescape")

        return to_bytes

    def unsupported(value: Any) -> Any:
        raise ServingError(
            "UNIMPLEMENTED",
            f"Conversion of JSON Value: {debug_string(value)} to type: {type_name(dtype)}",
        )

    return unsupported


def _dense_shape(value: Any) -> list[int]:
    """Shape of a nested list, read from the first element at each level.

    Raises:
        ServingError: INVALID_ARGUMENT beyond numpy's 64 dimensions.
    """
    shape = []
    while isinstance(value, list):
        if len(shape) == _MAX_DIMS:
            raise invalid_argument(
                f"JSON Value: {debug_string(value)} nests lists more than {_MAX_DIMS} levels "
                f"deep; a tensor has at most {_MAX_DIMS} dimensions here"
            )
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return shape


def _flatten(value: Any, shape: list[int], convert: Callable[[Any], Any], out: list) -> None:
    """Checks that `value` is dense with `shape` and appends its converted leaves to `out`."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if not isinstance(item, list):
            if level != len(shape):
                raise invalid_argument(
                    f"JSON Value: {debug_string(item)} found at incorrect level: {level + 1} in "
                    f"the JSON DOM. Expected at level: {len(shape)}"
                )
            out.append(convert(item))
            continue
        if level >= len(shape):
            raise invalid_argument(
                f"Encountered list at unexpected level: {level} expected < {len(shape)}"
            )
        if len(item) != shape[level]:
            raise invalid_argument(
                f"Encountered list at unexpected size: {len(item)} at level: {level} "
                f"expected size: {shape[level]}"
            )
        stack.extend((child, level + 1) for child in reversed(item))


def _to_array(values: list, shape: list[int], dtype: str) -> np.ndarray:
    numpy_dtype = _NUMPY_DTYPES[dtype]
    if numpy_dtype is np.object_:
        array = np.empty(len(values), dtype=object)
        array[:] = values
    elif dtype in ("DT_INT16", "DT_INT8", "DT_UINT8"):
        # TF Serving stores these in a 32-bit field and truncates when building the tensor.
        array = np.array(values, dtype=np.int64).astype(numpy_dtype)
    else:
        with np.errstate(over="ignore"):
            array = np.array(values, dtype=numpy_dtype)
    return array.reshape(shape)


def tensor_from_json(value: Any, dtype: str) -> np.ndarray:
    """Converts a JSON value (scalar, nested list or b64 object) into an array of `dtype`."""
    shape = _dense_shape(value)
    values: list = []
    _flatten(value, shape, _leaf_converter(dtype), values)
    return _to_array(values, shape, dtype)


def _status_text(error: ServingError) -> str:
    return f"{error.code}: {error.message}"


def _row_inputs(instances: list, inputs: Mapping[str, TensorInfo]) -> dict[str, np.ndarray]:
    def is_object(value: Any) -> bool:
        return isinstance(value, dict) and not is_b64_object(value)

    if not isinstance(instances[0], dict) and len(inputs) > 1:
        raise invalid_argument(
            "instances is a plain list, but expecting list of objects as multiple input tensors "
            "required as per tensorinfo_map"
        )
    objects = is_object(instances[0])
    names = sorted(inputs)
    converters = {name: _leaf_converter(info.dtype) for name, info in inputs.items()}
    shapes: dict[str, list[int]] = {}
    sizes: dict[str, int] = {}
    values: dict[str, list] = {name: [] for name in inputs}

    def add(item: Any, name: str) -> None:
        if name not in inputs:
            raise invalid_argument(f"JSON object: does not have named input: {name}")
        shape = _dense_shape(item)
        leaves: list = []
        _flatten(item, shape, converters[name], leaves)
        if name not in sizes:
            sizes[name], shapes[name] = len(leaves), shape
        elif sizes[name] != len(leaves):
            raise invalid_argument(f"Expecting tensor size: {sizes[name]} but got: {len(leaves)}")
        elif shapes[name] != shape:
            raise invalid_argument(
                f"Expecting shape [{','.join(map(str, shapes[name]))}] but got: "
                f"[{','.join(map(str, shape))}]"
            )
        values[name].extend(leaves)

    for index, element in enumerate(instances):
        if objects:
            if not is_object(element):
                raise invalid_argument(
                    f"Expecting object but got list at item {index} of input list"
                )
            for name, item in element.items():
                try:
                    add(item, name)
                except ServingError as error:
                    raise invalid_argument(
                        f"Failed to process element: {index} key: {name} of 'instances' list. "
                        f"Error: {_status_text(error)}"
                    ) from None
            if sorted(element) != names:
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. JSON object: "
                    f"{debug_string(element)} keys must be equal to: {','.join(names)}"
                )
        else:
            if is_object(element):
                raise invalid_argument(
                    f"Expecting value/list but got object at item {index} of input list"
                )
            try:
                add(element, names[0])
            except ServingError as error:
                raise invalid_argument(
                    f"Failed to process element: {index} of 'instances' list. "
                    f"Error: {_status_text(error)}"
                ) from None
    return {
        name: _to_array(values[name], [len(instances), *shapes[name]], inputs[name].dtype)
        for name in inputs
    }


def _columnar_inputs(value: Any, inputs: Mapping[str, TensorInfo]) -> dict[str, np.ndarray]:
    if not isinstance(value, dict) or is_b64_object(value):
        if len(inputs) > 1:
            raise invalid_argument(
                "inputs is a plain value/list, but expecting an object as multiple input tensors "
                "required as per tensorinfo_map"
            )
        (name, info), = inputs.items()
        return {name: tensor_from_json(value, info.dtype)}
    tensors = {}
    for name, info in sorted(inputs.items()):
        if name not in value:
            raise invalid_argument(f"Missing named input: {name} in 'inputs' object.")
        tensors[name] = tensor_from_json(value[name], info.dtype)
    return tensors


def predict_inputs(
    doc: Mapping[str, Any], inputs: Mapping[str, TensorInfo], signature: str
) -> tuple[dict[str, np.ndarray], str]:
    """Reads the input tensors of a predict request.

    Args:
        doc: the parsed request.
        inputs: the signature's inputs (alias -> dtype and shape).
        signature: the signature name, for the error message of a signature without inputs.

    Returns:
        (alias -> array, `ROW` or `COLUMNAR`).
    """
    if not inputs:
        raise invalid_argument(f"Failed to get input map for signature: {signature or 'DEFAULT'}")
    if "instances" in doc and "inputs" in doc:
        raise invalid_argument(
            f"JSON Value: {debug_string(doc)} Not formatted correctly expecting only one of "
            "'inputs' or 'instances' keys to exist "
        )
    if "instances" in doc:
        instances = doc["instances"]
        if not isinstance(instances, list):
            raise invalid_argument(
                f"JSON Value: {debug_string(doc)} Expecting 'instances' to be an list/array"
            )
        if not instances:
            raise invalid_argument(
                f"JSON Value: {debug_string(doc)} No values in 'instances' array"
            )
        return _row_inputs(instances, inputs), ROW
    if "inputs" in doc:
        return _columnar_inputs(doc["inputs"], inputs), COLUMNAR
    raise invalid_argument("Missing 'inputs' or 'instances' key")


def format_float(value: float, float32: bool) -> str:
    """Writes a float the way TF Serving does: `%g`, or more digits if that does not round-trip,
    `.0` appended to integral values, and bare `NaN` / `Infinity` / `-Infinity` tokens."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    text = f"{value:g}"
    parsed = float(text)
    if (float(np.float32(parsed)) if float32 else parsed) != value:
        text = f"{value:.9g}" if float32 else f"{value:.17g}"
    if "." not in text and "e" not in text:
        text += ".0"
    return text


def _json_ready(array: np.ndarray, name: str) -> tuple[Any, Callable[[Any], str] | None]:
    """`array` as nested lists of values `json.dumps` writes the way TF Serving does, or, for
    floats (`%g` rules, NaN tokens), nested lists plus the writer of one float."""
    kind = array.dtype
    if kind in (np.float32, np.float64):
        float32 = kind == np.float32
        return array.tolist(), lambda value: format_float(value, float32)
    if kind == np.bool_ or np.issubdtype(kind, np.integer):
        return array.tolist(), None
    if kind == np.object_ or kind.kind in "SU":
        if name.endswith("_bytes"):
            def convert(value: Any) -> Any:
                return {_B64: base64.b64encode(_as_bytes(value)).decode()}
        else:
            def convert(value: Any) -> Any:
                return _as_bytes(value).decode("utf-8", errors="replace")
        flat = np.empty(array.size, dtype=object)
        flat[:] = [convert(value) for value in array.ravel().tolist()]
        return flat.reshape(array.shape).tolist(), None
    tf_name = {np.float16: "half"}.get(kind.type, str(kind))
    raise invalid_argument(f"Failed to write JSON value for tensor type: {tf_name}")


def _as_bytes(value: Any) -> bytes:
    return value if isinstance(value, bytes) else str(value).encode("utf-8")


def _write(value: Any, write_float: Callable[[Any], str] | None) -> str:
    """JSON text of nested lists, with `", "` between items like `json.dumps`."""
    if write_float is None:
        return _ENCODER.encode(value)
    if isinstance(value, list):
        return "[" + ", ".join(_write(item, write_float) for item in value) + "]"
    return write_float(value)


def predict_response(outputs: Mapping[str, np.ndarray], request_format: str) -> str:
    """The JSON text of a predict response.

    Raises:
        ServingError: INVALID_ARGUMENT for a row request whose outputs are not batch-major with a
            common dim 0, or an output dtype JSON cannot carry (half, bfloat16, complex).
    """
    ready = {name: _json_ready(array, name) for name, array in outputs.items()}
    single = len(outputs) == 1
    if request_format == COLUMNAR:
        parts = {name: _write(values, write_float) for name, (values, write_float) in ready.items()}
        if single:
            return '{"outputs": ' + next(iter(parts.values())) + "}"
        body = ", ".join(f"{json.dumps(name)}: {text}" for name, text in parts.items())
        return '{"outputs": {' + body + "}}"

    batch_size = None
    for name, array in outputs.items():
        if array.ndim == 0:
            raise invalid_argument(f"Tensor name: {name} has no shape information ")
        if batch_size is not None and array.shape[0] != batch_size:
            raise invalid_argument(
                f"Tensor name: {name} has inconsistent batch size: {array.shape[0]} "
                f"expecting: {batch_size}"
            )
        batch_size = array.shape[0]
    # One JSON text per output and row; the row objects are joined from them.
    columns = {
        json.dumps(name): [_write(row, write_float) for row in values]
        for name, (values, write_float) in ready.items()
    }
    if single:
        predictions = next(iter(columns.values()))
    else:
        predictions = [
            "{" + ", ".join(f"{key}: {texts[index]}" for key, texts in columns.items()) + "}"
            for index in range(batch_size or 0)
        ]
    return '{"predictions": [' + ", ".join(predictions) + "]}"


def error_body(message: str) -> str:
    """The REST error envelope `{"error": message}`."""
    return json.dumps({"error": message}, ensure_ascii=False)
