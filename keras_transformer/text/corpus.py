"""Parallel corpora streamed from (sharded, gzipped) files, never held whole in memory.

`scan_corpus` checks a corpus in one fast pass and counts what training will use; `pair_dataset`
streams the usable pairs as a `tf.data.Dataset`; `sample_corpus` draws a bounded random sample
(for learning vocabularies). All three accept, strip, skip and count exactly as
`data.read_parallel_files` / `data.read_tsv` do, so a corpus too big for those readers gives the
pairs they would have returned.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import itertools
import logging
import math
import operator
import os
import random
import sys
from collections.abc import Iterator
from typing import BinaryIO

import numpy as np
import tensorflow as tf

from keras_transformer.text.data import DataError, ParallelCorpus

logger = logging.getLogger(__name__)

_BOM = b"\xef\xbb\xbf"
# The characters for which `str.isspace()` holds: what Python's `str.strip()` and `str.split()`
# (and so the in-memory readers) treat as whitespace. RE2's `\s` is narrower, hence the list.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_SPACE_CLASS = "[" + "".join(f"\\x{{{ord(char):x}}}" for char in WHITESPACE) + "]"
_EDGE_SPACE = f"^{_SPACE_CLASS}+|{_SPACE_CLASS}+$"
# The scan decodes this many bytes at a time: big enough that per-call costs vanish, small
# enough that memory stays flat whatever the corpus size.
_CHUNK_BYTES = 8 << 20
# Lines per batch inside the tf.data pipeline: the string ops run vectorized over a batch.
_LINES_PER_BATCH = 1024
_READ_BUFFER_BYTES = 1 << 20
# Files read at once when shuffling (each holds a read buffer and a batch of lines).
_INTERLEAVED_FILES = 8


@dataclasses.dataclass(frozen=True)
class CorpusFiles:
    """Where a parallel corpus lives: `source` + `target` (line-aligned) or `tsv`.

    Each is a path or a glob pattern (several shards, read in sorted order; the i-th source shard
    pairs with the i-th target shard). Files ending in `.gz` are gzip-compressed. Paths go through
    `tf.io.gfile`, so any filesystem TensorFlow reads (`gs://...`) works.

    Attributes:
        source: Source-language sentences, one per line.
        target: Target-language sentences, line i translating line i of `source`.
        tsv: `source<TAB>target` lines, instead of `source` and `target`.

    Example:
        >>> files = CorpusFiles(source="wmt14/*.en.gz", target="wmt14/*.de.gz")  # doctest: +SKIP
    """

    source: str | None = None
    target: str | None = None
    tsv: str | None = None

    def __post_init__(self) -> None:
        for name in ("source", "target", "tsv"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, os.fspath(value))
        if self.tsv is not None:
            if self.source is not None or self.target is not None:
                raise ValueError("give either tsv or source and target, not both")
        elif self.source is None or self.target is None:
            raise ValueError("give source and target together, or tsv alone")

    @property
    def is_tsv(self) -> bool:
        """Whether the corpus is one (sharded) TSV rather than two line-aligned sides."""
        return self.tsv is not None

    @property
    def origin(self) -> str:
        """The corpus as messages name it: `"<source> + <target>"` or the TSV pattern."""
        return self.tsv if self.is_tsv else f"{self.source} + {self.target}"

    def shards(self) -> list[tuple[str, ...]]:
        """Expands the patterns into shards, in sorted order.

        Returns:
            One tuple per shard: `(source_path, target_path)`, or `(tsv_path,)`.

        Raises:
            DataError: If a pattern matches no file, or the source and target patterns match
                different numbers of files.
        """
        if self.is_tsv:
            return [(path,) for path in _expand(self.tsv)]
        sources, targets = _expand(self.source), _expand(self.target)
        if len(sources) != len(targets):
            raise DataError(
                f"{self.source} matches {len(sources)} files but {self.target} matches "
                f"{len(targets)}; the i-th source file pairs with the i-th target file"
            )
        return list(zip(sources, targets, strict=True))


@dataclasses.dataclass(frozen=True)
class CorpusStats:
    """What a pass over a corpus found.

    Attributes:
        pairs: Usable pairs (what `pair_dataset` yields).
        empty: Pairs skipped because a side is empty after stripping.
        too_long: Pairs skipped because a side has more than `max_words` words.
        files: Files read (a source file and its target file count as two).
    """

    pairs: int
    empty: int
    too_long: int
    files: int


def scan_corpus(files: CorpusFiles, *, max_words: int | None = 200) -> CorpusStats:
    """Checks a corpus in one streaming pass and counts its usable and skipped pairs.

    Memory stays flat (one chunk of each file at a time). The counts are logged as the in-memory
    readers log them, as a warning when pairs are skipped. A line holding a carriage return
    between other characters is read differently by `tf.data.TextLineDataset` (which drops every
    `\\r`), so such lines are counted in a warning too.

    Args:
        files: The corpus.
        max_words: Pairs with a side longer than this many words are skipped (and counted);
            `None` keeps all.

    Returns:
        The counts.

    Raises:
        DataError: Naming the file (and line) on a pattern matching nothing, source and target
            files of different line counts, invalid UTF-8, a TSV line without exactly two
            tab-separated fields, or a corpus without a usable pair.
    """
    counts = _Counts()
    for _ in _pair_blocks(files, max_words, counts):
        pass
    return counts.finish(files, max_words)


def pair_dataset(
    files: CorpusFiles,
    *,
    max_words: int | None = 200,
    shuffle_buffer: int | None = None,
    seed: int = 0,
    num_shards: int = 1,
    shard_index: int = 0,
) -> tf.data.Dataset:
    """Streams the usable pairs of a corpus, read with `tf.data.TextLineDataset`.

    Pairs are stripped, and empty and over-long pairs skipped, in the graph by the rule of
    `scan_corpus`, so without shuffling the elements are exactly the pairs (and order) that
    `read_parallel_files` / `read_tsv` return. Files are not checked for UTF-8: run
    `scan_corpus` first. Source and target files of different line counts, or a malformed TSV
    line, stop the iteration with `tf.errors.InvalidArgumentError` naming the file.

    Args:
        files: The corpus.
        max_words: See `scan_corpus`.
        shuffle_buffer: If set, pairs are shuffled through a buffer of this many pairs (which
            bounds the memory), reshuffled every epoch, and so is the order of the files (unless
            workers split the pairs, see `num_shards`); `None` reads in file order.
        seed: Seed of both shuffles.
        num_shards: Number of workers sharing the corpus (multi-worker training).
        shard_index: This worker's share, in `[0, num_shards)`. With at least `num_shards`
            files, a worker reads every `num_shards`-th file; with fewer, every worker reads
            all files and keeps every `num_shards`-th usable pair. The dataset's auto-shard
            policy is then OFF so that `tf.distribute` does not shard it again.

    Returns:
        Elements `(source, target)`, scalar `tf.string`.

    Raises:
        DataError: If a pattern matches nothing (see `CorpusFiles.shards`).
        ValueError: On a non-positive `shuffle_buffer` or `num_shards`, or `shard_index` out
            of range.

    Example:
        >>> files = CorpusFiles(source="train.de", target="train.en")  # doctest: +SKIP
        >>> scan_corpus(files)  # doctest: +SKIP
        >>> pairs = pair_dataset(files, shuffle_buffer=100_000)  # doctest: +SKIP
    """
    if shuffle_buffer is not None and shuffle_buffer < 1:
        raise ValueError(f"shuffle_buffer must be positive, got {shuffle_buffer}")
    if num_shards < 1:
        raise ValueError(f"num_shards must be positive, got {num_shards}")
    if not 0 <= shard_index < num_shards:
        raise ValueError(f"shard_index must be in [0, {num_shards}), got {shard_index}")
    shards = files.shards()
    by_pair = num_shards > 1 and len(shards) < num_shards
    if not by_pair:
        shards = shards[shard_index::num_shards]
    shuffle = shuffle_buffer is not None

    paths = tf.data.Dataset.from_tensor_slices(
        tuple(list(column) for column in zip(*shards, strict=True))
    )
    # Workers that split the pairs must read them in one order; there are few files then anyway.
    if shuffle and not by_pair:
        paths = paths.shuffle(len(shards), seed=seed, reshuffle_each_iteration=True)
    read_shard = _read_tsv_shard if files.is_tsv else _read_parallel_shard
    if shuffle:  # reading several files at once mixes them
        dataset = paths.interleave(
            read_shard,
            cycle_length=min(len(shards), _INTERLEAVED_FILES),
            num_parallel_calls=tf.data.AUTOTUNE,
            deterministic=True,
        )
    else:  # one file after the other: file order
        dataset = paths.flat_map(read_shard)
    dataset = dataset.map(
        _usable_pairs_fn(max_words), num_parallel_calls=tf.data.AUTOTUNE, deterministic=True
    ).unbatch()
    if by_pair:
        dataset = dataset.shard(num_shards, shard_index)
    if shuffle:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if num_shards > 1:
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
        dataset = dataset.with_options(options)
    return dataset.prefetch(tf.data.AUTOTUNE)


def sample_corpus(
    files: CorpusFiles, count: int, *, max_words: int | None = 200, seed: int = 0
) -> ParallelCorpus:
    """Draws up to `count` usable pairs uniformly from the whole corpus, in one streaming pass.

    Reservoir sampling with geometric skips (Li's "Algorithm L"): memory holds `count` pairs,
    and random draws number about `count * (1 + ln(pairs / count))`, not one per pair, so the
    pass costs about what `scan_corpus` costs. The corpus is checked (and its counts logged) as
    `scan_corpus` does.

    Args:
        files: The corpus.
        count: Most pairs to return; a corpus with fewer usable pairs is returned whole.
        max_words: See `scan_corpus`.
        seed: The same seed draws the same sample.

    Returns:
        The sampled pairs, stripped, in corpus order.

    Raises:
        DataError: As `scan_corpus`.
        ValueError: If `count` is not positive.
    """
    if count < 1:
        raise ValueError(f"count must be positive, got {count}")
    rng = random.Random(seed)

    def uniform() -> float:  # in (0, 1), so that its logarithm is finite and negative
        return rng.random() or sys.float_info.min

    def skip(weight: float) -> int:  # pairs passed over before the next one enters
        if weight >= 1.0:  # exp(log(u) / count) rounds to 1 for a huge count: take the next
            return 0
        return math.floor(math.log(uniform()) / math.log1p(-weight))

    reservoir: list[tuple[int, str, str]] = []  # (index among usable pairs, source, target)
    seen = 0
    weight = math.exp(math.log(uniform()) / count)
    next_pick = count + skip(weight)
    counts = _Counts()
    for sources, targets, usable in _pair_blocks(files, max_words, counts):
        usable_indices = np.flatnonzero(usable).tolist()  # list indexing beats numpy's here
        for offset, index in enumerate(usable_indices[: count - len(reservoir)]):
            reservoir.append((seen + offset, sources[index], targets[index]))
        block_end = seen + len(usable_indices)
        while next_pick < block_end:
            index = usable_indices[next_pick - seen]
            reservoir[rng.randrange(count)] = (next_pick, sources[index], targets[index])
            weight *= math.exp(math.log(uniform()) / count)
            next_pick += 1 + skip(weight)
        seen = block_end
    counts.finish(files, max_words)
    reservoir.sort()
    return ParallelCorpus(
        [source.strip() for _, source, _ in reservoir],
        [target.strip() for _, _, target in reservoir],
    )


# Scanning, in Python.

@dataclasses.dataclass
class _Counts:
    pairs: int = 0
    empty: int = 0
    too_long: int = 0
    files: int = 0

    def finish(self, files: CorpusFiles, max_words: int | None) -> CorpusStats:
        """Logs the counts as `data._usable_pairs` does; raises if nothing is usable."""
        level = logging.WARNING if self.empty or self.too_long else logging.INFO
        logger.log(
            level,
            "%s: %s pairs read, skipped %s empty and %s over %s words",
            files.origin, f"{self.pairs:,}", f"{self.empty:,}", f"{self.too_long:,}", max_words,
        )
        if not self.pairs:
            raise DataError(f"{files.origin}: no usable sentence pairs")
        return CorpusStats(self.pairs, self.empty, self.too_long, self.files)


def _pair_blocks(
    files: CorpusFiles, max_words: int | None, counts: _Counts
) -> Iterator[tuple[list[str], list[str], np.ndarray]]:
    """Yields blocks of unstripped `(sources, targets, usable)`, adding them up in `counts`."""
    for shard in files.shards():
        counts.files += len(shard)
        blocks = _tsv_blocks(*shard) if files.is_tsv else _aligned_blocks(*shard)
        for sources, targets in blocks:
            empty = _blank(sources) | _blank(targets)
            too_long = ~empty & (_over(sources, max_words) | _over(targets, max_words))
            usable = ~(empty | too_long)
            counts.empty += int(np.count_nonzero(empty))
            counts.too_long += int(np.count_nonzero(too_long))
            counts.pairs += int(np.count_nonzero(usable))
            yield sources, targets, usable


def _blank(lines: list[str]) -> np.ndarray:
    """Lines that `str.strip()` would leave empty."""
    lengths = np.fromiter(map(len, lines), np.int64, len(lines))
    return (lengths == 0) | np.fromiter(map(str.isspace, lines), bool, len(lines))


def _over(lines: list[str], max_words: int | None) -> np.ndarray:
    """Lines of more than `max_words` words.

    A line of more than m words holds at least m + 1 characters and m separators, so only lines
    longer than 2m characters are split.
    """
    over = np.zeros(len(lines), bool)
    if max_words is None:
        return over
    lengths = np.fromiter(map(len, lines), np.int64, len(lines))
    for index in np.flatnonzero(lengths > 2 * max_words):
        over[index] = len(lines[index].split()) > max_words
    return over


def _aligned_blocks(source_path: str, target_path: str) -> Iterator[tuple[list[str], list[str]]]:
    """Yields blocks of lines `(sources, targets)` read in step from two line-aligned files."""
    streams = (_line_blocks(source_path), _line_blocks(target_path))
    pending: list[list[str]] = [[], []]
    lines_read = [0, 0]
    while True:
        for side, stream in enumerate(streams):
            if not pending[side]:
                pending[side] = next(stream, [])
                lines_read[side] += len(pending[side])
        if not pending[0] or not pending[1]:
            break
        size = min(len(pending[0]), len(pending[1]))
        yield pending[0][:size], pending[1][:size]
        pending = [pending[0][size:], pending[1][size:]]
    if pending[0] or pending[1]:  # one file ended first: count the rest of the other
        for side, stream in enumerate(streams):
            lines_read[side] += sum(map(len, stream))
        raise DataError(
            f"{source_path} has {lines_read[0]:,} lines but {target_path} has "
            f"{lines_read[1]:,} lines; the files must be line-aligned"
        )


def _tsv_blocks(path: str) -> Iterator[tuple[list[str], list[str]]]:
    """Yields blocks of `(sources, targets)` split from a TSV file's lines."""
    for first_number, lines in _numbered_line_blocks(path):
        tabs = np.fromiter(map(str.count, lines, itertools.repeat("\t")), np.int64, len(lines))
        for index in np.flatnonzero(tabs != 1):
            if lines[index].strip():  # a blank line is an empty pair, not an error
                raise DataError(
                    f"{path}:{first_number + index}: expected 2 tab-separated fields "
                    f"(source<TAB>target), found {tabs[index] + 1}"
                )
        fields = list(map(str.partition, lines, itertools.repeat("\t")))
        yield list(map(operator.itemgetter(0), fields)), list(map(operator.itemgetter(2), fields))


def _line_blocks(path: str) -> Iterator[list[str]]:
    for _, lines in _numbered_line_blocks(path):
        yield lines


def _numbered_line_blocks(path: str) -> Iterator[tuple[int, list[str]]]:
    """Yields `(number of the first line, lines)` per chunk of a file, decoded as UTF-8.

    Lines split at `\\n` only, keep a trailing `\\r` (stripping removes it later), and the file's
    UTF-8 BOM is dropped: the lines of `data._read_lines`, up to that `\\r`.
    """
    number = 1
    # Lines that TextLineDataset reads differently: how many, and the first one's number.
    midline_returns, first_midline_return = 0, None
    with _open(path) as stream:
        carry = b""
        at_start = True
        while True:
            chunk = stream.read(_CHUNK_BYTES)
            data = carry + chunk
            if at_start and (len(data) >= len(_BOM) or not chunk):
                data, at_start = data.removeprefix(_BOM), False
            if chunk:
                end = data.rfind(b"\n")
                if end < 0:
                    carry = data
                    continue
                block, carry = data[:end], data[end + 1 :]
            elif data:  # the last line, without a final newline
                block, carry = data, b""
            else:
                break
            lines = _decode(block, path, number).split("\n")
            if b"\r" in block:
                numbers = _midline_returns(block, lines, number)
                midline_returns += len(numbers)
                first_midline_return = first_midline_return or next(iter(numbers), None)
            yield number, lines
            number += len(lines)
            if not chunk:
                break
    if midline_returns:
        logger.warning(
            "%s: %s lines (first: line %s) hold a carriage return between other characters, "
            "which tf.data.TextLineDataset drops: pair_dataset reads those lines without it",
            path, f"{midline_returns:,}", first_midline_return,
        )


def _midline_returns(block: bytes, lines: list[str], first_number: int) -> list[int]:
    """Numbers of the lines that keep a `\\r` after stripping (only line-final ones are benign)."""
    line_final = block.count(b"\r\n") + block.endswith(b"\r")
    if block.count(b"\r") == line_final:
        return []
    return [first_number + index for index, line in enumerate(lines) if "\r" in line.strip()]


def _decode(block: bytes, path: str, first_number: int) -> str:
    """Decodes a block of whole lines; on invalid UTF-8, names the line as `data` does."""
    try:
        return block.decode("utf-8")
    except UnicodeDecodeError as error:
        start = block.rfind(b"\n", 0, error.start) + 1
        end = block.find(b"\n", error.start)
        line = block[start : end if end >= 0 else len(block)].removesuffix(b"\r")
        number = first_number + block.count(b"\n", 0, error.start)
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as line_error:
            bad = line[line_error.start : line_error.end]
            raise DataError(
                f"{path}:{number}: invalid UTF-8 at byte {line_error.start + 1} of the line "
                f"({bad!r}); convert the file to UTF-8"
            ) from None
        raise  # unreachable: the undecodable bytes lie in that line


@contextlib.contextmanager
def _open(path: str) -> Iterator[BinaryIO]:
    with tf.io.gfile.GFile(path, "rb") as raw:
        if path.endswith(".gz"):
            with gzip.GzipFile(fileobj=raw) as unzipped:
                yield unzipped
        else:
            yield raw


def _expand(pattern: str) -> list[str]:
    paths = sorted(tf.io.gfile.glob(pattern))
    if not paths:
        raise DataError(f"{pattern} matches no file")
    return paths


# Reading, in the tf.data graph.

def _compression(path: tf.Tensor) -> tf.Tensor:
    return tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")


def _line_batches(path: tf.Tensor) -> tf.data.Dataset:
    """Batches of a file's lines, without the UTF-8 BOM that TextLineDataset keeps."""
    lines = tf.data.TextLineDataset(
        path, compression_type=_compression(path), buffer_size=_READ_BUFFER_BYTES
    )

    def drop_bom(index: tf.Tensor, batch: tf.Tensor) -> tf.Tensor:
        first = batch[:1]
        first = tf.where(index == 0, tf.strings.regex_replace(first, "^\ufeff", ""), first)
        return tf.concat([first, batch[1:]], axis=0)

    return lines.batch(_LINES_PER_BATCH).enumerate().map(drop_bom)


def _read_parallel_shard(source_path: tf.Tensor, target_path: tf.Tensor) -> tf.data.Dataset:
    # A final empty batch on each side: when one file ends first, its empty batch meets a full
    # one from the other file and the check below fails, where a plain zip would stop silently.
    end = tf.data.Dataset.from_tensors(tf.constant([], tf.string))
    sides = (_line_batches(source_path).concatenate(end),
             _line_batches(target_path).concatenate(end))

    def check_aligned(sources: tf.Tensor, targets: tf.Tensor):
        aligned = tf.debugging.Assert(
            tf.equal(tf.size(sources), tf.size(targets)),
            ["these files differ in line count (scan_corpus names the counts):",
             source_path, target_path],
        )
        with tf.control_dependencies([aligned]):
            return tf.identity(sources), tf.identity(targets)

    return tf.data.Dataset.zip(sides).map(check_aligned)


def _read_tsv_shard(path: tf.Tensor) -> tf.data.Dataset:
    def split(lines: tf.Tensor):
        fields = tf.strings.split(lines, "\t")
        odd = tf.gather(lines, tf.where(fields.row_lengths() != 2)[:, 0])
        # As in `read_tsv`, a blank line is an empty pair; any other line needs two fields.
        well_formed = tf.debugging.Assert(
            tf.reduce_all(tf.strings.length(_strip(odd)) == 0),
            ["lines without 2 tab-separated fields (scan_corpus names the line):", path, odd],
        )
        with tf.control_dependencies([well_formed]):
            # Blank lines come out as ("", "") or whitespace: empty pairs, skipped later.
            pairs = fields.to_tensor(default_value="", shape=[None, 2])
            return pairs[:, 0], pairs[:, 1]

    return _line_batches(path).map(split)


def _usable_pairs_fn(max_words: int | None):
    """Returns the map from a batch of unstripped pairs to its usable pairs, stripped."""

    def usable_pairs(sources: tf.Tensor, targets: tf.Tensor):
        sources, targets = _strip(sources), _strip(targets)
        keep = (tf.strings.length(sources) > 0) & (tf.strings.length(targets) > 0)
        if max_words is not None:
            keep &= ~(_too_many_words(sources, max_words) | _too_many_words(targets, max_words))
        return tf.boolean_mask(sources, keep), tf.boolean_mask(targets, keep)

    return usable_pairs


def _strip(strings: tf.Tensor) -> tf.Tensor:
    """`str.strip()` in the graph (`tf.strings.strip` only knows ASCII whitespace)."""
    return tf.strings.regex_replace(strings, _EDGE_SPACE, "")


def _too_many_words(stripped: tf.Tensor, max_words: int) -> tf.Tensor:
    """`len(s.split()) > max_words` per string; only those over 2 * max_words bytes are split."""
    candidates = tf.where(tf.strings.length(stripped) > 2 * max_words)
    single_spaced = tf.strings.regex_replace(
        tf.gather_nd(stripped, candidates), f"{_SPACE_CLASS}+", " "
    )
    words = tf.strings.split(single_spaced, " ").row_lengths()
    return tf.scatter_nd(candidates, words > max_words, tf.shape(stripped, out_type=tf.int64))
