"""Parallel corpora from files, and the `tf.data` pipeline that feeds `model.fit`.

Reading is strict about what is broken (mismatched line counts, invalid UTF-8, malformed TSV
lines raise `DataError` naming the file and line) and lenient, but loud, about what is merely
unusable (empty or over-long pairs are skipped and counted in a log message).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from collections.abc import Iterable
from pathlib import Path

import tensorflow as tf

from keras_transformer.text.batching import plan_batches
from keras_transformer.text.tokenizer import SubwordTokenizer

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"
# Sentences are tokenized in chunks: one tokenizer call per chunk is far cheaper than per pair.
_TOKENIZE_CHUNK = 1024
# Pairs sorted into batches together; see `make_dataset`'s `pool_size`.
_POOL_SIZE = 16_384


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
    pairs: ParallelCorpus | tf.data.Dataset,
    source_tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer,
    *,
    batch_size: int = 64,
    batch_tokens: int | None = None,
    max_length: int = 64,
    bucket_width: int | None = 4,
    shuffle: bool = True,
    seed: int = 0,
    drop_remainder: bool = False,
    pad_to_max_length: bool = False,
    pool_size: int = _POOL_SIZE,
) -> tf.data.Dataset:
    """Builds the training (or evaluation) pipeline: tokenize, trim, shift, bucket, batch.

    Each element is `({"source_tokens": (batch, src_len), "target_tokens": (batch, tgt_len)},
    labels (batch, tgt_len))`, all `int64` padded with `[PAD]` = 0. For a target sentence with
    tokens `y`, `target_tokens` is `[START] + y` (the decoder input) and `labels` is
    `y + [END]`: the same length, labels never contain `[START]`, the decoder input never `[END]`.
    Sources carry no `[START]`/`[END]`, matching `SubwordTokenizer.tokenize` at inference.

    Pairs are tokenized in chunks of `_TOKENIZE_CHUNK`, several chunks in parallel; a
    `ParallelCorpus` only once, in the first epoch, after which its ids stay in memory (8 bytes
    per token: about 6 MB for Multi30k's 29,000 training pairs). With bucketing, `pool_size`
    pairs at a time are sorted by length and cut into batches with whole-tensor ops
    (`batching.plan_batches`); nothing runs per sentence pair.

    Args:
        pairs: Sentence pairs: a `ParallelCorpus`, or a `tf.data.Dataset` of `(source, target)`
            scalar `tf.string` pairs (e.g. from a streaming reader, which shuffles them itself).
        source_tokenizer: Tokenizer of the source language.
        target_tokenizer: Tokenizer of the target language.
        batch_size: Sentences per batch.
        batch_tokens: If set, replaces `batch_size`: each batch holds as many sentences as fit
            this many target tokens, padding included (with bucketing at its longest pair's
            length, without at `max_length`). Sources are held to the same bound, so no
            sequence tensor of a batch has more than `batch_tokens` elements.
        max_length: Sources are cut to `max_length` tokens, targets to `max_length - 1` so that
            `target_tokens` and `labels` have at most `max_length`.
        bucket_width: Batch pairs whose lengths (the longer of source and target) differ by
            less than this, which cuts padding: each pool is sorted by length (pairs of equal
            length in their incoming, e.g. shuffled, order) and cut into batches from the
            shortest. `None` batches pairs in their incoming order, each batch padded to its
            longest pair.
        shuffle: For a `ParallelCorpus`, shuffle the pairs (the whole corpus, reshuffled every
            epoch). With bucketing, also shuffle the order of the batches cut from each pool
            (for a dataset, this is the only shuffling done here).
        seed: Shuffle seed.
        drop_remainder: Drop incomplete batches: under `batch_size` sentences, or with
            `batch_tokens` when the next sentence would still have fit. Without `batch_tokens`
            or bucketing, the batch dimension becomes static.
        pad_to_max_length: Pad every batch to `max_length` (fully static shapes with
            `drop_remainder`, no bucketing), e.g. for TPUs.
        pool_size: Pairs sorted into batches together when bucketing. Bigger pools pad less
            and shuffle batches more widely, at the cost of memory and of the time before the
            first batch.

    Returns:
        A prefetched `tf.data.Dataset`.

    Raises:
        ValueError: On non-positive sizes or an empty corpus.
        TypeError: If `pairs` is neither a `ParallelCorpus` nor a dataset of string pairs.
    """
    for label, value in (("batch_size", batch_size), ("max_length", max_length),
                         ("batch_tokens", batch_tokens), ("bucket_width", bucket_width),
                         ("pool_size", pool_size)):
        if value is not None and value < 1:
            raise ValueError(f"{label} must be positive, got {value}")
    if max_length < 2:
        raise ValueError(f"max_length must leave room for [START]/[END], got {max_length}")
    if isinstance(pairs, ParallelCorpus) and not len(pairs):
        raise ValueError("the corpus holds no sentence pairs")
    if pad_to_max_length:
        bucket_width = None

    if bucket_width is None:
        # Pools of a whole number of batches, so that only the last batch of the data can be
        # incomplete.
        full_size = batch_size if batch_tokens is None else max(1, batch_tokens // max_length)
        pool_size = full_size * max(1, _TOKENIZE_CHUNK // full_size)
        chunk = pool_size
    else:
        full_size = None if batch_tokens is not None else batch_size
        chunk = min(_TOKENIZE_CHUNK, pool_size)

    tokenize = _tokenize_and_trim(source_tokenizer, target_tokenizer, max_length)
    if isinstance(pairs, ParallelCorpus):
        pools = _corpus_pools(pairs, tokenize, chunk, pool_size, shuffle=shuffle, seed=seed)
    else:
        pools = _stream_pools(_checked_pair_dataset(pairs), tokenize, chunk, pool_size)
    shuffle_batches = shuffle and bucket_width is not None
    if shuffle_batches:
        # One fresh random number per pool and epoch (and the same ones for the same seed)
        # seeds the stateless shuffle of that pool's batches.
        pools = tf.data.Dataset.zip(
            pools, tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        )
    plan = functools.partial(
        plan_batches, batch_size=batch_size, batch_tokens=batch_tokens,
        bucket_width=bucket_width, max_length=max_length, drop_remainder=drop_remainder,
    )

    def cut_pool(sources, targets, random=None):
        lengths = tf.maximum(sources.row_lengths(), targets.row_lengths() + 1)
        shuffle_seed = None if random is None else tf.stack([random, 1])
        order, row_splits = plan(lengths, shuffle_seed=shuffle_seed)
        return tuple(
            tf.RaggedTensor.from_row_splits(tf.gather(side, order), row_splits)
            for side in (sources, targets)
        )

    batches = (
        pools.map((lambda pool, random: cut_pool(*pool, random)) if shuffle_batches else cut_pool)
        # The next pool is tokenized and cut while this one's batches are handed out.
        .prefetch(1)
        .flat_map(lambda sources, targets: tf.data.Dataset.from_tensor_slices((sources, targets)))
        .map(
            _model_inputs(target_tokenizer, max_length if pad_to_max_length else None,
                          full_size if drop_remainder else None),
            num_parallel_calls=tf.data.AUTOTUNE,
        )
    )
    return batches.prefetch(tf.data.AUTOTUNE)


def _corpus_pools(
    corpus: ParallelCorpus, tokenize, chunk: int, pool_size: int, *, shuffle: bool, seed: int
) -> tf.data.Dataset:
    """Pools of `pool_size` tokenized pairs drawn from the whole corpus, reshuffled each epoch.

    The corpus is tokenized once, in the first epoch, and its ids are kept in memory:
    tokenizing is most of the pipeline's work, and it would give the same ids every epoch. Later
    epochs only permute the ids and cut them into pools.
    """
    num_chunks = -(-len(corpus) // chunk)
    tokens = (
        tf.data.Dataset.from_tensor_slices((corpus.sources, corpus.targets))
        .batch(chunk)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        .cache()
        # One element holding every pair, so that an epoch can draw from all of them.
        .batch(num_chunks)
        .map(lambda sources, targets: (sources.merge_dims(0, 1), targets.merge_dims(0, 1)))
    )
    if shuffle:
        def permute(pair, random):
            # One fresh random number per epoch (the same ones for the same seed).
            order = tf.random.experimental.stateless_shuffle(
                tf.range(len(corpus), dtype=tf.int64), seed=tf.stack([random, 0])
            )
            return tuple(tf.gather(side, order) for side in pair)

        tokens = tf.data.Dataset.zip(
            tokens, tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)
        ).map(permute)

    def cut_into_pools(sources: tf.RaggedTensor, targets: tf.RaggedTensor) -> tf.data.Dataset:
        return tf.data.Dataset.range(0, len(corpus), pool_size).map(
            lambda start: (sources[start : start + pool_size], targets[start : start + pool_size])
        )

    return tokens.flat_map(cut_into_pools)


def _stream_pools(pairs: tf.data.Dataset, tokenize, chunk: int, pool_size: int) -> tf.data.Dataset:
    """Pools of about `pool_size` pairs (whole chunks) of a pair dataset, in its order."""
    pools = pairs.batch(chunk).map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
    chunks_per_pool = max(1, pool_size // chunk)
    if chunks_per_pool > 1:
        pools = pools.batch(chunks_per_pool).map(
            lambda sources, targets: (sources.merge_dims(0, 1), targets.merge_dims(0, 1))
        )
    return pools


def _checked_pair_dataset(pairs: tf.data.Dataset) -> tf.data.Dataset:
    """Returns `pairs` if its elements are `(source, target)` scalar strings, else raises."""
    expected = (tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.string))
    spec = getattr(pairs, "element_spec", None)
    if not isinstance(pairs, tf.data.Dataset) or not (
        isinstance(spec, tuple) and len(spec) == 2
        and all(s.is_compatible_with(e) for s, e in zip(spec, expected, strict=True))
    ):
        raise TypeError(
            "pairs must be a ParallelCorpus or a tf.data.Dataset of (source, target) scalar "
            f"tf.string pairs, got {spec if spec is not None else type(pairs).__name__}"
        )
    return pairs


def _tokenize_and_trim(
    source_tokenizer: SubwordTokenizer, target_tokenizer: SubwordTokenizer, max_length: int
):
    """Returns the map function from a chunk of string pairs to trimmed ragged token ids."""

    def tokenize_and_trim(sources: tf.Tensor, targets: tf.Tensor):
        # Targets leave one position for [START] (decoder input) or [END] (labels).
        return (source_tokenizer.tokenize(sources)[:, :max_length],
                target_tokenizer.tokenize(targets)[:, : max_length - 1])

    return tokenize_and_trim


def _model_inputs(target_tokenizer: SubwordTokenizer, width: int | None, rows: int | None):
    """Returns the map function from one batch of ragged ids to padded, shifted model inputs."""
    start_id, end_id = target_tokenizer.start_id, target_tokenizer.end_id

    def model_inputs(sources: tf.RaggedTensor, targets: tf.RaggedTensor):
        sources = sources.to_tensor(shape=[rows, width])
        target_lengths = targets.row_lengths()
        targets = targets.to_tensor(shape=[rows, None if width is None else width - 1])
        start = tf.fill([tf.shape(targets)[0], 1], tf.constant(start_id, tf.int64))
        decoder_inputs = tf.concat([start, targets], axis=1)
        # [END] goes right after each target's last token, into the padding position there.
        labels = tf.concat([targets, tf.zeros_like(start)], axis=1) + tf.one_hot(
            target_lengths, tf.shape(decoder_inputs)[1], on_value=end_id, off_value=0,
            dtype=tf.int64,
        )
        return {"source_tokens": sources, "target_tokens": decoder_inputs}, labels

    return model_inputs


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
