import itertools
import re
import shutil
import unicodedata
from collections import Counter
from pathlib import Path

import pytest
import tensorflow as tf

from keras_transformer.text import vocabulary
from keras_transformer.text.data import ParallelCorpus, make_dataset
from keras_transformer.text.tokenizer import RESERVED_TOKENS, SubwordTokenizer
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
        r"building vocabulary \(de\): ([\d,]+) sentences \.\.\. done in \d+\.\d s, ([\d,]+) tokens",
        line,
    )
    assert match, line
    assert int(match[1].replace(",", "")) == len(corpus)
    assert int(match[2].replace(",", "")) == len(tokens)


def test_vocab_size_is_a_hard_cap_that_keeps_every_character(corpus, tmp_path):
    uncapped = build_vocabulary(corpus.sources, vocab_size=10_000, min_count=1)
    required = [t for t in uncapped if t in RESERVED_TOKENS or len(t.removeprefix("##")) == 1]
    # With min_count=1 the trainer merges until every word is one token, so the cap lies strictly
    # between the characters alone and everything it can learn.
    cap = (len(required) + len(uncapped)) // 2
    assert len(required) < cap < len(uncapped)
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


def _words(sentence):
    """BERT's word split for the fixture corpus (letters, digits and punctuation only)."""
    return re.findall(r"\w+|[^\w\s]", sentence)


def test_every_character_is_kept_as_word_start_and_as_continuation(corpus):
    tokens = build_vocabulary(corpus.targets, vocab_size=400, min_count=1)
    for char in _characters(corpus.targets):
        assert char in tokens and f"##{char}" in tokens, char
    # Reserved tokens, then the characters, then their continuations, then learned sub-words.
    characters = sorted(_characters(corpus.targets))
    assert tokens[4 : 4 + 2 * len(characters)] == characters + [f"##{c}" for c in characters]


def test_learned_sub_words_are_seen_at_least_min_count_times(corpus):
    sentences = corpus.sources + corpus.targets
    words = Counter(word for sentence in sentences for word in _words(sentence))
    tokens = build_vocabulary(sentences, vocab_size=2000, min_count=3)
    learned = [t for t in tokens if t not in RESERVED_TOKENS and len(t.removeprefix("##")) > 1]
    assert learned, "the corpus has pairs seen 3 times; some must be merged"
    for piece in learned:
        if piece.startswith("##"):
            # A continuation stands anywhere but at a word's start.
            seen = sum(n * word[1:].count(piece[2:]) for word, n in words.items())
        else:
            seen = sum(n for word, n in words.items() if word.startswith(piece))
        assert seen >= 3, piece
    never = build_vocabulary(sentences, vocab_size=2000, min_count=len(sentences) * 100)
    assert never == [t for t in tokens if t not in learned]


def test_min_count_below_one_is_an_error(corpus):
    with pytest.raises(ValueError, match="min_count"):
        build_vocabulary(corpus.sources, min_count=0)


def test_no_sentences_is_an_error():
    with pytest.raises(ValueError, match=r"\(de\) from no sentences"):
        build_vocabulary(iter([]), name="de")


def test_same_sentences_give_the_same_vocabulary(corpus):
    # Left alone, the trainer breaks ties between equally frequent merges in hash-map order,
    # which changes from run to run; many pairs here are seen exactly once.
    sentences = corpus.sources + corpus.targets
    first = build_vocabulary(sentences, vocab_size=500, min_count=1)
    for _ in range(3):
        assert build_vocabulary(sentences, vocab_size=500, min_count=1) == first


def test_lower_casing_keeps_umlauts_and_eszett():
    sentences = ["Über den Öfen hängt ein Äpfelkorb.", "ÜBER DIE STRASSE, die groß ist."]
    tokens = build_vocabulary(sentences, vocab_size=400, lower_case=True, min_count=1)
    learned = [t for t in tokens if t not in RESERVED_TOKENS]
    assert all(t == t.lower() for t in learned)
    for char in "äöüß":
        assert char in learned and f"##{char}" in learned
    # "Über" and "ÜBER" are one word, learned whole (not stripped to "uber").
    assert "über" in learned and not any("uber" in t for t in learned)


def test_generator_input_streams_and_shows_progress(corpus, capsys, monkeypatch):
    monkeypatch.setattr(vocabulary, "_SPLIT_BATCH", 3)
    monkeypatch.setattr(vocabulary, "_PROGRESS_EVERY", 4)
    tokens = build_vocabulary((s for s in corpus.targets), vocab_size=400, min_count=1, name="de")
    assert tokens == build_vocabulary(corpus.targets, vocab_size=400, min_count=1)
    first, _ = capsys.readouterr().err.split("\n", 1)
    # Batches of 3 sentences; the count is rewritten in place every 4 or more sentences.
    *updates, last = first.split("\r")
    assert updates == [f"building vocabulary (de): {n} sentences ..." for n in (6, 12)]
    assert re.fullmatch(
        rf"building vocabulary \(de\): {len(corpus)} sentences \.\.\. done in \d+\.\d s, "
        rf"{len(tokens)} tokens",
        last,
    ), last


def test_learner_cuts_words_where_the_tensorflow_text_tokenizer_does(tmp_path):
    """Where BERT definitions differ (Unicode spaces, format characters), the learner follows
    the tokenizer that serves the model, so no word of its training text becomes [UNK]."""
    sentences = [
        "Der Bundes\u00adtag tagt.",  # soft hyphen (format character): a word break
        "Ein Trikot mit der Nummer\u00a028.",  # no-break space: inside a word for tf-text
        "Ein\u200bWort und 東京タワー.",  # zero-width space breaks; CJK ideographs stand alone
        "Tab\tgetrennt.",
    ]
    tokens = build_vocabulary(sentences, vocab_size=300, min_count=1)
    assert "\u00a0" in tokens and "##\u00a0" in tokens
    assert not any("\u00ad" in t or "\u200b" in t for t in tokens)
    assert "東京" not in tokens and "##京" in tokens  # the "##" form is kept for every character
    tokenizer = SubwordTokenizer.from_tokens(tokens, tmp_path)
    ids = tokenizer.tokenize(tf.constant(sentences)).flat_values.numpy()
    assert tokenizer.unk_id not in ids


def test_words_the_tokenizer_cannot_look_up_are_not_learned(tmp_path):
    # BertTokenizer reads a word of more than 100 UTF-8 bytes as [UNK], whatever the vocabulary.
    fits, too_long = "Wort " + "ä" * 50, "Wort " + "ä" * 50 + "b"  # 100 and 101 bytes
    tokens = build_vocabulary([fits], vocab_size=100, min_count=1)
    assert "ä" in tokens and "##ä" in tokens
    assert not {"ä", "b"} & set(build_vocabulary([too_long], vocab_size=100, min_count=1))
    tokenizer = SubwordTokenizer.from_tokens([*tokens, "##b"], tmp_path)
    (fitting,), (long,) = (tokenizer.tokenize(tf.constant([s])).to_list() for s in (fits, too_long))
    assert tokenizer.unk_id not in fitting
    assert long[-1] == tokenizer.unk_id


def _read_lines(path, start=0, stop=None):
    with open(path, encoding="utf-8") as file:
        return [line.strip() for line in itertools.islice(file, start, stop)]


def _hugging_face_encoder(tokens, lower_case):
    """`tokenizers`' own BERT-style WordPiece encoder over a vocabulary (ids are indices)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    encoder = Tokenizer(models.WordPiece(
        {token: i for i, token in enumerate(tokens)}, unk_token="[UNK]",
        max_input_chars_per_word=100,
    ))
    encoder.normalizer = normalizers.Sequence([
        normalizers.NFC(),
        *([normalizers.Lowercase()] if lower_case else []),
        # CJK ideographs become words of their own; accents and control characters are kept.
        normalizers.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                   strip_accents=False, lowercase=False),
    ])
    encoder.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    return encoder


def _unpadded(batches, key):
    return [[int(i) for i in row if i != 0] for batch in batches for row in key(batch).numpy()]


@pytest.mark.slow
@pytest.mark.skipif(not MULTI30K.is_dir(), reason="needs ../shared/data/multi30k beside the repo")
@pytest.mark.parametrize("shared, lower_case", [(True, True), (False, False)])
def test_training_pipeline_export_and_hugging_face_agree_on_held_out_ids(
    shared, lower_case, tmp_path
):
    train = ParallelCorpus(_read_lines(MULTI30K / "train.de", 0, 3000),
                           _read_lines(MULTI30K / "train.en", 0, 3000))
    held_out = ParallelCorpus(_read_lines(MULTI30K / "val.de"), _read_lines(MULTI30K / "val.en"))
    german, english = build_tokenizers(
        train, tmp_path / "vocab", vocab_size=4000, lower_case=lower_case, shared=shared
    )

    # (a) Training: the tokenizers themselves and the ids the tf.data pipeline feeds model.fit.
    expected_de = german.tokenize(tf.constant(held_out.sources)).to_list()
    expected_en = english.tokenize(tf.constant(held_out.targets)).to_list()
    batches = list(make_dataset(held_out, german, english, batch_size=256, max_length=256,
                                bucket_width=None, shuffle=False))
    assert _unpadded(batches, lambda b: b[0]["source_tokens"]) == expected_de
    assert _unpadded(batches, lambda b: b[1]) == [ids + [english.end_id] for ids in expected_en]

    # (b) Export: a SavedModel holding the tokenizers, reloaded without the original files.
    module = tf.Module()
    module.source_tokenizer, module.target_tokenizer = german, english
    tf.saved_model.save(module, str(tmp_path / "export"))
    shutil.rmtree(tmp_path / "vocab")
    reloaded = tf.saved_model.load(str(tmp_path / "export"))
    assert reloaded.source_tokenizer.tokenize(tf.constant(held_out.sources)).to_list() == (
        expected_de)
    assert reloaded.target_tokenizer.tokenize(tf.constant(held_out.targets)).to_list() == (
        expected_en)

    # (c) Hugging Face's WordPiece encoder, the learner's own library, with the same vocabulary.
    # BERT's definitions agree except on whitespace: tf-text splits on ASCII whitespace only
    # (RE2's \s), `tokenizers` on all Unicode spaces. Multi30k's validation set has one such
    # sentence ("120\u00a0cm", which tf-text reads as one word, here unseen: [UNK]).
    mismatched = []
    for tokenizer, sentences, expected in ((german, held_out.sources, expected_de),
                                           (english, held_out.targets, expected_en)):
        encoder = _hugging_face_encoder(tokenizer.vocabulary, lower_case)
        encoded = [e.ids for e in encoder.encode_batch(sentences, add_special_tokens=False)]
        mismatched += [s for s, ids, hf in zip(sentences, expected, encoded, strict=True)
                       if ids != hf]
    assert all(re.search(r"[^\S\t\n\f\r ]", sentence) for sentence in mismatched), mismatched
    assert len(mismatched) <= 1


def test_docstring_examples_run(run_doctests):
    run_doctests("keras_transformer.text.vocabulary")
