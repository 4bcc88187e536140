import collections
import re

import pytest
import tensorflow as tf

from keras_transformer.text.data import read_parallel_files
from keras_transformer.text.demo_data import (
    demo_vocabularies,
    english_number,
    german_number,
    make_demo_corpus,
    write_demo_files,
)
from keras_transformer.text.tokenizer import RESERVED_TOKENS
from keras_transformer.text.tokenizer_pair import tokenizers_from_vocabularies

# Spelled out by hand from the rules: "und" joins units before tens, "eins" becomes "ein" inside
# a compound, 16 and 17 drop letters ("sechzehn", "siebzehn"), 30 is "dreißig".
SPELLINGS = {
    0: ("zero", "null"),
    1: ("one", "eins"),
    7: ("seven", "sieben"),
    11: ("eleven", "elf"),
    12: ("twelve", "zwölf"),
    16: ("sixteen", "sechzehn"),
    17: ("seventeen", "siebzehn"),
    21: ("twenty-one", "einundzwanzig"),
    30: ("thirty", "dreißig"),
    66: ("sixty-six", "sechsundsechzig"),
    71: ("seventy-one", "einundsiebzig"),
    100: ("one hundred", "einhundert"),
    101: ("one hundred one", "einhunderteins"),
    342: ("three hundred forty-two", "dreihundertzweiundvierzig"),
    999: ("nine hundred ninety-nine", "neunhundertneunundneunzig"),
    1001: ("one thousand one", "eintausendeins"),
    1100: ("one thousand one hundred", "eintausendeinhundert"),
    2024: ("two thousand twenty-four", "zweitausendvierundzwanzig"),
    21_000: ("twenty-one thousand", "einundzwanzigtausend"),
    101_101: ("one hundred one thousand one hundred one", "einhunderteintausendeinhunderteins"),
}


@pytest.mark.parametrize("n", sorted(SPELLINGS))
def test_numbers_are_spelled_by_the_rules(n):
    assert (english_number(n), german_number(n)) == SPELLINGS[n]


@pytest.mark.parametrize("n", [-1, 1_000_000])
def test_numbers_out_of_range_are_rejected(n):
    with pytest.raises(ValueError, match="numbers must be in"):
        german_number(n)
    with pytest.raises(ValueError, match="numbers must be in"):
        english_number(n)


def _numbers(sentence):
    """The number words of a demo sentence (templates hold one each)."""
    return re.sub(r"^(The number is|I count to|I have|She sees|There are|We need|The house costs|"
                  r"The book has|They counted) | (apples|cats|books on the table|chairs|euros|"
                  r"pages|birds)\.$|\.$", "", sentence)


def test_demo_corpus_is_seeded_and_split_by_number():
    options = dict(max_number=999, sentences_per_basic_number=2, validation_fraction=0.2)
    train, validation = make_demo_corpus(**options, seed=5)
    again, _ = make_demo_corpus(**options, seed=5)
    other, _ = make_demo_corpus(**options, seed=6)
    assert train == again and train != other
    assert (len(train), len(validation)) == (800 * 2, 200 * 2)
    train_numbers = {_numbers(s) for s in train.sources}
    validation_numbers = {_numbers(s) for s in validation.sources}
    assert not train_numbers & validation_numbers
    assert train_numbers | validation_numbers == {english_number(n) for n in range(1000)}


def test_basic_numbers_get_more_sentences():
    train, validation = make_demo_corpus(sentences_per_number=2, sentences_per_basic_number=8)
    counts = collections.Counter(_numbers(s) for s in train.sources + validation.sources)
    for n in (12, 300, 7000, 7600):
        assert counts[english_number(n)] == 8
    assert counts[english_number(3427)] == 2


def test_demo_pairs_translate_the_same_number():
    english_to_german = {english_number(n): german_number(n) for n in range(10_000)}
    train, _ = make_demo_corpus()
    for source, target in zip(train.sources, train.targets, strict=True):
        assert english_to_german[_numbers(source)] in re.findall(r"\w+", target)
        if source.endswith(("apples.", "cats.", "table.", "chairs.", "euros.", "pages.", "birds.")):
            # Before a noun German would inflect a final "ein"; those numbers skip noun templates.
            assert not _numbers(source).endswith(" one") and _numbers(source) != "one"


def test_demo_files_are_line_aligned_and_read_back(tmp_path):
    paths = write_demo_files(tmp_path / "demo", seed=2)
    assert sorted(paths) == ["train.de", "train.en", "val.de", "val.en"]
    train, validation = make_demo_corpus(seed=2)
    assert read_parallel_files(paths["train.en"], paths["train.de"]) == train
    assert read_parallel_files(paths["val.en"], paths["val.de"]) == validation


def test_demo_vocabularies_split_german_numbers_into_morphemes(tmp_path):
    english_tokens, german_tokens = demo_vocabularies()
    assert tuple(german_tokens[:4]) == tuple(english_tokens[:4]) == RESERVED_TOKENS
    english, german = tokenizers_from_vocabularies(tmp_path, english_tokens, german_tokens)
    ids = german.tokenize(tf.constant(["dreihundertzweiundvierzig", "einhunderteinundzwanzig"]))
    pieces = [[p.decode() for p in german.lookup(row).numpy()] for row in ids]
    assert pieces == [
        ["drei", "##hundert", "##zwei", "##und", "##vierzig"],
        ["ein", "##hundert", "##ein", "##und", "##zwanzig"],
    ]
    every_number = german.tokenize(tf.constant([german_number(n) for n in range(10_000)]))
    letters = [p for p in german.lookup(every_number.flat_values).numpy()
               if len(p.decode().removeprefix("##")) == 1]
    assert not letters  # no number is ever spelled letter by letter


def test_demo_sentences_round_trip_through_their_vocabularies(tmp_path):
    _, validation = make_demo_corpus()  # 2,000 pairs: every template, 1,000 numbers
    english, german = tokenizers_from_vocabularies(tmp_path, *demo_vocabularies())
    for tokenizer, sentences in ((english, validation.sources), (german, validation.targets)):
        ids = tokenizer.tokenize(tf.constant(sentences))
        assert tokenizer.unk_id not in ids.flat_values.numpy()
        back = tokenizer.detokenize(ids.to_tensor()).numpy()
        assert [s.decode("utf-8") for s in back] == sentences
