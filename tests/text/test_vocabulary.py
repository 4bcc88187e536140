import re
import unicodedata
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.text.data import ParallelCorpus
from keras_transformer.text.tokenizer import RESERVED_TOKENS
from keras_transformer.text.tokenizer_pair import load_tokenizers, tokenizers_from_vocabularies
from keras_transformer.text.vocabulary import build_tokenizers, build_vocabulary

MULTI30K = Path(__file__).resolve().parents[3] / "shared" / "data" / "multi30k"


def _characters(sentences):
    return {char for sentence in sentences for char in sentence if not char.isspace()}


def test_vocabulary_starts_with_reserved_tokens_and_covers_every_character(corpus):
    tokens = build_vocabulary(corpus.sources, vocab_size=400, min_count=1)
    assert tuple(tokens[:4]) == RESERVED_TOKENS
    assert _characters(corpus.sources) <= set(tokens)
    assert len(tokens) == len(set(tokens))


def test_progress_line_names_language_sentences_time_and_size(corpus, capsys):
    tokens = build_vocabulary(corpus.targets, vocab_size=400, min_count=1, name="de")
    line = capsys.readouterr().err.strip()
    match = re.fullmatch(
        r"building vocabulary \(de\): (\d+) sentences \.\.\. done in \d+\.\d s, ([\d,]+) tokens",
        line,
    )
    assert match, line
    assert int(match[1]) == len(corpus)
    assert int(match[2].replace(",", "")) == len(tokens)


def test_vocab_size_is_a_hard_cap_that_keeps_every_character(corpus, tmp_path):
    uncapped = build_vocabulary(corpus.sources, vocab_size=10_000, min_count=1)
    required = [t for t in uncapped if t in RESERVED_TOKENS or len(t.removeprefix("##")) == 1]
    # Here tensorflow-text's builder alone returns all len(uncapped) tokens: its threshold search
    # stops at min_count without reaching the target size.
    cap = (len(required) + len(uncapped)) // 2
    capped = build_vocabulary(corpus.sources, vocab_size=cap, min_count=1)
    assert len(capped) == cap
    assert set(required) <= set(capped)
    source, _ = tokenizers_from_vocabularies(tmp_path, capped, capped)
    ids = source.tokenize(tf.constant(corpus.sources)).flat_values.numpy()
    assert source.unk_id not in ids


def test_vocab_size_below_the_alphabet_is_an_error(corpus):
    with pytest.raises(ValueError, match="single-character"):
        build_vocabulary(corpus.sources, vocab_size=20, min_count=1)


def test_separate_tokenizers_reload_with_identical_ids(corpus, tokenizers, tokenizer_directory):
    english, german = tokenizers
    assert english.vocabulary != german.vocabulary
    assert sorted(p.name for p in tokenizer_directory.iterdir()) == ["source", "target"]
    loaded_english, loaded_german = load_tokenizers(tokenizer_directory)
    for original, loaded, sentences in (
        (english, loaded_english, corpus.sources),
        (german, loaded_german, corpus.targets),
    ):
        expected = original.tokenize(tf.constant(sentences)).to_list()
        assert loaded.tokenize(tf.constant(sentences)).to_list() == expected


def test_shared_vocabulary_covers_both_languages(corpus, tmp_path):
    source, target = build_tokenizers(corpus, tmp_path, vocab_size=600, min_count=1, shared=True)
    assert source is target
    assert _characters(corpus.sources + corpus.targets) <= set(source.vocabulary)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shared"]
    loaded_source, loaded_target = load_tokenizers(tmp_path)
    assert loaded_source is loaded_target
    assert loaded_source.vocabulary == source.vocabulary


def test_directory_with_both_layouts_is_ambiguous(tmp_path):
    tokens = [*RESERVED_TOKENS, "a", "##a"]
    tokenizers_from_vocabularies(tmp_path, tokens, tokens)
    tokenizers_from_vocabularies(tmp_path, tokens, None)
    with pytest.raises(ValueError, match="both"):
        load_tokenizers(tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs ../shared/data/multi30k beside the repo")
def test_multi30k_sentences_come_back_from_tokens(tmp_path):
    """The sentences a vocabulary was learned from come back character for character (>= 99%)."""
    lines = {}
    for language in ("en", "de"):
        with open(MULTI30K / f"train.{language}", encoding="utf-8") as file:
            lines[language] = [" ".join(next(file).split()) for _ in range(500)]
    source, target = build_tokenizers(
        ParallelCorpus(lines["en"], lines["de"]), tmp_path, vocab_size=4000
    )
    for tokenizer, sentences in ((source, lines["en"]), (target, lines["de"])):
        ids = tokenizer.tokenize(tf.constant(sentences)).to_tensor()
        back = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
        same = sum(b == unicodedata.normalize("NFC", s) for b, s in zip(back, sentences,
                                                                         strict=True))
        assert same / len(sentences) >= 0.99
