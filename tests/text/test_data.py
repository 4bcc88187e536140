import logging
import random
import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.text.data import (
    DataError,
    ParallelCorpus,
    make_dataset,
    padding_fraction,
    read_parallel_files,
    read_tsv,
)
from keras_transformer.text.tokenizer import RESERVED_TOKENS, SubwordTokenizer

PAD, START, END = 0, 2, 3


@pytest.fixture(scope="module")
def letters(tmp_path_factory):
    """A tokenizer whose words "a".."z" are ids 4..29, so expected ids can be written down."""
    words = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    return SubwordTokenizer.from_tokens(
        [*RESERVED_TOKENS, *words], tmp_path_factory.mktemp("letters")
    )


def _ids(sentence):
    return [ord(word) - ord("a") + 4 for word in sentence.split()]


def _random_corpus(size, seed=0):
    """Pairs of random lengths 1-40 words, target about as long as source."""
    rng = random.Random(seed)
    sources, targets = [], []
    for _ in range(size):
        length = rng.randint(1, 40)
        sources.append(" ".join(rng.choice("abcdefgh") for _ in range(length)))
        targets.append(" ".join(rng.choice("abcdefgh") for _ in range(length + rng.randint(0, 2))))
    return ParallelCorpus(sources, targets)


def _write(path, data):
    path.write_bytes(data)
    return path


# Reading.

def test_parallel_files_are_read_stripped_with_crlf_and_bom(tmp_path):
    source = _write(tmp_path / "s.en", b"\xef\xbb\xbfA man .\r\n  Two dogs .  \r\n")
    target = _write(tmp_path / "t.de", b"Ein Mann .\nZwei Hunde .")  # no final newline
    corpus = read_parallel_files(source, target)
    assert corpus.sources == ["A man .", "Two dogs ."]
    assert corpus.targets == ["Ein Mann .", "Zwei Hunde ."]


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    source = _write(tmp_path / "s.en", b"a\nb\nc\n")
    target = _write(tmp_path / "t.de", b"a\nb\n")
    with pytest.raises(DataError) as error:
        read_parallel_files(source, target)
    message = str(error.value)
    assert f"{source} has 3 lines" in message and f"{target} has 2 lines" in message


@pytest.mark.parametrize("bad_side", ["source", "target"])
def test_invalid_utf8_names_file_and_line(tmp_path, bad_side):
    good = _write(tmp_path / "good.txt", b"eins\nzwei\ndrei\n")
    bad = _write(tmp_path / "bad.txt", b"one\ntwo\nthr\xe9e\n")  # Latin-1 "é"
    paths = (bad, good) if bad_side == "source" else (good, bad)
    with pytest.raises(DataError, match=rf"^{re.escape(str(bad))}:3: invalid UTF-8 at byte 4"):
        read_parallel_files(*paths)


def test_tsv_pairs_are_read(tmp_path):
    path = _write(tmp_path / "pairs.tsv", b"A man .\tEin Mann .\r\nTwo dogs .\tZwei Hunde .\n")
    corpus = read_tsv(path)
    assert corpus.sources == ["A man .", "Two dogs ."]
    assert corpus.targets == ["Ein Mann .", "Zwei Hunde ."]


@pytest.mark.parametrize("line, fields", [(b"no tab here", 1), (b"one\ttwo\tthree", 3)])
def test_malformed_tsv_line_names_file_and_line(tmp_path, line, fields):
    path = _write(tmp_path / "pairs.tsv", b"a\tb\nc\td\n" + line + b"\ne\tf\n")
    expected = rf"^{re.escape(str(path))}:3: expected 2 tab-separated fields.*found {fields}$"
    with pytest.raises(DataError, match=expected):
        read_tsv(path)


def test_invalid_utf8_in_tsv_names_file_and_line(tmp_path):
    path = _write(tmp_path / "pairs.tsv", b"a\tb\nc\t\xff\n")
    with pytest.raises(DataError, match=rf"^{re.escape(str(path))}:2: invalid UTF-8"):
        read_tsv(path)


def test_empty_and_over_long_pairs_are_skipped_and_counted(tmp_path, caplog):
    long = " ".join(["word"] * 6)
    path = _write(tmp_path / "pairs.tsv", "\n".join([
        "a\tb", "\t", "c\t ", "", long + "\tkurz", "kurz\t" + long, "d\te",
    ]).encode())
    with caplog.at_level(logging.INFO, logger="keras_transformer.text.data"):
        corpus = read_tsv(path, max_words=5)
    assert corpus.sources == ["a", "d"]
    assert corpus.targets == ["b", "e"]
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == f"{path}: 2 pairs read, skipped 3 empty and 2 over 5 words"


def test_no_usable_pair_is_an_error(tmp_path):
    path = _write(tmp_path / "pairs.tsv", b"\t\n \t \n")
    with pytest.raises(DataError, match="no usable sentence pairs"):
        read_tsv(path)


# The pipeline.

def test_decoder_input_is_start_plus_target_and_labels_are_target_plus_end(letters):
    corpus = ParallelCorpus(["a b c"], ["x y"])
    inputs, labels = next(iter(make_dataset(corpus, letters, letters, shuffle=False)))
    assert set(inputs) == {"source_tokens", "target_tokens"}
    np.testing.assert_array_equal(inputs["source_tokens"], [_ids("a b c")])
    np.testing.assert_array_equal(inputs["target_tokens"], [[START, *_ids("x y")]])
    np.testing.assert_array_equal(labels, [[*_ids("x y"), END]])
    for tensor in (inputs["source_tokens"], inputs["target_tokens"], labels):
        assert tensor.dtype == tf.int64


def test_long_pairs_are_trimmed_to_max_length(letters):
    corpus = ParallelCorpus(["a b c d e f"], ["u v w x y z"])
    inputs, labels = next(iter(make_dataset(corpus, letters, letters, max_length=4)))
    np.testing.assert_array_equal(inputs["source_tokens"], [_ids("a b c d")])
    np.testing.assert_array_equal(inputs["target_tokens"], [[START, *_ids("u v w")]])
    np.testing.assert_array_equal(labels, [[*_ids("u v w"), END]])


@pytest.mark.parametrize("options", [
    {}, {"bucket_width": None}, {"batch_tokens": 64}, {"pad_to_max_length": True},
])
def test_every_batch_shifts_targets_consistently(letters, options):
    corpus = _random_corpus(60)
    dataset = make_dataset(corpus, letters, letters, batch_size=8, max_length=16, **options)
    seen = 0
    for inputs, labels in dataset:
        decoder_inputs = inputs["target_tokens"].numpy()
        labels = labels.numpy()
        assert decoder_inputs.shape == labels.shape
        assert (decoder_inputs[:, 0] == START).all()
        assert START not in labels and END not in decoder_inputs
        # Labels are the decoder inputs moved one step left, END where the padding starts.
        real = labels != PAD
        np.testing.assert_array_equal(real, decoder_inputs != PAD)
        following = real[:, 1:]
        np.testing.assert_array_equal(labels[:, :-1][following], decoder_inputs[:, 1:][following])
        assert (labels[np.arange(len(labels)), real.sum(axis=1) - 1] == END).all()
        assert labels.shape[1] <= 16 and inputs["source_tokens"].shape[1] <= 16
        seen += len(labels)
    assert seen == len(corpus)


def test_bucketing_cuts_padding(letters):
    corpus = _random_corpus(240)
    options = {"batch_size": 16, "max_length": 48, "shuffle": True, "seed": 1}
    unbucketed = padding_fraction(make_dataset(corpus, letters, letters, bucket_width=None,
                                               **options))
    bucketed = padding_fraction(make_dataset(corpus, letters, letters, bucket_width=4, **options))
    assert unbucketed > 0.3
    assert bucketed < unbucketed / 3


def test_padding_fraction_counts_pad_positions(letters):
    corpus = ParallelCorpus(["a", "a b c"], ["x y z", "x"])
    dataset = make_dataset(corpus, letters, letters, batch_size=2, shuffle=False,
                           bucket_width=None)
    # source (2, 3): 2 pads of 6; target (2, 4): [START x y z], [START x PAD PAD] -> 2 of 8.
    assert padding_fraction(dataset) == pytest.approx(4 / 14)


def test_batch_tokens_bounds_the_padded_batch(letters):
    corpus = _random_corpus(200)
    dataset = make_dataset(corpus, letters, letters, batch_tokens=96, max_length=40)
    sizes = []
    for inputs, labels in dataset:
        for tokens in (inputs["source_tokens"], inputs["target_tokens"], labels):
            assert tokens.shape[0] * tokens.shape[1] <= 96
        sizes.append(labels.shape[0])
    assert max(sizes) > min(sizes)  # short sentences travel in bigger batches


def test_fixed_shapes_for_distribution(letters):
    corpus = _random_corpus(50)
    dataset = make_dataset(corpus, letters, letters, batch_size=8, max_length=12,
                           pad_to_max_length=True, drop_remainder=True)
    inputs_spec, labels_spec = dataset.element_spec
    assert inputs_spec["source_tokens"].shape == inputs_spec["target_tokens"].shape == (8, 12)
    assert labels_spec.shape == (8, 12)
    assert sum(1 for _ in dataset) == 50 // 8


def test_shuffle_is_seeded_and_keeps_every_pair(letters):
    corpus = _random_corpus(48)

    def order(seed):
        dataset = make_dataset(corpus, letters, letters, batch_size=16, seed=seed)
        return [tuple(row[row != PAD]) for _, labels in dataset for row in labels.numpy()]

    first = order(3)
    assert order(3) == first
    assert order(4) != first
    unshuffled = make_dataset(corpus, letters, letters, batch_size=16, shuffle=False)
    assert sorted(first) == sorted(
        tuple(row[row != PAD]) for _, labels in unshuffled for row in labels.numpy()
    )


@pytest.mark.parametrize("option", ["batch_size", "max_length", "batch_tokens",
                                    "bucket_width", "pool_size"])
def test_non_positive_sizes_are_rejected(letters, option):
    corpus = ParallelCorpus(["a"], ["b"])
    with pytest.raises(ValueError, match=option):
        make_dataset(corpus, letters, letters, **{option: 0})


# Token batches and dataset input.

def _pair_dataset(corpus):
    return tf.data.Dataset.from_tensor_slices((corpus.sources, corpus.targets))


def _rows(dataset):
    """The (source, labels) pairs of a pipeline, padding removed, in the order they came."""
    return [
        (tuple(source[source != PAD]), tuple(label[label != PAD]))
        for inputs, labels in dataset
        for source, label in zip(inputs["source_tokens"].numpy(), labels.numpy(), strict=True)
    ]


@pytest.mark.parametrize("as_dataset", [False, True])
def test_token_batches_fill_the_budget_without_exceeding_it(letters, as_dataset):
    corpus = _random_corpus(400)
    pairs = _pair_dataset(corpus) if as_dataset else corpus
    dataset = make_dataset(pairs, letters, letters, batch_tokens=256, max_length=48)
    fills = []
    for inputs, labels in dataset:
        for tokens in (inputs["source_tokens"], inputs["target_tokens"], labels):
            assert tokens.shape[0] * tokens.shape[1] <= 256
        fills.append(np.count_nonzero(labels) / 256)
    assert len(fills) > 20
    # Measured: 0.90 (real target tokens, [END] included, per budget position); only the
    # pool's last batch and the few longest pairs are far below.
    assert np.mean(fills) > 0.8


def test_dataset_input_gives_the_same_pairs_as_the_corpus(letters):
    corpus = _random_corpus(300)
    options = {"batch_tokens": 200, "max_length": 48}
    from_corpus = _rows(make_dataset(corpus, letters, letters, **options))
    from_dataset = _rows(make_dataset(_pair_dataset(corpus), letters, letters, **options))
    assert len(from_dataset) == len(corpus)
    assert sorted(from_dataset) == sorted(from_corpus)
    assert from_dataset != from_corpus  # the corpus was shuffled, the dataset was not
    # Unshuffled, both are the same pipeline.
    options["shuffle"] = False
    assert _rows(make_dataset(_pair_dataset(corpus), letters, letters, **options)) == _rows(
        make_dataset(corpus, letters, letters, **options))


def test_dataset_pairs_keep_their_order_and_only_batches_are_shuffled(letters):
    corpus = _random_corpus(64)
    incoming = _rows(make_dataset(corpus, letters, letters, batch_size=8, shuffle=False,
                                  bucket_width=None))
    dataset = make_dataset(_pair_dataset(corpus), letters, letters, batch_size=8,
                           bucket_width=None)
    assert _rows(dataset) == incoming
    bucketed = make_dataset(_pair_dataset(corpus), letters, letters, batch_size=8, seed=5)
    batches = [labels.shape for _, labels in bucketed]
    assert batches != sorted(batches, key=lambda shape: shape[1])  # not shortest first


def test_corpus_is_reshuffled_every_epoch(letters):
    corpus = _random_corpus(48)
    dataset = make_dataset(corpus, letters, letters, batch_size=16, bucket_width=None)
    first, second = _rows(dataset), _rows(dataset)
    assert first != second
    assert sorted(first) == sorted(second)


def test_small_pools_keep_every_pair(letters):
    corpus = _random_corpus(200)
    pooled = make_dataset(corpus, letters, letters, batch_tokens=128, max_length=48,
                          pool_size=50)
    assert sorted(_rows(pooled)) == sorted(_rows(make_dataset(corpus, letters, letters)))


def test_bucketed_padding_stays_low(letters):
    corpus = _random_corpus(240)
    dataset = make_dataset(corpus, letters, letters, batch_size=16, max_length=48, seed=1)
    # Measured 0.069 (0.46 unbucketed); what remains is mostly targets being longer or
    # shorter than their sources.
    assert padding_fraction(dataset) < 0.1


def test_drop_remainder_with_bucketing_keeps_full_batches(letters):
    corpus = _random_corpus(200)
    # Batches of pairs within 2 lengths of each other: some are cut short and dropped.
    dataset = make_dataset(corpus, letters, letters, batch_size=8, max_length=48,
                           bucket_width=2, drop_remainder=True)
    assert dataset.element_spec[1].shape[0] == 8
    sizes = [labels.shape[0] for _, labels in dataset]
    assert set(sizes) == {8}
    assert len(corpus) / 2 < 8 * len(sizes) < len(corpus)


def test_a_dataset_of_something_else_is_rejected(letters):
    numbers = tf.data.Dataset.from_tensor_slices(([1, 2], [3, 4]))
    with pytest.raises(TypeError, match="scalar tf.string pairs"):
        make_dataset(numbers, letters, letters)


def test_a_corpus_is_tokenized_once_for_all_epochs(letters):
    calls = tf.Variable(0)

    class CountingTokenizer:
        start_id, end_id = letters.start_id, letters.end_id

        def tokenize(self, strings):
            calls.assign_add(1)
            return letters.tokenize(strings)

    counting = CountingTokenizer()
    corpus = _random_corpus(100)
    dataset = make_dataset(corpus, counting, counting, batch_size=8)
    epochs = [sorted(_rows(dataset)) for _ in range(3)]
    assert epochs[0] == epochs[1] == epochs[2]
    assert int(calls.numpy()) == 2  # one chunk, source and target side, in the first epoch


def test_an_empty_corpus_is_rejected(letters):
    with pytest.raises(ValueError, match="no sentence pairs"):
        make_dataset(ParallelCorpus([], []), letters, letters)
