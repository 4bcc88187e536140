import keras
import numpy as np
import pytest
from harness import run_layer_test

from keras_transformer.layers import MultiHeadAttention

BATCH, QUERY_LEN, KEY_LEN, D_MODEL, HEADS = 2, 5, 7, 16, 4


@pytest.fixture
def inputs():
    rng = np.random.default_rng(0)
    query = rng.normal(size=(BATCH, QUERY_LEN, D_MODEL)).astype("float32")
    value = rng.normal(size=(BATCH, KEY_LEN, D_MODEL)).astype("float32")
    query_mask = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool)
    key_mask = np.array([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 0]], bool)
    return query, value, query_mask, key_mask


def reference_with_same_weights(ours):
    """keras.layers.MultiHeadAttention loaded with our projection weights."""
    d_k = D_MODEL // HEADS
    reference = keras.layers.MultiHeadAttention(num_heads=HEADS, key_dim=d_k)
    reference.build((BATCH, QUERY_LEN, D_MODEL), (BATCH, KEY_LEN, D_MODEL))
    pairs = [
        (reference._query_dense, ours.query_dense),
        (reference._key_dense, ours.key_dense),
        (reference._value_dense, ours.value_dense),
    ]
    for theirs, mine in pairs:
        kernel, bias = (np.asarray(w) for w in mine.weights)
        theirs.set_weights([kernel.reshape(D_MODEL, HEADS, d_k), bias.reshape(HEADS, d_k)])
    kernel, bias = (np.asarray(w) for w in ours.output_dense.weights)
    reference._output_dense.set_weights([kernel.reshape(HEADS, d_k, D_MODEL), bias])
    return reference


def test_matches_keras_multi_head_attention_without_masks(inputs):
    query, value, _, _ = inputs
    ours = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    out, weights = ours(query, value, return_attention_scores=True)
    reference = reference_with_same_weights(ours)
    ref_out, ref_weights = reference(query, value, return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), np.asarray(ref_weights), atol=1e-5)


def test_matches_keras_multi_head_attention_with_key_padding_mask(inputs):
    query, value, _, key_mask = inputs
    ours = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    out, weights = ours(query, value, key_padding_mask=key_mask, return_attention_scores=True)
    reference = reference_with_same_weights(ours)
    ref_out, ref_weights = reference(
        query, value, key_mask=key_mask, return_attention_scores=True
    )
    np.testing.assert_allclose(np.asarray(out), np.asarray(ref_out), atol=1e-5)
    np.testing.assert_allclose(np.asarray(weights), np.asarray(ref_weights), atol=1e-5)


def test_matches_keras_multi_head_attention_with_query_and_causal_masks(inputs):
    # Keras 3.15's layer takes the query mask from the tensor's implicit mask only (its
    # `query_mask` argument is overwritten), so the reference gets it that way. Padding queries
    # differ by design: ours attend to nothing (all-zero weights) rather than to the real keys.
    query, _, query_mask, _ = inputs
    ours = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    out, weights = ours(
        query,
        query,
        query_padding_mask=query_mask,
        key_padding_mask=query_mask,
        use_causal_mask=True,
        return_attention_scores=True,
    )
    reference = reference_with_same_weights(ours)
    ref_out = reference(query, query, key_mask=query_mask, use_causal_mask=True)
    np.testing.assert_allclose(
        np.asarray(out)[query_mask], np.asarray(ref_out)[query_mask], atol=1e-5
    )
    padding_query_weights = np.asarray(weights).transpose(0, 2, 1, 3)[~query_mask]
    assert np.all(padding_query_weights == 0.0)


def test_weights_sum_to_one_and_are_exactly_zero_on_masked_keys(inputs):
    query, value, query_mask, key_mask = inputs
    _, weights = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)(
        query,
        value,
        query_padding_mask=query_mask,
        key_padding_mask=key_mask,
        return_attention_scores=True,
    )
    weights = np.asarray(weights)
    assert weights.shape == (BATCH, HEADS, QUERY_LEN, KEY_LEN)
    real_rows = weights.transpose(0, 2, 1, 3)[query_mask]  # (real queries, heads, keys)
    np.testing.assert_allclose(real_rows.sum(-1), 1.0, atol=1e-6)
    masked_keys = np.broadcast_to(~key_mask[:, None, None, :], weights.shape)
    assert np.all(weights[masked_keys] == 0.0)


def test_masked_keys_are_ignored(inputs):
    query, value, _, key_mask = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    out = np.asarray(attention(query, value, key_padding_mask=key_mask))
    perturbed = value.copy()
    perturbed[~key_mask] = 100.0
    out_perturbed = np.asarray(attention(query, perturbed, key_padding_mask=key_mask))
    np.testing.assert_allclose(out, out_perturbed, atol=1e-5)


def test_causal_output_ignores_future_positions(inputs):
    query, _, _, _ = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    out = np.asarray(attention(query, query, use_causal_mask=True))
    changed = query.copy()
    changed[:, 3:] += 5.0
    out_changed = np.asarray(attention(changed, changed, use_causal_mask=True))
    np.testing.assert_allclose(out[:, :3], out_changed[:, :3], atol=1e-5)
    assert np.abs(out[:, 3:] - out_changed[:, 3:]).max() > 1e-3


def test_cached_steps_equal_full_causal_attention(inputs):
    query, _, _, _ = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    full = np.asarray(attention(query, query, use_causal_mask=True))
    empty = np.zeros((BATCH, HEADS, QUERY_LEN, D_MODEL // HEADS), "float32")
    cache = (empty, empty)
    for step in range(QUERY_LEN):
        token = query[:, step : step + 1]
        out, cache = attention(token, token, use_causal_mask=True, cache=cache, cache_index=step)
        np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, step], atol=1e-5)


def test_steps_appended_to_a_growing_cache_equal_full_causal_attention(inputs):
    query, _, _, _ = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    full = np.asarray(attention(query, query, use_causal_mask=True))
    empty = np.zeros((BATCH, HEADS, 0, D_MODEL // HEADS), "float32")
    cache = (empty, empty)
    for step in range(QUERY_LEN):
        token = query[:, step : step + 1]
        out, cache = attention(token, token, use_causal_mask=True, cache=cache, cache_index=step,
                               append_to_cache=True)
        assert tuple(cache[0].shape) == (BATCH, HEADS, step + 1, D_MODEL // HEADS)
        np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, step], atol=1e-5)
    # The grown cache holds the same keys and values as projecting the whole sequence.
    keys, values = attention.compute_key_value(query)
    np.testing.assert_allclose(np.asarray(cache[0]), np.asarray(keys), atol=1e-6)
    np.testing.assert_allclose(np.asarray(cache[1]), np.asarray(values), atol=1e-6)


def test_several_queries_appended_at_once_stay_causal(inputs):
    query, _, _, _ = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    full = np.asarray(attention(query, query, use_causal_mask=True))
    cache = attention.compute_key_value(query[:, :2])
    block = query[:, 2:5]  # three new positions: each must not see the ones after it
    out, cache = attention(block, block, use_causal_mask=True, cache=cache, cache_index=2,
                           append_to_cache=True)
    assert tuple(cache[0].shape)[2] == 5
    np.testing.assert_allclose(np.asarray(out), full[:, 2:5], atol=1e-5)


def test_precomputed_keys_and_values_equal_projecting_each_time(inputs):
    query, value, _, key_mask = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    direct = np.asarray(attention(query, value, key_padding_mask=key_mask))
    cached = np.asarray(
        attention(
            query, None, key_padding_mask=key_mask, cache=attention.compute_key_value(value)
        )
    )
    np.testing.assert_allclose(direct, cached, atol=1e-6)


def test_float16_masking_is_finite(inputs):
    query, value, query_mask, key_mask = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL, dtype="mixed_float16")
    out = np.asarray(
        attention(
            query, value, query_padding_mask=query_mask, key_padding_mask=np.zeros_like(key_mask)
        )
    )
    assert out.dtype == np.float16
    assert np.all(np.isfinite(out))


def test_heads_must_divide_d_model():
    with pytest.raises(ValueError, match=r"num_heads \(3\).*d_model \(16\)"):
        MultiHeadAttention(num_heads=3, d_model=16)


def test_config_round_trip():
    layer = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL, dropout=0.1, name="mha")
    assert MultiHeadAttention.from_config(layer.get_config()).get_config() == layer.get_config()


@pytest.mark.parametrize("batch, key_length", [(2, 9), (128, 128)])  # 288, 262,144 key values
def test_one_query_equals_the_last_row_of_full_attention(batch, key_length):
    # One-token decoding steps may take a different route for small and large key sets; both
    # must give the full computation's answer.
    rng = np.random.default_rng(4)
    sequence = rng.normal(size=(batch, key_length, D_MODEL)).astype("float32")
    key_mask = rng.random((batch, key_length)) < 0.8
    key_mask[:, 0] = True
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    full, full_weights = attention(sequence, sequence, key_padding_mask=key_mask,
                                   return_attention_scores=True)
    last, last_weights = attention(sequence[:, -1:], sequence, key_padding_mask=key_mask,
                                   return_attention_scores=True)
    np.testing.assert_allclose(np.asarray(last)[:, 0], np.asarray(full)[:, -1], atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(last_weights)[:, :, 0], np.asarray(full_weights)[:, :, -1], atol=1e-6
    )


def test_value_defaults_to_the_query(inputs):
    query, _, query_mask, _ = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    np.testing.assert_array_equal(
        np.asarray(attention(query, key_padding_mask=query_mask)),
        np.asarray(attention(query, query, key_padding_mask=query_mask)),
    )


def test_cache_misuse_is_a_clear_error(inputs):
    query, value, _, _ = inputs
    attention = MultiHeadAttention(num_heads=HEADS, d_model=D_MODEL)
    with pytest.raises(ValueError, match="cache_index needs a cache"):
        attention(query[:, :1], cache_index=0)
    empty = np.zeros((BATCH, HEADS, 0, D_MODEL // HEADS), "float32")
    with pytest.raises(ValueError, match="append_to_cache needs cache_index"):
        attention(query[:, :1], cache=(empty, empty), append_to_cache=True)
    with pytest.raises(ValueError, match="pass value=None and key=None"):
        attention(query, value, cache=attention.compute_key_value(value))


def test_initializers_are_arguments_and_part_of_the_config():
    attention = MultiHeadAttention(
        num_heads=HEADS, d_model=D_MODEL, kernel_initializer="zeros", bias_initializer="ones"
    )
    attention.build((BATCH, QUERY_LEN, D_MODEL))
    for projection in (attention.query_dense, attention.output_dense):
        assert not np.asarray(projection.kernel).any() and np.asarray(projection.bias).all()
    clone = MultiHeadAttention.from_config(attention.get_config())
    clone.build((BATCH, QUERY_LEN, D_MODEL))
    assert not np.asarray(clone.key_dense.kernel).any()


def test_passes_the_layer_harness(inputs):
    query, value, query_mask, key_mask = inputs
    run_layer_test(
        MultiHeadAttention,
        dict(num_heads=HEADS, d_model=D_MODEL, dropout=0.1),
        dict(query=query, value=value, query_padding_mask=query_mask, key_padding_mask=key_mask),
        (BATCH, QUERY_LEN, D_MODEL),
        expected_num_trainable_weights=8,
        expected_num_params=4 * (D_MODEL * D_MODEL + D_MODEL),
    )
