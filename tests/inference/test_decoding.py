"""Cached decoding against the uncached reference, beam against greedy, batches against single
sentences, XLA against plain graphs, on a tiny model trained to reverse word sequences."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference.decoding import DEFAULT_EXTRA_LENGTH, SequenceDecoder
from keras_transformer.text.tokenizer import RESERVED_TOKENS

START, END = RESERVED_TOKENS.index("[START]"), RESERVED_TOKENS.index("[END]")


@pytest.fixture(scope="module")
def decoder(reverse_model):
    return SequenceDecoder(reverse_model, START, END)


@pytest.fixture(scope="module")
def sources(make_examples):
    source, _, _ = make_examples(4, seed=123)
    return source


_traced = {}


def decode(function, source, jit_compile=False, **options):
    """Runs a decoding method in `tf.function` (traced once per method and options; XLA needs
    static shapes, so compiled ones are traced per source shape)."""
    key = (function, jit_compile, tuple(sorted(options.items())))
    if key not in _traced:
        signature = None if jit_compile else [tf.TensorSpec([None, None], tf.int32)]
        _traced[key] = tf.function(
            lambda tokens: function(tokens, **options),
            input_signature=signature,
            jit_compile=jit_compile,
        )
    tokens, scores = _traced[key](tf.constant(source, tf.int32))
    return tokens.numpy(), scores.numpy()


def test_trained_model_reverses_its_input(decoder, sources):
    tokens, _ = decode(decoder.greedy, sources)
    for source, output in zip(sources, tokens, strict=True):
        words = source[source != 0]
        assert output[output != 0].tolist() == words[::-1].tolist()


def test_cached_greedy_equals_uncached_greedy(decoder, sources):
    cached = decode(decoder.greedy, sources, alpha=0.6)
    uncached = decode(decoder.greedy, sources, alpha=0.6, use_cache=False)
    np.testing.assert_array_equal(cached[0], uncached[0])
    np.testing.assert_allclose(cached[1], uncached[1], rtol=1e-4, atol=1e-6)


def test_cached_beam_equals_uncached_beam(decoder, sources):
    cached = decode(decoder.beam_search, sources, beam_width=3)
    uncached = decode(decoder.beam_search, sources, beam_width=3, use_cache=False)
    np.testing.assert_array_equal(cached[0], uncached[0])
    np.testing.assert_allclose(cached[1], uncached[1], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_width_one_equals_greedy(decoder, sources, alpha):
    greedy = decode(decoder.greedy, sources, alpha=alpha)
    beam = decode(decoder.beam_search, sources, beam_width=1, alpha=alpha)
    np.testing.assert_array_equal(beam[0], greedy[0])
    np.testing.assert_allclose(beam[1], greedy[1], rtol=1e-5)


@pytest.mark.parametrize("beam_width", [1, 3])
def test_mixed_length_batch_equals_one_sentence_at_a_time(decoder, sources, beam_width):
    batched = decode(decoder.decode, sources, beam_width=beam_width)
    for row, source in enumerate(sources):
        alone = decode(decoder.decode, source[None, source != 0], beam_width=beam_width)
        assert alone[0][0].tolist() == batched[0][row, : alone[0].shape[1]].tolist()
        assert not batched[0][row, alone[0].shape[1] :].any()
        assert alone[1][0] == pytest.approx(batched[1][row], rel=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("beam_width", [1, 3])
def test_xla_gives_the_same_tokens(decoder, sources, beam_width):
    plain = decode(decoder.decode, sources, beam_width=beam_width)
    compiled = decode(decoder.decode, sources, jit_compile=True, beam_width=beam_width)
    np.testing.assert_array_equal(compiled[0], plain[0])
    np.testing.assert_allclose(compiled[1], plain[1], rtol=1e-4)


def untrained_decoder(**changes):
    keras.utils.set_random_seed(1)
    values = dict(
        source_vocab_size=12, target_vocab_size=12, num_encoder_layers=1, num_decoder_layers=1,
        d_model=8, num_heads=2, d_ff=16, dropout=0.0, max_length=64,
    )
    values.update(changes)
    return SequenceDecoder(build_transformer(TransformerConfig(**values)), START, END)


def test_length_limit_is_source_length_plus_extra_capped_at_max_length():
    decoder = untrained_decoder()
    source = np.zeros((3, 20), np.int32)
    source[0, :2] = 5
    source[1, :8] = 5
    source[2, :20] = 5
    limits, buffer_length = decoder.length_limits(tf.constant(source))
    assert DEFAULT_EXTRA_LENGTH == 50
    assert limits.numpy().tolist() == [52, 58, 64]
    assert buffer_length == 64
    limits, buffer_length = decoder.length_limits(tf.constant(source[:2, :8]))
    assert (limits.numpy().tolist(), buffer_length) == ([52, 58], 58)
    tokens, _ = decode(decoder.greedy, source[:2, :8])
    assert tokens.shape == (2, 58)
    with pytest.raises(ValueError, match="max_length"):
        decoder.length_limits(tf.constant(source), max_length=65)


def test_padding_and_start_are_never_generated():
    decoder = untrained_decoder()
    # The most likely tokens are padding, then START; END is ruled out so that all 5 are written.
    bias = keras.ops.convert_to_numpy(decoder.to_logits.bias)
    decoder.to_logits.bias.assign(bias + np.eye(12)[[0, START, END]].T @ [100.0, 90.0, -100.0])
    for function in (decoder.greedy, decoder.beam_search):
        tokens, scores = decode(function, np.array([[4, 5, 6]]), max_length=5)
        assert tokens.shape == (1, 5)
        assert not np.isin(tokens, [0, START, END]).any()
        assert np.isfinite(scores).all()


@pytest.mark.parametrize(
    "changes",
    [{"share_embeddings": True}, {"share_embeddings": True, "tie_output_embedding": True}],
)
def test_shared_embeddings_decode_like_the_reference(changes):
    decoder = untrained_decoder(**changes)
    source = np.array([[4, 5, 6, 7], [8, 9, 0, 0]])
    cached = decode(decoder.greedy, source, max_length=6)
    uncached = decode(decoder.greedy, source, max_length=6, use_cache=False)
    np.testing.assert_array_equal(cached[0], uncached[0])
    # And under XLA, where the searches keep full-length caches and every row.
    for function in (decoder.greedy, decoder.beam_search):
        plain = decode(function, source, max_length=6)
        compiled = decode(function, source, max_length=6, jit_compile=True)
        np.testing.assert_array_equal(compiled[0], plain[0])
        np.testing.assert_allclose(compiled[1], plain[1], rtol=1e-5)


def test_cross_attention_is_a_distribution_over_real_source_tokens(decoder, sources):
    target = np.full((len(sources), 3), 5)
    target[:, 0] = START
    weights = decoder.cross_attention(tf.constant(sources), tf.constant(target)).numpy()
    assert weights.shape == (len(sources), 1, 4, 3, sources.shape[1])
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-5)
    assert not weights[np.broadcast_to((sources == 0)[:, None, None, None], weights.shape)].any()


@pytest.mark.parametrize("method", ["greedy", "beam_search"])
def test_the_decoding_loop_reads_no_variable(decoder, method):
    # Variables are read once per call (`read_once`); the loop's steps use those values.
    function = tf.function(getattr(decoder, method))
    graph = function.get_concrete_function(tf.TensorSpec([None, None], tf.int32)).graph
    library = graph.as_graph_def().library.function
    bodies = [f for f in library if "while_body" in f.signature.name]
    assert bodies
    reads_in_loop = [node.name for body in bodies for node in body.node_def
                     if node.op == "ReadVariableOp"]
    reads_before = [op.name for op in graph.get_operations() if op.type == "ReadVariableOp"]
    assert reads_in_loop == []
    assert len(reads_before) >= len(decoder.decoder.weights)
