"""`compute_dtype_copy`: a mixed-precision model stored in its compute dtype computes exactly what
the original does (logits, greedy and beam decoding), with bfloat16 kernels and float32 layer
normalization; models of one dtype are left alone."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TransformerConfig, build_transformer
from keras_transformer.inference.compute_dtype import compute_dtype_copy
from keras_transformer.inference.decoding import SequenceDecoder
from keras_transformer.text.tokenizer import RESERVED_TOKENS
from keras_transformer.training.trainer import dtype_policy

START, END = RESERVED_TOKENS.index("[START]"), RESERVED_TOKENS.index("[END]")
CONFIG = TransformerConfig(
    source_vocab_size=60, target_vocab_size=60, num_encoder_layers=2, num_decoder_layers=2,
    d_model=32, num_heads=4, d_ff=64, dropout=0.0, max_length=32,
)


def mixed_model(**changes) -> keras.Model:
    """A mixed-bfloat16 model whose every weight is perturbed away from its initial value, so
    that layer normalization's scale and offset are not the exactly representable 1 and 0."""
    keras.utils.set_random_seed(3)
    with dtype_policy(True):
        model = build_transformer(CONFIG.replace(**changes))
    rng = np.random.default_rng(0)
    model.set_weights([w + rng.normal(0, 0.1, w.shape).astype(w.dtype)
                       for w in model.get_weights()])
    return model


@pytest.mark.parametrize("changes", [{}, {"share_embeddings": True,
                                          "tie_output_embedding": True}],
                         ids=["separate", "shared-tied"])
def test_the_copy_computes_exactly_what_the_mixed_model_does(changes):
    model = mixed_model(**changes)
    copy = compute_dtype_copy(model)
    dtypes = {weight.path.split("/")[-1]: weight.dtype for weight in copy.weights}
    assert dtypes["kernel"] == dtypes["embeddings"] == "bfloat16"
    assert dtypes["gamma"] == dtypes["beta"] == "float32"
    assert {weight.dtype for weight in model.weights} == {"float32"}  # the original is unchanged
    rng = np.random.default_rng(1)
    inputs = {"source_tokens": rng.integers(1, 60, (3, 11)),
              "target_tokens": rng.integers(1, 60, (3, 7))}
    inputs["source_tokens"][0, 6:] = 0  # padding too
    np.testing.assert_array_equal(copy(inputs).numpy(), model(inputs).numpy())
    sources = tf.constant(inputs["source_tokens"])
    for beam_width in (1, 3):
        original, copied = (
            tf.function(SequenceDecoder(m, START, END).decode)(sources, beam_width=beam_width)
            for m in (model, copy)
        )
        np.testing.assert_array_equal(copied[0].numpy(), original[0].numpy())
        np.testing.assert_array_equal(copied[1].numpy(), original[1].numpy())


def test_a_model_of_one_dtype_is_returned_as_it_is():
    model = build_transformer(CONFIG)
    assert compute_dtype_copy(model) is model
