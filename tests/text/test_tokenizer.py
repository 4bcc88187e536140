import shutil
import unicodedata

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the ops a reloaded SavedModel needs)

from keras_transformer.text import tokenizer as tokenizer_module
from keras_transformer.text.tokenizer import (
    RESERVED_TOKENS,
    SubwordTokenizer,
    read_vocabulary,
    write_vocabulary,
)
from keras_transformer.text.vocabulary import build_vocabulary

WORDS = ["ein", "mann", "##s", "fährt", "fahrrad", "."]


def _ids(tokenizer, sentences):
    return tokenizer.tokenize(tf.constant(sentences)).to_list()


def _text(tokenizer, ids):
    padded = tf.ragged.constant(ids, dtype=tf.int64).to_tensor()
    return [s.decode("utf-8") for s in tokenizer.detokenize(padded).numpy()]


def test_reserved_tokens_have_ids_0_to_3(tokenizers):
    for tokenizer in tokenizers:
        assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id) == (
            0, 1, 2, 3)
        assert tuple(tokenizer.vocabulary[:4]) == RESERVED_TOKENS
        looked_up = tokenizer.lookup(tf.constant([0, 1, 2, 3], tf.int64)).numpy()
        assert [t.decode() for t in looked_up] == list(RESERVED_TOKENS)
        assert tokenizer.vocab_size == len(tokenizer.vocabulary)


def test_vocabulary_without_reserved_tokens_first_is_rejected(tmp_path):
    path = tmp_path / "vocab.txt"
    write_vocabulary(["[UNK]", "[PAD]", "[START]", "[END]", "a"], path)
    with pytest.raises(ValueError, match="vocab.txt"):
        read_vocabulary(path)


def test_tokenize_returns_ragged_ids_without_start_or_end(corpus, tokenizers):
    english, _ = tokenizers
    ids = english.tokenize(tf.constant(corpus.sources))
    assert isinstance(ids, tf.RaggedTensor)
    assert ids.dtype == tf.int64
    assert ids.shape[0] == len(corpus)
    flat = ids.flat_values.numpy()
    assert flat.min() >= len(RESERVED_TOKENS)  # no PAD/UNK/START/END: every character is known
    assert flat.max() < english.vocab_size


def test_round_trip_reproduces_the_sentences(corpus, tokenizers):
    english, german = tokenizers
    for tokenizer, sentences in ((english, corpus.sources), (german, corpus.targets)):
        assert _text(tokenizer, _ids(tokenizer, sentences)) == sentences


def test_detokenize_attaches_punctuation_to_the_word_before(tokenizers):
    _, german = tokenizers
    ids = _ids(german, ["Ein Mann fährt Fahrrad ."])  # tokens do not know the original spacing
    assert _text(german, ids) == ["Ein Mann fährt Fahrrad."]


def test_detokenize_drops_reserved_tokens_anywhere(tokenizers):
    _, german = tokenizers
    (ids,) = _ids(german, ["Zwei Hunde spielen im Schnee."])
    noisy = [2, *ids[:2], 1, *ids[2:], 3, 0, 0]
    assert _text(german, [noisy]) == _text(german, [ids]) == ["Zwei Hunde spielen im Schnee."]


def test_detokenize_joins_pieces_as_tensorflow_texts_bert_tokenizer_does(tokenizers, tmp_path):
    # Random ids, reserved ones and ids past the vocabulary among them; rows may start with a
    # "##" piece. The reference: tensorflow-text's own detokenize, words joined by spaces.
    _, german = tokenizers
    ids = np.random.default_rng(4).integers(0, german.vocab_size + 3, (64, 12))
    ids[:8, 0] = [index for index, token in enumerate(german.vocabulary)
                  if token.startswith("##")][:8]
    write_vocabulary(german.vocabulary, tmp_path / "vocab.txt")
    bert = tensorflow_text.BertTokenizer(str(tmp_path / "vocab.txt"))
    reference = tf.strings.reduce_join(
        bert.detokenize(tf.ragged.boolean_mask(ids, ids >= len(RESERVED_TOKENS))), axis=-1,
        separator=" ")
    ours = german.detokenize(tf.constant(ids, tf.int64))
    for pattern, rewrite in tokenizer_module._SPACING_RULES:
        reference = tf.strings.regex_replace(reference, pattern, rewrite)
    assert ours.numpy().tolist() == reference.numpy().tolist()
    assert b"[UNK]" in b" ".join(ours.numpy())
    # Without exporting (and sorting) the vocabulary's lookup table on every call.
    graph = german.detokenize.get_concrete_function().graph
    assert "LookupTableExportV2" not in {op.type for op in graph.get_operations()}


def test_cut_at_end_pads_everything_from_the_first_end(tokenizers):
    _, german = tokenizers
    ids = tf.constant([[7, 8, 3, 9, 3], [7, 3, 9, 9, 9], [7, 8, 9, 10, 11]], tf.int64)
    expected = [[7, 8, 0, 0, 0], [7, 0, 0, 0, 0], [7, 8, 9, 10, 11]]
    np.testing.assert_array_equal(german.cut_at_end(ids).numpy(), expected)


def test_unknown_words_become_unk(tokenizers):
    english, _ = tokenizers
    (ids,) = _ids(english, ["A man rides a 🦄."])
    assert english.unk_id in ids


def test_decomposed_umlauts_tokenize_like_composed_ones(tokenizers):
    _, german = tokenizers
    composed = "Ein Mann fährt Fahrrad."
    decomposed = unicodedata.normalize("NFD", composed)
    assert decomposed != composed
    assert _ids(german, [decomposed]) == _ids(german, [composed])


def test_lower_casing_keeps_umlauts(corpus, tmp_path):
    tokens = build_vocabulary(corpus.targets, vocab_size=400, lower_case=True, min_count=1)
    assert not any(t.lower() != t for t in tokens if t not in RESERVED_TOKENS)
    tokenizer = SubwordTokenizer.from_tokens(tokens, tmp_path, lower_case=True)
    round_trip = _text(tokenizer, _ids(tokenizer, corpus.targets))
    assert round_trip == [s.lower() for s in corpus.targets]
    assert "fährt" in round_trip[0]


def test_saved_and_loaded_tokenizer_gives_identical_ids(corpus, tokenizers, tmp_path):
    english, _ = tokenizers
    english.save(tmp_path / "copy")
    loaded = SubwordTokenizer.load(tmp_path / "copy")
    assert loaded.vocabulary == english.vocabulary
    assert loaded.lower_case == english.lower_case
    assert _ids(loaded, corpus.sources) == _ids(english, corpus.sources)


def test_saved_model_holding_the_tokenizer_reloads_with_its_vocabulary_asset(corpus, tmp_path):
    tokenizer = SubwordTokenizer.from_tokens(
        [*RESERVED_TOKENS, *WORDS], tmp_path / "vocab", lower_case=True
    )
    module = tf.Module()
    module.tokenizer = tokenizer
    tf.saved_model.save(module, str(tmp_path / "model"))
    shutil.rmtree(tmp_path / "vocab")  # the reloaded model must use its own copy

    reloaded = tf.saved_model.load(str(tmp_path / "model")).tokenizer
    sentences = tf.constant(["Ein Mann fährt Fahrrad.", "Eins Manns fährt ein Boot."])
    expected = tokenizer.tokenize(sentences)
    assert reloaded.tokenize(sentences).to_list() == expected.to_list()
    assert expected.to_list() == [[4, 5, 7, 8, 9], [4, 6, 5, 6, 7, 4, 1, 9]]
    np.testing.assert_array_equal(
        reloaded.detokenize(expected.to_tensor()).numpy(),
        tokenizer.detokenize(expected.to_tensor()).numpy(),
    )
    assert (tmp_path / "model" / "assets" / "vocab.txt").is_file()
