"""Parallel corpora from files, and the `tf.data` pipeline that feeds `model.fit`.

Reading is strict about what is broken (mismatched line counts, invalid UTF-8, malformed TSV
lines raise `DataError` naming the file and line) and lenient, but loud, about what is merely
unusable (empty or over-long pairs are skipped and counted in a log message).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import tensorflow as tf

from keras_transformer.text.tokenizer import SubwordTokenizer

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"
# Sentences are tokenized in chunks: one tokenizer call per chunk is far cheaper than per pair.
_TOKENIZE_CHUNK = 256


class DataError(ValueError):
    """Training data that cannot be used as it is; the message names the file and line."""


@dataclasses.dataclass(frozen=True)
class ParallelCorpus:
    """Aligned sentence pairs: `sources[i]` translates to `targets[i]`.

    Attributes:
        sources: Source-language sentences.
        targets: Target-language sentences, as many as `sources`.
    """

    sources: list[str]
    targets: list[str]

    def __post_init__(self) -> None:
        if len(self.sources) != len(self.targets):
            raise ValueError(
                f"{len(self.sources)} source sentences but {len(self.targets)} target sentences"
            )

    def __len__(self) -> int:
        return len(self.sources)


def read_parallel_files(
    source_path: str | os.PathLike,
    target_path: str | os.PathLike,
    *,
    max_words: int | None = 200,
) -> ParallelCorpus:
    """Reads two line-aligned UTF-8 files (line i of one translates line i of the other).

    Args:
        source_path: Source-language file, one sentence per line.
        target_path: Target-language file, one sentence per line.
        max_words: Pairs with a side longer than this many words are skipped (and counted);
            `None` keeps all.

    Returns:
        The usable pairs, stripped of surrounding whitespace.

    Raises:
        DataError: If the files differ in line count, contain invalid UTF-8, or hold no
            usable pair.
    """
    sources = _read_lines(source_path)
    targets = _read_lines(target_path)
    if len(sources) != len(targets):
        raise DataError(
            f"{source_path} has {len(sources):,} lines but {target_path} has "
            f"{len(targets):,} lines; the files must be line-aligned"
        )
    pairs = zip(sources, targets, strict=True)
    return _usable_pairs(pairs, f"{source_path} + {target_path}", max_words)


def read_tsv(path: str | os.PathLike, *, max_words: int | None = 200) -> ParallelCorpus:
    """Reads a UTF-8 file of `source<TAB>target` lines.

    A blank line counts as an empty pair (skipped); any other line must have exactly two
    tab-separated fields.

    Args:
        path: The TSV file.
        max_words: See `read_parallel_files`.

    Returns:
        The usable pairs, stripped of surrounding whitespace.

    Raises:
        DataError: On invalid UTF-8, a line without exactly two fields, or no usable pair.
    """
    pairs = []
    for number, line in enumerate(_read_lines(path), start=1):
        if not line.strip():
            pairs.append(("", ""))
            continue
        fields = line.split("\t")
        if len(fields) != 2:
            raise DataError(
                f"{path}:{number}: expected 2 tab-separated fields (source<TAB>target), "
                f"found {len(fields)}"
            )
        pairs.append((fields[0], fields[1]))
    return _usable_pairs(pairs, os.fspath(path), max_words)


def _read_lines(path: str | os.PathLike) -> list[str]:
    """Decodes a file line by line so that an encoding error can name its line."""
    data = Path(path).read_bytes().removeprefix(_BOM)
    raw_lines = data.split(b"\n")
    if raw_lines[-1] == b"":
        raw_lines.pop()
    lines = []
    for number, raw in enumerate(raw_lines, start=1):
        raw = raw.removesuffix(b"\r")
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            bad = raw[error.start : error.end]
            raise DataError(
                f"{path}:{number}: invalid UTF-8 at byte {error.start + 1} of the line "
                f"({bad!r}); convert the file to UTF-8"
            ) from None
    return lines


def _usable_pairs(
    pairs: Iterable[tuple[str, str]], origin: str, max_words: int | None
) -> ParallelCorpus:
    sources, targets = [], []
    empty = too_long = 0
    for source, target in pairs:
        source, target = source.strip(), target.strip()
        if not source or not target:
            empty += 1
        elif max_words is not None and max(len(source.split()), len(target.split())) > max_words:
            too_long += 1
        else:
            sources.append(source)
            targets.append(target)
    level = logging.WARNING if empty or too_long else logging.INFO
    logger.log(
        level,
        "%s: %s pairs read, skipped %s empty and %s over %s words",
        origin, f"{len(sources):,}", f"{empty:,}", f"{too_long:,}", max_words,
    )
    if not sources:
        raise DataError(f"{origin}: no usable sentence pairs")
    return ParallelCorpus(sources, targets)


def make_dataset(
    corpus: ParallelCorpus,
    source_tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer,
    *,
    batch_size: int = 64,
    max_length: int = 64,
    batch_tokens: int | None = None,
    bucket_width: int | None = 4,
    shuffle: bool = True,
    seed: int = 0,
    drop_remainder: bool = False,
    pad_to_max_length: bool = False,
) -> tf.data.Dataset:
    """Builds the training (or evaluation) pipeline: tokenize, trim, shift, bucket, batch.

    Each element is `({"source_tokens": (batch, src_len), "target_tokens": (batch, tgt_len)},
    labels (batch, tgt_len))`, all `int64` padded with `[PAD]` = 0. For a target sentence with
    tokens `y`, `target_tokens` is `[START] + y` (the decoder input) and `labels` is
    `y + [END]`: the same length, labels never contain `[START]`, the decoder input never `[END]`.
    Sources carry no `[START]`/`[END]`, matching `SubwordTokenizer.tokenize` at inference.

    Args:
        corpus: Sentence pairs.
        source_tokenizer: Tokenizer of the source language.
        target_tokenizer: Tokenizer of the target language.
        batch_size: Sentences per batch.
        max_length: Sources are cut to `max_length` tokens, targets to `max_length - 1` so that
            `target_tokens` and `labels` have at most `max_length`.
        batch_tokens: If set, replaces `batch_size`: each batch holds as many sentences as
            fit this many (padded) tokens per sequence tensor.
        bucket_width: Batch pairs whose lengths fall in the same window of this many tokens,
            which cuts padding; `None` batches pairs in (shuffled) order, each batch padded to
            its longest pair.
        shuffle: Shuffle the pairs (the whole corpus, reshuffled every epoch).
        seed: Shuffle seed.
        drop_remainder: Drop incomplete batches, so the batch dimension is static.
        pad_to_max_length: Pad every batch to `max_length` (fully static shapes, no bucketing),
            e.g. for TPUs.

    Returns:
        A prefetched `tf.data.Dataset`.

    Raises:
        ValueError: On non-positive sizes.
    """
    for label, value in (("batch_size", batch_size), ("max_length", max_length),
                         ("batch_tokens", batch_tokens), ("bucket_width", bucket_width)):
        if value is not None and value < 1:
            raise ValueError(f"{label} must be positive, got {value}")
    if max_length < 2:
        raise ValueError(f"max_length must leave room for [START]/[END], got {max_length}")

    def sentences_per_batch(padded_length: int) -> int:
        if batch_tokens is None:
            return batch_size
        return max(1, batch_tokens // padded_length)

    dataset = tf.data.Dataset.from_tensor_slices((corpus.sources, corpus.targets))
    if shuffle:
        dataset = dataset.shuffle(len(corpus), seed=seed, reshuffle_each_iteration=True)
    dataset = (
        dataset.batch(_TOKENIZE_CHUNK)
        .map(
            _tokenize_and_shift(source_tokenizer, target_tokenizer, max_length),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
        .unbatch()
        # Unbatched rows of a ragged tensor come out typed as rank-0 ragged tensors; passing them
        # through a map turns them into the plain tensors that `padded_batch` requires.
        .map(lambda inputs, labels: (inputs, labels))
    )
    if pad_to_max_length:
        shapes = ({"source_tokens": [max_length], "target_tokens": [max_length]}, [max_length])
        dataset = dataset.padded_batch(
            sentences_per_batch(max_length), padded_shapes=shapes, drop_remainder=drop_remainder
        )
    elif bucket_width is None:
        dataset = dataset.padded_batch(
            sentences_per_batch(max_length), drop_remainder=drop_remainder
        )
    else:
        # Bucket i holds lengths in [boundaries[i-1], boundaries[i]); the last one ends at
        # max_length, which the trimming above guarantees.
        boundaries = list(range(bucket_width + 1, max_length + 1, bucket_width))
        longest = [boundary - 1 for boundary in boundaries] + [max_length]
        dataset = dataset.bucket_by_sequence_length(
            element_length_func=_pair_length,
            bucket_boundaries=boundaries,
            bucket_batch_sizes=[sentences_per_batch(length) for length in longest],
            drop_remainder=drop_remainder,
        )
    return dataset.prefetch(tf.data.AUTOTUNE)


def _tokenize_and_shift(
    source_tokenizer: SubwordTokenizer, target_tokenizer: SubwordTokenizer, max_length: int
):
    """Returns the map function from a chunk of string pairs to model inputs and labels."""
    start_id, end_id = target_tokenizer.start_id, target_tokenizer.end_id

    def tokenize_and_shift(sources: tf.Tensor, targets: tf.Tensor):
        source_tokens = source_tokenizer.tokenize(sources)[:, :max_length]
        target = target_tokenizer.tokenize(targets)[:, : max_length - 1]
        column = tf.ones([target.nrows(), 1], tf.int64)
        decoder_inputs = tf.concat([column * start_id, target], axis=1)
        labels = tf.concat([target, column * end_id], axis=1)
        return {"source_tokens": source_tokens, "target_tokens": decoder_inputs}, labels

    return tokenize_and_shift


def _pair_length(inputs: dict[str, tf.Tensor], labels: tf.Tensor) -> tf.Tensor:
    return tf.maximum(tf.shape(inputs["source_tokens"])[0], tf.shape(labels)[0])


def padding_fraction(dataset: tf.data.Dataset, *, pad_id: int = 0) -> float:
    """Fraction of `[PAD]` positions in the `source_tokens` and `target_tokens` of a dataset.

    Args:
        dataset: Batches as produced by `make_dataset` (iterated once, in full).
        pad_id: The padding id.

    Returns:
        Padding positions / all positions, over both inputs of every batch.
    """
    padding = total = 0
    for inputs, _ in dataset:
        for tokens in (inputs["source_tokens"], inputs["target_tokens"]):
            padding += int(tf.math.count_nonzero(tokens == pad_id))
            total += int(tf.size(tokens))
    return padding / total
