"""Export a `Translator` as a SavedModel in TensorFlow Serving's layout: `<base>/<version>/`.

Each version is written into a hidden temporary directory beside the final one and renamed into
place only when complete (a server polling `<base>` never sees half a model), with a warmup file
`assets.extra/tf_serving_warmup_requests` that TF Serving replays before it serves the version,
and the model card `assets.extra/model_card.json` / `model_card.md` (see `model_card`).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

from keras_transformer.inference.compute_dtype import compute_dtype_copy
from keras_transformer.inference.defaults import decoding_options
from keras_transformer.inference.translator import (
    SERVING_SIGNATURE,
    TOKENS_SIGNATURE,
    Translator,
)
from keras_transformer.model_card import export_card, run_card, write_model_card
from keras_transformer.run_dir import load_run

log = logging.getLogger(__name__)

WARMUP_FILE = Path("assets.extra") / "tf_serving_warmup_requests"


def versions(base_dir: str | os.PathLike) -> list[int]:
    """The version numbers under `base_dir` (numeric subdirectory names), ascending."""
    base = Path(base_dir)
    if not base.is_dir():
        return []
    return sorted(
        int(child.name) for child in base.iterdir() if child.is_dir() and child.name.isdigit()
    )


def next_version(base_dir: str | os.PathLike) -> int:
    """One more than the highest version under `base_dir`, or 1."""
    existing = versions(base_dir)
    return existing[-1] + 1 if existing else 1


def sample_sentences(tokenizer, count: int = 3) -> list[str]:
    """A few sentences (of growing length) made of whole words from a tokenizer's vocabulary,
    for warmup requests when no real sentences are given.

    Args:
        tokenizer: a tokenizer with a `vocabulary` list (reserved tokens first).
        count: number of sentences.
    """
    tokens = tokenizer.vocabulary
    # WordPiece vocabularies list single characters first; whole words read more like input.
    words = (
        [token for token in tokens if token.isalpha() and len(token) > 1]
        or [token for token in tokens if token.isalpha()]
        or tokens[-1:]
    )
    return [" ".join(words[: 3 * (index + 1)]) for index in range(count)]


def warmup_requests(
    translator: Translator, sentences: Sequence[str], model_name: str
) -> list[prediction_log_pb2.PredictionLog]:
    """Predict requests for the warmup file: the sentences together and the first one alone on
    `serving_default`, and the first one pre-tokenized on `translate_tokens`."""
    source_tokens = translator.source_tokenizer.tokenize(tf.constant(sentences[:1])).to_tensor()
    requests = [
        (SERVING_SIGNATURE, "text", tf.make_tensor_proto(list(sentences), dtype=tf.string)),
        (SERVING_SIGNATURE, "text", tf.make_tensor_proto(list(sentences[:1]), dtype=tf.string)),
        (TOKENS_SIGNATURE, "source_tokens", tf.make_tensor_proto(source_tokens.numpy())),
    ]
    requests += [
        (TOKENS_SIGNATURE, "source_tokens", tf.make_tensor_proto(tokens))
        for tokens in xla_warmup_tokens(translator, source_tokens.numpy()[0])
    ]
    logs = []
    for signature, input_name, tensor in requests:
        request = predict_pb2.PredictRequest(
            model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
        )
        request.inputs[input_name].CopyFrom(tensor)
        logs.append(
            prediction_log_pb2.PredictionLog(
                predict_log=prediction_log_pb2.PredictLog(request=request)
            )
        )
    return logs


def xla_warmup_tokens(translator: Translator, sentence_tokens) -> list[np.ndarray]:
    """Source ids, int64 `(batch, length)`, one for every shape that a `Translator` with
    `xla_max_batch` compiles (`Translator.xla_shapes`; none without XLA), so that the warmup
    replay compiles them all before the first request. Each row repeats `sentence_tokens` to
    the length."""
    return [np.tile(np.resize(sentence_tokens, length), (batch, 1)).astype(np.int64)
            for batch, length in translator.xla_shapes()]


def write_warmup_file(path: str | os.PathLike, logs: Sequence) -> None:
    """Writes `PredictionLog`s as a TFRecord file (TF Serving's warmup format)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(os.fspath(path)) as writer:
        for record in logs:
            writer.write(record.SerializeToString())


def export_translator(
    translator: Translator,
    base_dir: str | os.PathLike,
    *,
    version: int | None = None,
    warmup_sentences: Sequence[str] | None = None,
    card: dict | None = None,
) -> Path:
    """Saves `translator` as `<base_dir>/<version>/`, atomically, with its warmup requests and
    model card.

    Args:
        translator: the `Translator` to save (signatures `serving_default`,
            `translate_tokens`, `attention`).
        base_dir: the model's base path (as given to TF Serving's `--model_base_path`); created
            if missing. Its name is the model name in the warmup requests.
        version: version number; default: the next free one.
        warmup_sentences: source sentences for the warmup requests; default:
            `sample_sentences(translator.source_tokenizer)`.
        card: what the card says of the model's training (`model_card.run_card`); the export
            adds its decoding options, signatures and software versions.

    Returns:
        the version directory.

    Raises:
        FileExistsError: if the version already exists.
    """
    base = Path(base_dir).resolve()
    base.mkdir(parents=True, exist_ok=True)
    version = next_version(base) if version is None else version
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"version must be a non-negative integer, got {version!r}")
    final = base / str(version)
    if final.exists():
        raise FileExistsError(f"{final} already exists; choose another --version")
    sentences = list(warmup_sentences or sample_sentences(translator.source_tokenizer))
    # A hidden, non-numeric name: TF Serving ignores it while it is being written.
    staging = Path(tempfile.mkdtemp(prefix=f".{version}.incomplete-", dir=base))
    try:
        tf.saved_model.save(translator, os.fspath(staging), signatures=translator.signatures())
        write_warmup_file(staging / WARMUP_FILE, warmup_requests(translator, sentences, base.name))
        decoding = dict(beam_width=translator.beam_width, alpha=translator.alpha,
                        max_length=translator.max_length, xla_max_batch=translator.xla_max_batch)
        write_model_card(staging, export_card(staging, decoding, card))
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("exported version %d to %s", version, final)
    return final


def export_run(
    run_dir: str | os.PathLike,
    base_dir: str | os.PathLike,
    *,
    version: int | None = None,
    beam_width: int | None = None,
    alpha: float | None = None,
    max_length: int | None = None,
    xla_max_batch: int = 0,
    warmup_sentences: Sequence[str] | None = None,
) -> Path:
    """Exports the best model of a training run with its tokenizers.

    Args:
        run_dir: a run directory written by `keras-transformer train`.
        base_dir, version, warmup_sentences: see `export_translator`.
        beam_width, alpha, max_length, xla_max_batch: decoding options baked into the export
            (see `Translator`); with neither `beam_width` nor `alpha`, the ones the run chose on
            validation (`tune_decoding`), and the library's defaults for what is still unset.

    A mixed-precision model is exported with its weights in its compute dtype
    (`compute_dtype_copy`): the same translations, without casting every weight at every
    decoding step, and half the size.

    Returns:
        the version directory, with the run's model card (`model_card.run_card`).
    """
    run = load_run(run_dir, compile=False)
    beam_width, alpha = decoding_options(beam_width, alpha, run.decoding)
    translator = Translator(
        compute_dtype_copy(run.model),
        run.source_tokenizer,
        run.target_tokenizer,
        beam_width=beam_width,
        alpha=alpha,
        max_length=max_length,
        xla_max_batch=xla_max_batch,
    )
    return export_translator(
        translator, base_dir, version=version, warmup_sentences=warmup_sentences,
        card=run_card(run_dir),
    )
