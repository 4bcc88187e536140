import numpy as np
from harness import run_layer_test

from keras_transformer.layers import PaddingMask, attention_mask, causal_mask, padding_mask


def test_padding_mask_marks_real_tokens():
    np.testing.assert_array_equal(padding_mask(np.array([[4, 0, 5, 0]])), [[1, 0, 1, 0]])


def test_causal_mask_is_lower_triangular():
    np.testing.assert_array_equal(np.asarray(causal_mask(4, 4)), np.tril(np.ones((4, 4), bool)))


def test_causal_mask_with_offset_sees_the_cache_up_to_the_current_position():
    # One query at absolute position 2 against a cache of 5 slots: slots 0..2 are visible.
    np.testing.assert_array_equal(np.asarray(causal_mask(1, 5, offset=2)), [[1, 1, 1, 0, 0]])


def test_attention_mask_combines_query_key_and_causal():
    query = np.array([[True, True, False]])
    key = np.array([[True, False, True]])
    mask = np.asarray(
        attention_mask(3, 3, query_padding_mask=query, key_padding_mask=key, use_causal_mask=True)
    )
    expected = query[:, :, None] & key[:, None, :] & np.tril(np.ones((3, 3), bool))[None]
    np.testing.assert_array_equal(mask[:, 0], expected)


def test_no_masks_gives_none():
    assert attention_mask(3, 3) is None


def test_padding_mask_layer_passes_the_layer_harness():
    run_layer_test(
        PaddingMask,
        dict(pad_id=0),
        dict(token_ids=np.array([[4, 0, 5, 0], [1, 2, 3, 4]], "int32")),
        (2, 4),
        expected_num_trainable_weights=0,
        float_output=False,
    )
