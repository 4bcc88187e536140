"""What a run trains and validates on: the corpora, the held-out split, the vocabularies and the
batches `fit` sees.

Training files are streamed (`text.corpus`): checked by a streaming pre-scan, sampled for the
vocabulary, read through a bounded shuffle buffer, never held whole in memory. Validation pairs
are few and held in memory (the BLEU evaluation translates them). The built-in demo data set is
small and stays in memory too. Under multi-worker training each worker reads and batches only its
own share of the training pairs (`worker_training_dataset`).
"""

from __future__ import annotations

import dataclasses
import random
import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

from keras_transformer.config import TransformerConfig
from keras_transformer.settings import TrainingSettings
from keras_transformer.text.corpus import (
    CorpusFiles,
    CorpusStats,
    pair_dataset,
    sample_corpus,
    scan_corpus,
)
from keras_transformer.text.data import DataError, ParallelCorpus, make_dataset, read_parallel_files
from keras_transformer.text.demo_data import demo_vocabularies, make_demo_corpus
from keras_transformer.text.tokenizer import SubwordTokenizer
from keras_transformer.text.tokenizer_pair import load_tokenizers, tokenizers_from_vocabularies
from keras_transformer.training.accumulation import group_batches

# Under XLA, batch lengths are padded to multiples of this (see `pad_to_multiple`).
SHAPE_MULTIPLE = 8
# The held-out split hashes each pair into this many buckets (see `split_held_out`).
_HASH_BUCKETS = 1_000_000
# Fewest pairs per length-sorted pool that token batches are cut from (see `batch_options`).
_POOL_SIZE = 16_384
# Pairs read per step while collecting the held-out validation pairs.
_COLLECT_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class RunData:
    """The pairs of a run.

    Attributes:
        train: the training pairs: in memory (the demo data) or files to stream.
        validation: the validation pairs.
        held_out: for streamed files without validation files, the share of pairs (chosen by
            `split_held_out`) that makes up `validation` and is left out of training; else None.
        scanned: for training files, what the pre-scan counted (held-out pairs included);
            else None.
    """

    train: ParallelCorpus | CorpusFiles
    validation: ParallelCorpus
    held_out: float | None = None
    scanned: CorpusStats | None = None


def training_files(settings: TrainingSettings) -> CorpusFiles | None:
    """The training corpus files the settings name, or None for the built-in demo data."""
    if settings.tsv_file is not None:
        return CorpusFiles(tsv=settings.tsv_file)
    if settings.source_file is not None:
        return CorpusFiles(source=settings.source_file, target=settings.target_file)
    return None


def load_corpora(settings: TrainingSettings) -> RunData:
    """Checks the training data and reads the validation pairs.

    Training files are checked by a streaming pre-scan (`scan_corpus`: broken data fails here,
    before any training, naming the file and line; the pair counts are logged). Without data
    files the data is the built-in demo data set (English -> German number words) with its own
    validation split. Without validation files, a seeded share `settings.validation_fraction` of
    the training pairs is held out (`split_held_out`).

    Raises:
        DataError: naming the file and line of unusable data, or when no pair is held out.
    """
    files = training_files(settings)
    scanned = None
    if files is None:
        train, validation = make_demo_corpus(seed=settings.seed)
    else:
        scanned = scan_corpus(files)
        train = files
    if settings.val_source_file is not None:
        validation = read_parallel_files(settings.val_source_file, settings.val_target_file)
        return RunData(train, validation, scanned=scanned)
    if files is None:
        return RunData(train, validation)
    fraction = settings.validation_fraction
    held = split_held_out(pair_dataset(files), fraction, settings.seed, held=True)
    sources, targets = [], []
    for source_batch, target_batch in held.batch(_COLLECT_BATCH).as_numpy_iterator():
        sources += [text.decode("utf-8") for text in source_batch]
        targets += [text.decode("utf-8") for text in target_batch]
    if not sources:
        raise DataError(
            f"{files.origin}: no pair was held out for validation (validation_fraction "
            f"{fraction}); give validation files or a larger validation_fraction"
        )
    return RunData(train, ParallelCorpus(sources, targets), held_out=fraction, scanned=scanned)


def split_held_out(
    pairs: tf.data.Dataset, fraction: float, seed: int, *, held: bool
) -> tf.data.Dataset:
    """One side of a seeded random split of a stream of pairs, decided pair by pair.

    A pair is held out when a keyed hash of its text falls in the lowest `fraction` of the hash
    range: the split needs no memory and no count of the corpus, is the same on every pass and
    every worker, and a pair repeated in the corpus always lands on the same side (so no
    validation sentence is also trained on).

    Args:
        pairs: `(source, target)` scalar `tf.string` pairs.
        fraction: the share of pairs held out, in (0, 1).
        seed: keys the hash (another seed, another split).
        held: keep the held-out pairs (validation) or the others (training).

    Returns:
        the pairs of that side, in their order.
    """
    threshold = round(fraction * _HASH_BUCKETS)

    def on_this_side(source: tf.Tensor, target: tf.Tensor) -> tf.Tensor:
        text = tf.strings.join([source, target], separator="\t")
        bucket = tf.strings.to_hash_bucket_strong(text, _HASH_BUCKETS, key=[seed, 0x5EED])
        return tf.equal(bucket < threshold, held)

    return pairs.filter(on_this_side)


def vocabulary_sample(data: RunData, settings: TrainingSettings) -> ParallelCorpus:
    """A seeded sample of at most `settings.vocab_sample_size` training pairs, spread over the
    whole corpus (streamed from files: memory holds only the sample)."""
    size = settings.vocab_sample_size
    if isinstance(data.train, CorpusFiles):
        return sample_corpus(data.train, size, seed=settings.seed)
    if len(data.train) <= size:
        return data.train
    picked = sorted(random.Random(settings.seed).sample(range(len(data.train)), size))
    return ParallelCorpus([data.train.sources[i] for i in picked],
                          [data.train.targets[i] for i in picked])


def make_tokenizers(
    settings: TrainingSettings, data: RunData, directory: Path
) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """The run's WordPiece tokenizers, saved in `directory`.

    With `settings.vocab_dir`, that vocabulary directory is copied (nothing is learned).
    Otherwise they are learned from `vocabulary_sample` with Hugging Face `tokenizers`' WordPiece
    trainer (`text.vocabulary`); for the built-in demo data, the demo task's rule-made
    vocabularies are used instead (they spell every number word from its parts).

    Raises:
        FileNotFoundError: `vocab_dir` is missing or lacks a tokenizer file.
        ValueError: `vocab_dir` does not match `shared_vocab` / `lower_case`.
    """
    if settings.vocab_dir is not None:
        return reuse_vocabulary(settings, Path(settings.vocab_dir), directory)
    if training_files(settings) is None:
        english, german = demo_vocabularies()
        if settings.shared_vocab:
            known = set(english)
            return tokenizers_from_vocabularies(
                directory, english + [token for token in german if token not in known], None
            )
        return tokenizers_from_vocabularies(directory, english, german)
    # Imported here: the learner (Hugging Face tokenizers) is needed only when learning.
    from keras_transformer.text.vocabulary import build_tokenizers

    return build_tokenizers(
        vocabulary_sample(data, settings),
        directory,
        vocab_size=settings.vocab_size,
        lower_case=settings.lower_case,
        shared=settings.shared_vocab,
    )


def reuse_vocabulary(
    settings: TrainingSettings, source: Path, directory: Path
) -> tuple[SubwordTokenizer, SubwordTokenizer]:
    """Copies an existing vocabulary directory (e.g. another run's `vocab/`) to `directory` and
    loads it, after checking that it fits the settings.

    Raises:
        FileNotFoundError: `source` is missing or lacks a tokenizer file.
        ValueError: `source` is shared but `shared_vocab` is false (or the reverse), or was
            built with another `lower_case`.
    """
    if not source.is_dir():
        raise FileNotFoundError(f"{source}: no such vocabulary directory")
    try:
        source_tokenizer, target_tokenizer = load_tokenizers(source)
    except FileNotFoundError as error:
        raise FileNotFoundError(f"{source}: missing tokenizer file {error.filename}") from error
    shared = source_tokenizer is target_tokenizer
    if shared != settings.shared_vocab:
        kind = "one shared vocabulary" if shared else "separate source and target vocabularies"
        raise ValueError(
            f"{source}: holds {kind}, but shared_vocab is {str(settings.shared_vocab).lower()}"
        )
    if source_tokenizer.lower_case != settings.lower_case:
        raise ValueError(
            f"{source}: was built with lower_case {str(source_tokenizer.lower_case).lower()}, "
            f"but lower_case is {str(settings.lower_case).lower()}"
        )
    if source.resolve() != directory.resolve():
        shutil.copytree(source, directory, dirs_exist_ok=True)
    return load_tokenizers(directory)


def pad_to_multiple(dataset: tf.data.Dataset, multiple: int) -> tf.data.Dataset:
    """Pads the token dimension of every batch up to a multiple of `multiple` (with id 0).

    With XLA every new input shape is a new compilation; bucketed batches come in every length,
    padded ones in `max_length / multiple` lengths per side, for a little more padding.

    Args:
        dataset: `({"source_tokens", "target_tokens"}, labels)` batches, `(batch, length)` each.
        multiple: the length quantum.

    Returns:
        the same batches, zero-padded on the right.
    """

    def pad(tokens):
        length = tf.shape(tokens)[1]
        return tf.pad(tokens, [[0, 0], [0, (-length) % multiple]])

    return dataset.map(
        lambda inputs, labels: ({name: pad(ids) for name, ids in inputs.items()}, pad(labels)),
        num_parallel_calls=tf.data.AUTOTUNE,
    )


def data_seed(seed: int, start_epoch: int) -> int:
    """The shuffle seed of a run that starts (or resumes) at epoch `start_epoch`.

    A resumed run must not replay the data order of the run's start: its position mixes into
    the seed (a fresh run keeps `seed` itself).
    """
    if start_epoch == 0:
        return seed
    return int(np.random.SeedSequence([seed, start_epoch]).generate_state(1)[0])


def batch_options(config: TransformerConfig, settings: TrainingSettings) -> dict:
    """`make_dataset` batching keywords: each (accumulated) batch gets
    `batch_tokens // accumulate_steps` target tokens, or `batch_size` pairs."""
    options = dict(batch_size=settings.batch_size, max_length=config.max_length)
    if settings.batch_tokens is not None:
        options["batch_tokens"] = settings.batch_tokens // settings.accumulate_steps
        # Batches are cut from length-sorted pools: a pool of many batches fills each one.
        options["pool_size"] = max(_POOL_SIZE, 2 * options["batch_tokens"])
    return options


def replica_settings(settings: TrainingSettings, replicas: int) -> TrainingSettings:
    """The settings of one replica's share of every step, for input pipelines that batch each
    replica's pairs on their own (`worker_training_dataset`): `batch_tokens` (or, without it,
    `batch_size`) divided by `replicas`, as `tf.distribute.InputContext.get_per_replica_batch_size`
    divides a global batch, so that the replicas' batches together make the step's batch.

    Raises:
        ValueError: `batch_size` is not a multiple of `replicas`, or `batch_tokens` would leave
            a replica's accumulated batch without a token.
    """
    if settings.batch_tokens is not None:
        if settings.batch_tokens // replicas < settings.accumulate_steps:
            raise ValueError(
                f"batch_tokens ({settings.batch_tokens}) must be at least {replicas} replicas "
                f"x accumulate_steps ({settings.accumulate_steps}): each replica's batches get "
                "batch_tokens // replicas // accumulate_steps target tokens"
            )
        return settings.replace(batch_tokens=settings.batch_tokens // replicas)
    if settings.batch_size % replicas:
        raise ValueError(
            f"batch_size ({settings.batch_size}) must be a multiple of the {replicas} replicas "
            "in sync: each replica reads its own pairs, batch_size / replicas per step"
        )
    return settings.replace(batch_size=settings.batch_size // replicas)


def training_dataset(
    pairs: ParallelCorpus | tf.data.Dataset,
    source_tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer,
    config: TransformerConfig,
    settings: TrainingSettings,
    *,
    start_epoch: int = 0,
    replicas: int = 1,
) -> tf.data.Dataset:
    """The batches `fit` trains on: shuffled and bucketed by `make_dataset` (global batches,
    which `fit` splits over replicas), repeated for step-based runs and fixed-length epochs,
    padded to `SHAPE_MULTIPLE` under XLA, grouped for gradient accumulation.

    Args:
        pairs: training pairs: in memory, or a stream of `(source, target)` strings
            (`training_pairs`).
        source_tokenizer: source tokenizer.
        target_tokenizer: target tokenizer.
        config: the model's config (`max_length`).
        settings: batching, accumulation, seed, XLA.
        start_epoch: the epoch a resumed run starts at (reseeds the shuffle, see `data_seed`).
        replicas: replicas in sync that split each batch (groups get a multiple of this many
            rows).
    """
    dataset = make_dataset(
        pairs, source_tokenizer, target_tokenizer,
        seed=data_seed(settings.seed, start_epoch), **batch_options(config, settings),
    )
    if settings.steps is not None or settings.steps_per_epoch is not None:
        dataset = dataset.repeat()
    if settings.jit_compile:
        dataset = pad_to_multiple(dataset, SHAPE_MULTIPLE)
    if settings.accumulate_steps > 1:
        dataset = group_batches(dataset, settings.accumulate_steps, row_multiple=replicas)
    return dataset


def training_pairs(
    data: RunData,
    settings: TrainingSettings,
    *,
    start_epoch: int = 0,
    context: tf.distribute.InputContext | None = None,
) -> ParallelCorpus | tf.data.Dataset:
    """The training pairs `training_dataset` batches: the in-memory corpus, or the files
    streamed through a `settings.shuffle_buffer`-pair shuffle buffer (without the held-out
    validation pairs); with `context`, only that input pipeline's share.

    Args:
        data: the run's pairs (`load_corpora`).
        settings: shuffle buffer and seed.
        start_epoch: the epoch a resumed run starts at (reseeds the shuffle, see `data_seed`).
        context: one of `context.num_input_pipelines` pipelines (one per worker): it gets every
            `num_input_pipelines`-th in-memory pair, or the files `pair_dataset` gives its
            shard (whose other files it never opens). The held-out split is decided pair by
            pair, the same on every worker.
    """
    shards, index = (1, 0) if context is None else (
        context.num_input_pipelines, context.input_pipeline_id
    )
    if not isinstance(data.train, CorpusFiles):
        if shards == 1:
            return data.train
        return ParallelCorpus(data.train.sources[index::shards], data.train.targets[index::shards])
    pairs = pair_dataset(
        data.train, shuffle_buffer=settings.shuffle_buffer,
        seed=data_seed(settings.seed, start_epoch), num_shards=shards, shard_index=index,
    )
    if data.held_out is not None:
        pairs = split_held_out(pairs, data.held_out, settings.seed, held=False)
    return pairs


def worker_training_dataset(
    data: RunData,
    source_tokenizer: SubwordTokenizer,
    target_tokenizer: SubwordTokenizer,
    config: TransformerConfig,
    settings: TrainingSettings,
    context: tf.distribute.InputContext,
    *,
    start_epoch: int = 0,
) -> tf.data.Dataset:
    """One worker's input pipeline, for `strategy.distribute_datasets_from_function`: its own
    share of the pairs (`training_pairs`) in per-replica batches (`replica_settings`), so that
    the batches of all replicas of all workers together make one step's batch as the settings
    size it. `TokenWeightedSteps` weighs every real target token of that union the same.

    Args:
        data: the run's pairs (`load_corpora`).
        source_tokenizer: source tokenizer.
        target_tokenizer: target tokenizer.
        config: the model's config (`max_length`).
        settings: the run's settings (global batch sizes).
        context: this worker's input pipeline and the number of replicas in sync.
        start_epoch: the epoch a resumed run starts at (see `data_seed`).

    Returns:
        elements as `training_dataset` yields them, each one replica's batch (or group).
    """
    pairs = training_pairs(data, settings, start_epoch=start_epoch, context=context)
    return training_dataset(
        pairs, source_tokenizer, target_tokenizer, config,
        replica_settings(settings, context.num_replicas_in_sync), start_epoch=start_epoch,
    )
