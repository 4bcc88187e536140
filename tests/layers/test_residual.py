import numpy as np
import pytest
from harness import run_layer_test

from keras_transformer.layers import AddNorm, FeedForward, MultiHeadAttention


@pytest.fixture
def x():
    return np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")


@pytest.mark.parametrize("norm_first", [False, True])
def test_is_the_papers_add_and_norm_or_pre_norm(x, norm_first):
    block = AddNorm(FeedForward(d_model=8, d_ff=16), norm_first=norm_first)
    out = np.asarray(block(x))
    network, norm = block.sublayer, block.norm
    if norm_first:
        expected = x + np.asarray(network(norm(x)))
    else:
        expected = np.asarray(norm(x + network(x)))
    np.testing.assert_allclose(out, expected, atol=1e-5)


def test_dropout_acts_on_the_sublayer_output_in_training_only():
    x = np.random.default_rng(2).normal(size=(8, 16, 8)).astype("float32")
    block = AddNorm(FeedForward(d_model=8, d_ff=16), dropout=0.5, norm_first=True)
    np.testing.assert_allclose(
        np.asarray(block(x)), x + np.asarray(block.sublayer(block.norm(x))), atol=1e-5
    )
    # Pre-LN output minus input is the dropped sub-layer output: half of it is zero.
    dropped = np.asarray(block(x, training=True)) - x
    assert 0.4 < np.mean(np.isclose(dropped, 0.0, atol=1e-6)) < 0.6


def test_passes_inputs_to_the_sublayer_and_returns_its_extra_outputs(x):
    attention = MultiHeadAttention(num_heads=2, d_model=8)
    block = AddNorm(attention)
    memory = np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")
    key_mask = np.array([[1, 1, 1, 0, 0, 0], [1] * 6], bool)
    out, weights = block(
        x,
        memory,
        key_padding_mask=key_mask,
        sublayer_options={"return_attention_scores": True},
    )
    attended, expected_weights = attention(
        x, memory, key_padding_mask=key_mask, return_attention_scores=True
    )
    np.testing.assert_allclose(np.asarray(out), np.asarray(block.norm(x + attended)), atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), np.asarray(expected_weights), atol=1e-6)


def test_layer_norm_epsilon_is_an_argument_kept_in_the_config():
    block = AddNorm(FeedForward(d_model=8, d_ff=16), layer_norm_epsilon=1e-3, dropout=0.1)
    assert block.norm.epsilon == 1e-3
    clone = AddNorm.from_config(block.get_config())
    assert clone.norm.epsilon == 1e-3 and isinstance(clone.sublayer, FeedForward)
    assert clone.get_config() == block.get_config()


@pytest.mark.parametrize("norm_first", [False, True])
def test_passes_the_layer_harness(x, norm_first):
    run_layer_test(
        AddNorm,
        dict(sublayer=FeedForward(d_model=8, d_ff=16), dropout=0.1, norm_first=norm_first),
        dict(x=x),
        (2, 4, 8),
        expected_num_trainable_weights=4 + 2,  # FFN and norm
    )
