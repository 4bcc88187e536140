import gzip
import logging
import re
import sys
from collections import Counter
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.text import corpus as corpus_module
from keras_transformer.text.corpus import (
    CorpusFiles,
    CorpusStats,
    pair_dataset,
    sample_corpus,
    scan_corpus,
)
from keras_transformer.text.data import DataError, read_parallel_files, read_tsv

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"
needs_multi30k = pytest.mark.skipif(
    not MULTI30K.is_dir(), reason="needs ../shared/data/multi30k beside the repo"
)
LOGGER = "keras_transformer.text"


def _pairs(dataset):
    return [(source.decode(), target.decode()) for source, target in dataset.as_numpy_iterator()]


def _reference(corpus):
    return list(zip(corpus.sources, corpus.targets, strict=True))


def _write(path, data):
    path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
    return path


def _lines(path, count=None):
    return path.read_bytes().splitlines(keepends=True)[:count]


@pytest.fixture
def small_chunks(monkeypatch):
    """Decodes 1,000 bytes at a time, so that lines and characters straddle chunk boundaries."""
    monkeypatch.setattr(corpus_module, "_CHUNK_BYTES", 1000)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """The first 1,200 Multi30k pairs as one file per side and as 3 uneven shards, 2 gzipped."""
    root = tmp_path_factory.mktemp("shards")
    sides = {}
    for side in ("de", "en"):
        lines = _lines(MULTI30K / f"train.{side}", 1200)
        _write(root / f"whole.{side}", b"".join(lines))
        for name, part in (("a.gz", lines[:100]), ("b", lines[100:700]), ("c.gz", lines[700:])):
            _write(root / f"part-{name.removesuffix('.gz')}.{side}{name[1:]}", b"".join(part))
        sides[side] = lines
    return root


# Whitespace.

def test_whitespace_is_what_python_strips():
    expected = "".join(char for char in map(chr, range(sys.maxunicode + 1)) if char.isspace())
    assert corpus_module.WHITESPACE == expected


# Streaming equals the in-memory readers.

@needs_multi30k
@pytest.mark.slow
@pytest.mark.parametrize("max_words", [200, 12, None])
def test_multi30k_streams_as_read_in_memory(caplog, small_chunks, max_words):
    source, target = MULTI30K / "train.de", MULTI30K / "train.en"
    files = CorpusFiles(source=str(source), target=str(target))
    with caplog.at_level(logging.INFO, logger=LOGGER):
        expected = read_parallel_files(source, target, max_words=max_words)
        stats = scan_corpus(files, max_words=max_words)
    in_memory_log, streamed_log = (record.getMessage() for record in caplog.records)
    assert streamed_log == in_memory_log
    assert stats.pairs == len(expected) and stats.files == 2
    if max_words == 12:  # Multi30k has no empty pair, but many over 12 words
        assert stats.too_long > 1000
    assert stats.pairs + stats.empty + stats.too_long == 29_000
    assert _pairs(pair_dataset(files, max_words=max_words)) == _reference(expected)


def _messy_tsv():
    """Multi30k pairs as TSV with CRLF, a BOM, blank and empty-sided lines, over-long sides and
    Unicode whitespace that `str.strip()`/`str.split()` know and ASCII stripping does not."""
    sources = [line.decode().rstrip("\n") for line in _lines(MULTI30K / "val.de")]
    targets = [line.decode().rstrip("\n") for line in _lines(MULTI30K / "val.en")]
    lines = [f"{source}\t{target}" for source, target in zip(sources, targets, strict=True)]
    eleven = "\u3000".join(["Wort"] * 6) + "\xa0" + " \x1c".join(["word"] * 5)
    ten = "\u2003" + "  ".join(["Wort"] * 10) + "\x85"
    shortest_eleven = " ".join("abcdefghijk")  # 21 characters: the fewest for 11 words
    lines[3:3] = ["", "   ", "\t", "nur Quelle\t \u3000", f"{eleven}\tkurz", f"kurz\t{eleven}",
                  f"{shortest_eleven}\tkurz"]
    lines[20:20] = [f"{ten}\t\xa0 zehn Wörter \u2028", "\u3000a\xa0b\u205f\tc\u2009d "]
    return ("\ufeff" + "\r\n".join(lines) + "\r\n").encode()


@needs_multi30k
@pytest.mark.parametrize("name", ["messy.tsv", "messy.tsv.gz"])
def test_tsv_streams_as_read_in_memory(tmp_path, caplog, small_chunks, name):
    data = _messy_tsv()
    plain = _write(tmp_path / "plain.tsv", data)
    path = _write(tmp_path / name, data)
    with caplog.at_level(logging.INFO, logger=LOGGER):
        expected = read_tsv(plain, max_words=10)
        stats = scan_corpus(CorpusFiles(tsv=str(path)), max_words=10)
    in_memory_log, streamed_log = (record.getMessage() for record in caplog.records)
    assert streamed_log == in_memory_log.replace(str(plain), str(path))
    assert stats.pairs == len(expected) and stats.empty == 4 and stats.too_long > 3
    streamed = _pairs(pair_dataset(CorpusFiles(tsv=str(path)), max_words=10))
    assert streamed == _reference(expected)
    assert ("  ".join(["Wort"] * 10), "zehn Wörter") in streamed
    assert ("a\xa0b", "c\u2009d") in streamed


# Broken files fail with file and line.

BROKEN_PARALLEL = {
    "shorter target": (b"a\nb\nc\n", b"x\ny\n"),
    "shorter source": (b"a\nb\n", b"x\ny\nz\nw\n"),
    "invalid UTF-8 in the source": (b"one\r\ntwo\r\nthr\xe9e\r\n", b"eins\nzwei\ndrei\n"),
    "invalid UTF-8 in the target": (b"one\ntwo\nthree", b"eins\nzwei\n\xef\xbb\xbfdr\xc3ei\n"),
}


@pytest.mark.parametrize("case", BROKEN_PARALLEL)
def test_broken_parallel_files_fail_as_in_memory(tmp_path, monkeypatch, case):
    monkeypatch.setattr(corpus_module, "_CHUNK_BYTES", 4)
    padding = b"".join(b"line %d\n" % number for number in range(300))  # past the first chunks
    source = _write(tmp_path / "s.en", padding + BROKEN_PARALLEL[case][0])
    target = _write(tmp_path / "t.de", padding + BROKEN_PARALLEL[case][1])
    with pytest.raises(DataError) as expected:
        read_parallel_files(source, target)
    with pytest.raises(DataError) as error:
        scan_corpus(CorpusFiles(source=str(source), target=str(target)))
    assert str(error.value) == str(expected.value)


@pytest.mark.parametrize("line, fields", [(b"no tab here", 1), (b"one\ttwo\tthree", 3)])
def test_malformed_tsv_fails_as_in_memory(tmp_path, small_chunks, line, fields):
    path = _write(tmp_path / "pairs.tsv", b"a\tb\n\n  \nc\td\n" * 400 + line + b"\ne\tf\n")
    with pytest.raises(DataError) as expected:
        read_tsv(path)
    with pytest.raises(DataError, match=rf":1601: .*found {fields}$") as error:
        scan_corpus(CorpusFiles(tsv=str(path)))
    assert str(error.value) == str(expected.value)


def _shard_pair(root, suffix, second_source, second_target):
    _write(root / f"1.en{suffix}", b"a\nb\n")
    _write(root / f"1.de{suffix}", b"x\ny\n")
    _write(root / f"2.en{suffix}", second_source)
    _write(root / f"2.de{suffix}", second_target)
    return CorpusFiles(source=str(root / f"*.en{suffix}"), target=str(root / f"*.de{suffix}"))


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_broken_second_shard_is_named(tmp_path, suffix):
    files = _shard_pair(tmp_path, suffix, b"c\nd\ne\n", b"z\n")
    with pytest.raises(DataError, match=re.escape(
        f"{tmp_path}/2.en{suffix} has 3 lines but {tmp_path}/2.de{suffix} has 1 lines"
    )):
        scan_corpus(files)
    files = _shard_pair(tmp_path, suffix, b"c\nd\n", b"z\nw\xff\xfev\n")
    with pytest.raises(DataError, match=re.escape(
        f"{tmp_path}/2.de{suffix}:2: invalid UTF-8 at byte 2 of the line (b'\\xff')"
    )):
        scan_corpus(files)
    tsv = _write(tmp_path / f"1.tsv{suffix}", b"a\tb\n")
    _write(tmp_path / f"2.tsv{suffix}", b"a\tb\n\nc d\n")
    with pytest.raises(DataError, match=re.escape(
        f"{tmp_path}/2.tsv{suffix}:3: expected 2 tab-separated fields"
    )):
        scan_corpus(CorpusFiles(tsv=str(tsv.parent / f"*.tsv{suffix}")))


def test_pair_dataset_stops_on_misaligned_or_malformed_files(tmp_path, monkeypatch):
    # Whole batches on both sides until the shorter file ends: its end must still be noticed.
    monkeypatch.setattr(corpus_module, "_LINES_PER_BATCH", 2)
    source = _write(tmp_path / "s.en", b"a\nb\nc\nd\n")
    target = _write(tmp_path / "t.de", b"w\nx\ny\nz\nv\nu\n")
    with pytest.raises(tf.errors.InvalidArgumentError, match="differ in line count"):
        _pairs(pair_dataset(CorpusFiles(source=str(source), target=str(target))))
    tsv = _write(tmp_path / "pairs.tsv", b"a\tb\n \n\t\none\ttwo\tthree\n")
    with pytest.raises(tf.errors.InvalidArgumentError, match="one\\\\ttwo\\\\tthree"):
        _pairs(pair_dataset(CorpusFiles(tsv=str(tsv))))


def test_midline_carriage_returns_are_reported(tmp_path, caplog):
    path = _write(tmp_path / "pairs.tsv", b"a\tb\r\nc\tb\r\n\r\t\r\r\nlone\rreturn\tx\r\n")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        stats = scan_corpus(CorpusFiles(tsv=str(path)))
    assert stats == CorpusStats(pairs=3, empty=1, too_long=0, files=1)
    assert f"{path}: 1 lines (first: line 4) hold a carriage return" in caplog.text
    # The known difference: TextLineDataset drops the "\r" that Python keeps.
    assert _pairs(pair_dataset(CorpusFiles(tsv=str(path)))) == [
        ("a", "b"), ("c", "b"), ("lonereturn", "x")
    ]


# Files and shards.

def test_patterns_are_checked(tmp_path):
    with pytest.raises(DataError, match=re.escape(f"{tmp_path}/*.en matches no file")):
        CorpusFiles(source=str(tmp_path / "*.en"), target=str(tmp_path / "*.de")).shards()
    for name in ("1.en", "2.en", "1.de"):
        _write(tmp_path / name, b"a\n")
    files = CorpusFiles(source=str(tmp_path / "*.en"), target=str(tmp_path / "*.de"))
    with pytest.raises(DataError, match="matches 2 files but .* matches 1"):
        files.shards()
    with pytest.raises(DataError, match="matches no file"):
        pair_dataset(CorpusFiles(tsv=str(tmp_path / "none-*.tsv")))
    with pytest.raises(ValueError, match="together"):
        CorpusFiles(source="a.en")
    with pytest.raises(ValueError, match="not both"):
        CorpusFiles(source="a.en", target="a.de", tsv="a.tsv")


@needs_multi30k
def test_globs_and_gzip_read_as_one_plain_file(shards, small_chunks):
    whole = CorpusFiles(source=str(shards / "whole.de"), target=str(shards / "whole.en"))
    parts = CorpusFiles(source=str(shards / "part-*.de*"), target=str(shards / "part-*.en*"))
    assert [path for path, _ in parts.shards()] == [
        str(shards / name) for name in ("part-a.de.gz", "part-b.de", "part-c.de.gz")
    ]
    expected = scan_corpus(whole, max_words=12)
    assert scan_corpus(parts, max_words=12) == CorpusStats(
        expected.pairs, expected.empty, expected.too_long, files=6
    )
    whole_pairs = _pairs(pair_dataset(whole, max_words=12))
    assert len(whole_pairs) == expected.pairs
    assert _pairs(pair_dataset(parts, max_words=12)) == whole_pairs
    assert sample_corpus(parts, 50, seed=3) == sample_corpus(whole, 50, seed=3)


@needs_multi30k
@pytest.mark.parametrize(
    "pattern, num_shards", [("part-*", 2), ("part-*", 3), ("whole", 3), ("part-[ab]", 3)]
)
def test_worker_shards_are_disjoint_and_complete(shards, pattern, num_shards):
    files = CorpusFiles(
        source=str(shards / f"{pattern}.de*"), target=str(shards / f"{pattern}.en*")
    )
    everything = _pairs(pair_dataset(files))
    assert len(set(everything)) == len(everything)  # Multi30k's first pairs are all distinct
    shares = [
        pair_dataset(files, num_shards=num_shards, shard_index=index, shuffle_buffer=100)
        for index in range(num_shards)
    ]
    policy = shares[0].options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.OFF
    pairs = [_pairs(share) for share in shares]
    assert Counter(pair for share in pairs for pair in share) == Counter(everything)
    if pattern == "whole":  # every num_shards-th pair
        assert [len(share) for share in pairs] == [400, 400, 400]
    elif pattern == "part-[ab]":  # 2 files for 3 workers: every num_shards-th of 700 pairs
        assert [len(share) for share in pairs] == [234, 233, 233]
    else:  # every num_shards-th file of part-a (100 pairs), part-b (600) and part-c (500)
        expected = [600, 600] if num_shards == 2 else [100, 600, 500]
        assert [len(share) for share in pairs] == expected
    with pytest.raises(ValueError, match="shard_index"):
        pair_dataset(files, num_shards=num_shards, shard_index=num_shards)


# Shuffling.

@needs_multi30k
@pytest.mark.slow
def test_shuffling_is_seeded_and_differs_per_epoch(shards):
    files = CorpusFiles(source=str(shards / "part-*.de*"), target=str(shards / "part-*.en*"))
    in_order = _pairs(pair_dataset(files))
    dataset = pair_dataset(files, shuffle_buffer=300, seed=5)
    first, second = _pairs(dataset), _pairs(dataset)
    assert sorted(first) == sorted(second) == sorted(in_order)
    assert first != in_order and second != first
    assert _pairs(pair_dataset(files, shuffle_buffer=300, seed=5)) == first
    assert _pairs(pair_dataset(files, shuffle_buffer=300, seed=6)) != first
    # A one-pair buffer shuffles nothing but the order of the files, itself different per epoch.
    files_only = pair_dataset(files, shuffle_buffer=1, seed=0)
    epochs = [_pairs(files_only) for _ in range(4)]
    assert all(sorted(epoch) == sorted(in_order) for epoch in epochs)
    assert len({tuple(epoch) for epoch in epochs}) > 1


# Sampling.

@needs_multi30k
def test_sample_is_bounded_spread_and_seeded(shards):
    files = CorpusFiles(source=str(shards / "part-*.de*"), target=str(shards / "part-*.en*"))
    everything = _pairs(pair_dataset(files))
    position = {pair: index for index, pair in enumerate(everything)}
    sample = sample_corpus(files, 400, seed=1)
    indices = [position[pair] for pair in _reference(sample)]  # KeyError if not from the corpus
    assert len(indices) == 400 and indices == sorted(set(indices))  # distinct, corpus order
    quarters = Counter(4 * index // len(everything) for index in indices)
    assert all(70 <= quarters[quarter] <= 130 for quarter in range(4))  # 100 expected each
    assert sample_corpus(files, 400, seed=1) == sample
    assert sample_corpus(files, 400, seed=2) != sample
    whole = sample_corpus(files, 5000)
    assert _reference(whole) == everything


def test_every_pair_is_sampled_equally_often(tmp_path):
    lines = b"".join(b"%d\t%d\n" % (number, number) for number in range(30))
    files = CorpusFiles(tsv=str(_write(tmp_path / "pairs.tsv", b"\t\n" + lines)))
    draws = Counter()
    for seed in range(1000):
        sample = sample_corpus(files, 3, seed=seed)
        assert len(sample) == 3
        draws.update(sample.sources)
    # Each pair is in a sample with probability 3/30; 4 standard deviations are 0.038.
    assert all(abs(draws[str(number)] / 1000 - 0.1) < 0.038 for number in range(30))
