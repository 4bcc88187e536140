"""The `Translator` module: strings in, translations out, with the tokenizers in the graph."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference import SequenceDecoder, Translator


@pytest.fixture(scope="module")
def translator(reverse_model, word_tokenizer):
    return Translator(reverse_model, word_tokenizer, word_tokenizer, beam_width=3, alpha=0.6)


SENTENCES = ["one two three", "eleven", "four four five six seven eight"]


def test_translates_strings_with_scores_and_tokens(translator, reverse_model, word_tokenizer):
    outputs = translator.translate(tf.constant(SENTENCES))
    assert [t.decode() for t in outputs["translation"].numpy()] == [
        " ".join(reversed(sentence.split())) for sentence in SENTENCES
    ]
    source = word_tokenizer.tokenize(tf.constant(SENTENCES)).to_tensor()
    decoder = SequenceDecoder(reverse_model, word_tokenizer.start_id, word_tokenizer.end_id)
    tokens, scores = decoder.beam_search(source, beam_width=3, alpha=0.6)
    longest = max(len(sentence.split()) for sentence in SENTENCES)
    np.testing.assert_array_equal(outputs["tokens"].numpy(), tokens.numpy()[:, :longest])
    np.testing.assert_allclose(outputs["score"].numpy(), scores.numpy(), rtol=1e-5)
    assert outputs["tokens"].dtype == tf.int64 and outputs["score"].dtype == tf.float32


def test_pre_tokenized_input_gives_the_same_outputs(translator, word_tokenizer):
    source = word_tokenizer.tokenize(tf.constant(SENTENCES)).to_tensor()
    from_tokens = translator.translate_tokens(source)
    from_text = translator.translate(tf.constant(SENTENCES))
    for name in ("translation", "tokens"):
        np.testing.assert_array_equal(from_tokens[name].numpy(), from_text[name].numpy())
    np.testing.assert_allclose(from_tokens["score"].numpy(), from_text["score"].numpy(), rtol=1e-5)


def test_greedy_translator(reverse_model, word_tokenizer):
    greedy = Translator(reverse_model, word_tokenizer, word_tokenizer, beam_width=1, alpha=0.0)
    outputs = greedy.translate(tf.constant(["two nine"]))
    assert outputs["translation"].numpy().tolist() == [b"nine two"]
    # alpha = 0: the score is the plain log-probability, at most 0.
    assert -1.0 < outputs["score"].numpy()[0] < 0.0


def test_options_signature_chooses_beam_and_alpha_per_request(
    translator, reverse_model, word_tokenizer
):
    text = tf.constant(SENTENCES)
    greedy = Translator(reverse_model, word_tokenizer, word_tokenizer, beam_width=1, alpha=0.3)
    for reference, beam_width, alpha in ((greedy, 1, 0.3), (translator, 3, 0.6)):
        expected = reference.translate(text)
        outputs = translator.translate_with_options(text, beam_width, alpha)
        np.testing.assert_array_equal(outputs["tokens"].numpy(), expected["tokens"].numpy())
        np.testing.assert_allclose(outputs["score"].numpy(), expected["score"].numpy(), rtol=1e-5)
    for beam_width in (0, 17):
        with pytest.raises(tf.errors.InvalidArgumentError, match="beam_width"):
            translator.translate_with_options(text, beam_width, 0.6)


def test_empty_batch_and_empty_and_overlong_sentences(translator):
    empty = translator.translate(tf.constant([], tf.string))
    assert empty["translation"].shape == (0,) and empty["tokens"].shape[0] == 0
    long_sentence = " ".join(["one"] * 40)  # longer than the model's 24 positions: trimmed
    outputs = translator.translate(tf.constant(["", long_sentence]))
    assert outputs["translation"].shape == (2,)
    assert np.isfinite(outputs["score"].numpy()).all()


def test_attention_signature(translator):
    outputs = translator.attention(tf.constant(["one two three", "five"]))
    weights = outputs["attention"].numpy()
    assert weights.dtype == np.float32
    assert weights.shape == (2, 1, 4, 4, 3)  # 3 words + END; the longest source has 3 pieces
    np.testing.assert_allclose(weights[0].sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_allclose(weights[1, :, :, :2].sum(-1), 1.0, rtol=1e-5)  # "five", [END]
    assert not weights[1, :, :, :, 1:].any()  # "five" has one source piece: the rest is padding
    assert outputs["source_pieces"].numpy().tolist() == [
        [b"one", b"two", b"three"], [b"five", b"[PAD]", b"[PAD]"]
    ]
    assert outputs["target_pieces"].numpy().tolist() == [
        [b"three", b"two", b"one", b"[END]"], [b"five", b"[END]", b"[PAD]", b"[PAD]"]
    ]


def test_outputs_are_float32_under_mixed_precision(word_tokenizer):
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = build_transformer(TransformerConfig(
            source_vocab_size=16, target_vocab_size=16, num_encoder_layers=1,
            num_decoder_layers=1, d_model=8, num_heads=2, d_ff=16, max_length=8,
        ))
    finally:
        keras.config.set_dtype_policy("float32")
    assert model.get_layer("decoder").compute_dtype == "bfloat16"
    mixed = Translator(model, word_tokenizer, word_tokenizer, beam_width=2)
    for name, function in mixed.signatures().items():
        dtypes = {key: spec.dtype for key, spec in function.structured_outputs.items()}
        assert set(dtypes.values()) <= {tf.string, tf.float32, tf.int64}, name
    assert mixed.translate(tf.constant(["one two"]))["score"].dtype == tf.float32


def compiled_function_calls(function) -> list[str]:
    """Names of the functions that a `tf.function`'s graph calls with `jit_compile=True`."""
    graph = function.get_concrete_function().graph.as_graph_def()
    return [f.signature.name for f in graph.library.function if f.attr["_XlaMustCompile"].b]


def test_single_sentences_decode_under_xla_with_the_same_translations(
    translator, reverse_model, word_tokenizer, tmp_path
):
    xla = Translator(reverse_model, word_tokenizer, word_tokenizer, beam_width=3, alpha=0.6,
                     xla_max_batch=1)
    assert compiled_function_calls(xla.translate) and not compiled_function_calls(
        translator.translate)
    batches = [[sentence] for sentence in SENTENCES] + [SENTENCES]  # XLA, XLA, XLA, not
    tf.saved_model.save(xla, str(tmp_path), signatures=xla.signatures())
    served = tf.saved_model.load(str(tmp_path)).signatures["serving_default"]
    for batch in batches:
        expected = translator.translate(tf.constant(batch))
        for outputs in (xla.translate(tf.constant(batch)), served(text=tf.constant(batch))):
            np.testing.assert_array_equal(outputs["tokens"].numpy(), expected["tokens"].numpy())
            np.testing.assert_allclose(outputs["score"].numpy(), expected["score"].numpy(),
                                       rtol=1e-5)


def test_xla_compiles_every_batch_size_up_to_its_limit_at_each_length_multiple(
    reverse_model, word_tokenizer
):
    # max_length 24: lengths padded to 16, and to 24 (not 32) above.
    xla = Translator(reverse_model, word_tokenizer, word_tokenizer, xla_max_batch=2)
    assert xla.xla_shapes() == [(1, 16), (1, 24), (2, 16), (2, 24)]
    assert Translator(reverse_model, word_tokenizer, word_tokenizer).xla_shapes() == []
    with pytest.raises(ValueError, match="xla_max_batch"):
        Translator(reverse_model, word_tokenizer, word_tokenizer, xla_max_batch=-1)
