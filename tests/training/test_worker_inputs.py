"""Per-worker input pipelines (`inputs.training_pairs` / `worker_training_dataset` with a
`tf.distribute.InputContext`, as `train` builds them under MultiWorkerMirroredStrategy): each
worker reads only its own share of the corpus, never opens the other workers' files, and batches
its pairs so that the workers' batches together are the batches the settings size."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.data import ParallelCorpus, read_parallel_files
from keras_transformer.training.inputs import (
    RunData,
    load_corpora,
    make_tokenizers,
    replica_settings,
    training_dataset,
    training_pairs,
    worker_training_dataset,
)

WORDS = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota", "kappa")
CONFIG = TransformerConfig(max_length=12)
PAIRS = 120


def contexts(workers: int = 2) -> list[tf.distribute.InputContext]:
    """One input pipeline per worker, one replica each (`InputContext`'s arguments: pipelines,
    this pipeline, replicas in sync)."""
    return [tf.distribute.InputContext(workers, index, workers) for index in range(workers)]


def write_corpus(root: Path, shards: int) -> TrainingSettings:
    """`PAIRS` distinct pairs of 1-8 words in `shards` line-aligned file pairs (every 7th pair
    has an empty target: skipped); settings that stream them, holding out a quarter."""
    lines = {"en": [], "de": []}
    for index in range(PAIRS):
        words = [WORDS[(index * 7 + k * 3) % len(WORDS)] for k in range(1 + index % 8)]
        lines["en"].append(f"{index} " + " ".join(words))
        lines["de"].append("" if index % 7 == 3 else " ".join(reversed(words)) + f" {index}")
    for side, side_lines in lines.items():
        size = -(-PAIRS // shards)
        for shard in range(shards):
            part = side_lines[shard * size:(shard + 1) * size]
            (root / f"train-{shard}.{side}").write_text("".join(f"{line}\n" for line in part))
    return TrainingSettings(
        source_file=str(root / "train-*.en"), target_file=str(root / "train-*.de"),
        validation_fraction=0.25, shuffle_buffer=50, seed=2, batch_size=8, vocab_size=200,
    )


def pairs_of(pairs: tf.data.Dataset) -> list[tuple[str, str]]:
    return [(s.decode(), t.decode()) for s, t in pairs.as_numpy_iterator()]


def label_rows(dataset: tf.data.Dataset) -> tuple[collections.Counter, list[int]]:
    """The label rows (real ids) of all batches, counted, and each batch's number of rows."""
    rows, sizes = collections.Counter(), []
    for _, labels in dataset.as_numpy_iterator():
        sizes.append(len(labels))
        rows.update(tuple(row[row != 0]) for row in labels)
    return rows, sizes


@pytest.mark.parametrize("shards", [1, 2, 3])  # fewer, as many and more files than workers
def test_each_worker_streams_only_its_own_pairs(tmp_path, shards):
    settings = write_corpus(tmp_path, shards)
    data = load_corpora(settings)
    corpus = read_parallel_files(tmp_path / "train-0.en", tmp_path / "train-0.de")
    for shard in range(1, shards):
        more = read_parallel_files(tmp_path / f"train-{shard}.en", tmp_path / f"train-{shard}.de")
        corpus = ParallelCorpus(corpus.sources + more.sources, corpus.targets + more.targets)
    usable = set(zip(corpus.sources, corpus.targets, strict=True))
    held_out = set(zip(data.validation.sources, data.validation.targets, strict=True))
    assert len(usable) == PAIRS - len(range(3, PAIRS, 7))  # pairs 3, 10, ... are skipped
    assert held_out and held_out < usable

    shares = [pairs_of(training_pairs(data, settings, context=context))
              for context in contexts()]
    assert all(shares) and len(set(shares[0]) & set(shares[1])) == 0
    assert sorted(shares[0] + shares[1]) == sorted(usable - held_out)
    # One pipeline reads what one device reads.
    assert sorted(pairs_of(training_pairs(data, settings))) == sorted(usable - held_out)


def test_in_memory_pairs_are_split_between_workers():
    corpus = ParallelCorpus([f"s{i}" for i in range(9)], [f"t{i}" for i in range(9)])
    data = RunData(corpus, corpus)
    shares = [training_pairs(data, TrainingSettings(), context=context)
              for context in contexts(3)]
    assert [share.sources for share in shares] == [
        ["s0", "s3", "s6"], ["s1", "s4", "s7"], ["s2", "s5", "s8"]
    ]
    assert shares[1].targets == ["t1", "t4", "t7"]
    assert training_pairs(data, TrainingSettings()) is corpus


@pytest.mark.parametrize("batching", [dict(batch_size=8), dict(batch_tokens=96)])
def test_worker_batches_together_are_the_global_batches(tmp_path, batching):
    settings = write_corpus(tmp_path, 1).replace(**batching)
    data = load_corpora(settings)
    source, target = make_tokenizers(settings, data, tmp_path / "vocab")
    one_device = label_rows(training_dataset(training_pairs(data, settings), source, target,
                                             CONFIG, settings))
    workers = [label_rows(worker_training_dataset(data, source, target, CONFIG, settings, context))
               for context in contexts()]
    # Every pair the one device trains on, once, on exactly one worker.
    assert workers[0][0] + workers[1][0] == one_device[0]
    assert not set(workers[0][0]) & set(workers[1][0])
    if "batch_size" in batching:  # 4 pairs per worker: 8 per step, as on one device
        assert max(one_device[1]) == 8
        assert max(workers[0][1] + workers[1][1]) == 4
    else:  # at most 48 target tokens (padding included) per worker's batch
        for context in contexts():
            dataset = worker_training_dataset(data, source, target, CONFIG, settings, context)
            for _, labels in dataset.as_numpy_iterator():
                assert labels.size <= 96 // 2


def test_a_worker_never_opens_the_other_workers_files(tmp_path):
    settings = write_corpus(tmp_path, 2)
    # The pre-scan, the held-out split and the vocabulary's sample read every file.
    data = load_corpora(settings)
    source, target = make_tokenizers(settings, data, tmp_path / "vocab")
    expected = pairs_of(training_pairs(data, settings, context=contexts()[0]))
    for side in ("en", "de"):  # worker 1's shard: reading it now fails
        path = tmp_path / f"train-1.{side}"
        path.unlink()
        path.mkdir()
    assert pairs_of(training_pairs(data, settings, context=contexts()[0])) == expected
    batches = worker_training_dataset(data, source, target, CONFIG, settings, contexts()[0])
    rows = label_rows(batches)[0]
    assert sum(rows.values()) == len(expected)
    with pytest.raises(tf.errors.OpError):
        pairs_of(training_pairs(data, settings, context=contexts()[1]))


def test_replica_settings_divide_the_global_batch():
    assert replica_settings(TrainingSettings(batch_size=64), 4).batch_size == 16
    tokens = replica_settings(TrainingSettings(batch_tokens=4096, accumulate_steps=2), 4)
    assert tokens.batch_tokens == 1024 and tokens.accumulate_steps == 2
    with pytest.raises(ValueError, match=r"batch_size \(10\) must be a multiple of the 4"):
        replica_settings(TrainingSettings(batch_size=10), 4)
    with pytest.raises(ValueError, match=r"batch_tokens \(8\) must be at least 4 replicas"):
        replica_settings(TrainingSettings(batch_tokens=8, accumulate_steps=4), 4)
    assert replica_settings(TrainingSettings(batch_size=6), 1).batch_size == 6
