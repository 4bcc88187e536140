import numpy as np
import pytest
from harness import run_layer_test

from keras_transformer.layers import Decoder, DecoderLayer

D_MODEL, HEADS = 8, 2


@pytest.fixture
def batch():
    rng = np.random.default_rng(0)
    target = rng.normal(size=(2, 5, D_MODEL)).astype("float32")
    encoder_output = rng.normal(size=(2, 6, D_MODEL)).astype("float32")
    source_mask = np.array([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]], bool)
    return target, encoder_output, source_mask


@pytest.mark.parametrize("append_to_cache", [False, True])
@pytest.mark.parametrize("norm_first", [False, True])
def test_cached_step_by_step_equals_full_pass(batch, norm_first, append_to_cache):
    target, encoder_output, source_mask = batch
    decoder = Decoder(
        num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=16, norm_first=norm_first
    )
    full = np.asarray(decoder(target, encoder_output, encoder_padding_mask=source_mask))
    # A fixed-size cache written in place, or one that grows from length 0.
    self_caches = decoder.initial_self_attention_caches(2, 0 if append_to_cache else 5)
    cross_caches = decoder.cross_attention_caches(encoder_output)
    for step in range(5):
        out, self_caches = decoder(
            target[:, step : step + 1],
            encoder_padding_mask=source_mask,
            self_attention_caches=self_caches,
            cross_attention_caches=cross_caches,
            cache_index=step,
            append_to_cache=append_to_cache,
        )
        np.testing.assert_allclose(np.asarray(out)[:, 0], full[:, step], atol=1e-5)


def test_ignores_padded_source_and_future_targets(batch):
    target, encoder_output, source_mask = batch
    decoder = Decoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=16)
    out = np.asarray(decoder(target, encoder_output, encoder_padding_mask=source_mask))
    changed_source = encoder_output.copy()
    changed_source[~source_mask] = 50.0
    changed_target = target.copy()
    changed_target[:, 3:] = -7.0
    out_changed = np.asarray(
        decoder(changed_target, changed_source, encoder_padding_mask=source_mask)
    )
    np.testing.assert_allclose(out[:, :3], out_changed[:, :3], atol=1e-5)


def test_returns_cross_attention_weights_per_layer(batch):
    target, encoder_output, source_mask = batch
    decoder = Decoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=16)
    _, weights = decoder(
        target, encoder_output, encoder_padding_mask=source_mask, return_attention_scores=True
    )
    assert len(weights) == 2
    for layer_weights in map(np.asarray, weights):
        assert layer_weights.shape == (2, HEADS, 5, 6)
        np.testing.assert_allclose(layer_weights.sum(-1), 1.0, atol=1e-6)
        assert np.all(layer_weights[0, :, :, 4:] == 0.0)


def test_config_round_trip():
    decoder = Decoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=16, dropout=0.1)
    assert Decoder.from_config(decoder.get_config()).get_config() == decoder.get_config()
    layer = DecoderLayer(d_model=D_MODEL, num_heads=HEADS, d_ff=16, norm_first=True)
    assert DecoderLayer.from_config(layer.get_config()).get_config() == layer.get_config()


def test_a_lone_decoder_layer_is_causal_by_default():
    layer = DecoderLayer(d_model=D_MODEL, num_heads=HEADS, d_ff=16)
    rng = np.random.default_rng(3)
    target = rng.normal(size=(2, 5, D_MODEL)).astype("float32")
    encoder_output = rng.normal(size=(2, 4, D_MODEL)).astype("float32")
    changed = target.copy()
    changed[:, 3:] = rng.normal(size=changed[:, 3:].shape) * 10
    out, out_changed = (np.asarray(layer(t, encoder_output)) for t in (target, changed))
    np.testing.assert_allclose(out[:, :3], out_changed[:, :3], atol=1e-5)
    assert not np.allclose(out[:, 3:], out_changed[:, 3:])


def test_cache_api_misuse_is_a_clear_error(batch):
    target, encoder_output, _ = batch
    layer = DecoderLayer(d_model=D_MODEL, num_heads=HEADS, d_ff=16)
    decoder = Decoder(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=16)
    token = target[:, :1]
    caches = decoder.initial_self_attention_caches(2, 5)
    cross_caches = decoder.cross_attention_caches(encoder_output)
    with pytest.raises(ValueError, match="needs encoder_output, or cross-attention caches"):
        layer(target, None)
    with pytest.raises(ValueError, match="needs encoder_output, or cross-attention caches"):
        decoder(target)
    with pytest.raises(ValueError, match="not both"):
        decoder(token, encoder_output, cross_attention_caches=cross_caches)
    with pytest.raises(ValueError, match="caches and cache_index go together"):
        layer(token, encoder_output, self_attention_cache=caches[0])  # no index
    with pytest.raises(ValueError, match="caches and cache_index go together"):
        decoder(token, encoder_output, cache_index=0)  # no caches to write into
    with pytest.raises(ValueError, match=r"one \(keys, values\) pair per layer \(2\), got 1"):
        decoder(token, self_attention_caches=caches[:1], cross_attention_caches=cross_caches,
                cache_index=0)


def test_passes_the_layer_harness(batch):
    target, encoder_output, _ = batch
    run_layer_test(
        DecoderLayer,
        dict(d_model=D_MODEL, num_heads=HEADS, d_ff=16, dropout=0.1),
        dict(x=target, encoder_output=encoder_output),
        (2, 5, D_MODEL),
        expected_num_trainable_weights=2 * (8 + 2) + 4 + 2,  # 2 attentions, FFN, 3 norms
    )


@pytest.mark.slow
def test_stack_passes_the_layer_harness(batch):
    target, encoder_output, source_mask = batch
    run_layer_test(
        Decoder,
        dict(num_layers=2, d_model=D_MODEL, num_heads=HEADS, d_ff=16, dropout=0.1),
        dict(
            x=target,
            encoder_output=encoder_output,
            padding_mask=np.array([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]], bool),
            encoder_padding_mask=source_mask,
        ),
        (2, 5, D_MODEL),
        expected_num_trainable_weights=2 * 26,
    )
