import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.layers import BLOCK_ARGUMENTS
from keras_transformer.settings import TrainingSettings
from keras_transformer.training.trainer import compile_model

VOCAB = 24


@pytest.fixture(scope="module")
def config(tiny_config):
    """The shared tiny config with one vocabulary size for both sides (shared embeddings)."""
    return tiny_config.replace(source_vocab_size=VOCAB, target_vocab_size=VOCAB)


def logits_of(model, source, target):
    return np.asarray(model({"source_tokens": source, "target_tokens": target}))


@pytest.fixture(scope="module")
def model(config):
    keras.utils.set_random_seed(0)
    return kt.build_transformer(config)


@pytest.fixture
def batch():
    source = np.array([[5, 6, 7, 0, 0], [8, 9, 10, 11, 12]])
    target = np.array([[2, 13, 14, 0], [2, 15, 16, 17]])
    return source, target


def pad(tokens, extra):
    return np.concatenate([tokens, np.zeros((tokens.shape[0], extra), tokens.dtype)], axis=1)


def test_shapes_symbolic_and_eager(model, batch):
    assert model.output_shape == (None, None, VOCAB)
    assert [tensor.name for tensor in model.inputs] == ["source_tokens", "target_tokens"]
    source, target = batch
    assert logits_of(model, source, target).shape == (2, 4, VOCAB)


@pytest.mark.parametrize("norm_first", [False, True])
def test_appending_source_padding_changes_no_logit(config, batch, norm_first):
    model = kt.build_transformer(config.replace(norm_first=norm_first))
    source, target = batch
    real = target != 0
    before = logits_of(model, source, target)
    after = logits_of(model, pad(source, 3), target)
    np.testing.assert_allclose(after[real], before[real], atol=1e-5)


def test_appending_target_padding_changes_no_real_logit(model, batch):
    source, target = batch
    real = target != 0
    before = logits_of(model, source, target)
    after = logits_of(model, source, pad(target, 3))
    np.testing.assert_allclose(after[:, :4][real], before[real], atol=1e-5)


def test_source_padding_content_is_ignored(model, batch):
    # Perturb what must be ignored: the embedding of padding positions, via a different pad row.
    source, target = batch
    before = logits_of(model, source, target)
    embedding = model.get_layer("source_embedding").token_embedding
    table = np.asarray(embedding.embeddings)
    changed = table.copy()
    changed[0] += 3.0
    embedding.embeddings.assign(changed)
    try:
        after = logits_of(model, source, target)
    finally:
        embedding.embeddings.assign(table)
    real = target != 0
    np.testing.assert_allclose(after[real], before[real], atol=1e-5)


@pytest.mark.parametrize("position", [1, 2, 3])
def test_changing_a_target_token_changes_no_earlier_logit(model, batch, position):
    source, target = batch
    target = np.array([[2, 13, 14, 15], [2, 15, 16, 17]])
    before = logits_of(model, source, target)
    changed = target.copy()
    changed[:, position] = 20
    after = logits_of(model, source, changed)
    np.testing.assert_allclose(after[:, :position], before[:, :position], atol=1e-6)
    assert np.abs(after[:, position:] - before[:, position:]).max() > 1e-4


def test_shared_embeddings_use_one_matrix(config, batch):
    model = kt.build_transformer(config.replace(share_embeddings=True))
    names = [layer.name for layer in model.layers]
    assert "shared_embedding" in names and "source_embedding" not in names
    source, target = batch
    assert logits_of(model, source, target).shape == (2, 4, VOCAB)


def test_tied_output_projection_is_the_transposed_target_embedding(config, batch):
    model = kt.build_transformer(config.replace(tie_output_embedding=True))
    untied = kt.build_transformer(config)
    names = [layer.name for layer in model.layers]
    assert "logits" not in names
    assert untied.count_params() - model.count_params() == 16 * VOCAB + VOCAB
    source, target = batch
    decoder_output = keras.Model(model.inputs, model.get_layer("decoder").output)
    hidden = np.asarray(decoder_output({"source_tokens": source, "target_tokens": target}))
    table = np.asarray(model.get_layer("target_embedding").token_embedding.embeddings)
    np.testing.assert_allclose(logits_of(model, source, target), hidden @ table.T, atol=1e-5)


def compile_for_training(model, config):
    compile_model(model, config, TrainingSettings(warmup_steps=100, learning_rate_scale=1.0))


@pytest.mark.parametrize("tie_output_embedding", [False, True])
def test_keras_file_round_trip_gives_identical_logits(
    config, tmp_path, batch, tie_output_embedding
):
    config = config.replace(label_smoothing=0.1, tie_output_embedding=tie_output_embedding)
    model = kt.build_transformer(config)
    compile_for_training(model, config)
    source, target = batch
    model.train_on_batch({"source_tokens": source, "target_tokens": target}, target)
    model.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(
        logits_of(loaded, source, target), logits_of(model, source, target)
    )
    assert isinstance(loaded.loss, kt.MaskedSparseCategoricalCrossentropy)
    assert loaded.loss.label_smoothing == 0.1
    schedule = keras.saving.deserialize_keras_object(loaded.optimizer.get_config()["learning_rate"])
    assert isinstance(schedule, kt.TransformerSchedule)
    assert float(loaded.optimizer.learning_rate) == float(model.optimizer.learning_rate)


@pytest.mark.parametrize("tie_output_embedding", [False, True])
def test_mixed_precision_trains_and_returns_float32_logits(config, batch, tie_output_embedding):
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        config = config.replace(tie_output_embedding=tie_output_embedding)
        model = kt.build_transformer(config)
        compile_for_training(model, config)
        source, target = batch
        loss = model.train_on_batch({"source_tokens": source, "target_tokens": target}, target)
        logits = model({"source_tokens": source, "target_tokens": target})
        encoder_weights = model.get_layer("encoder").weights
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert np.isfinite(loss[0] if isinstance(loss, list) else loss)
    assert keras.backend.standardize_dtype(logits.dtype) == "float32"
    assert model.get_layer("encoder").compute_dtype == "float16"
    if not tie_output_embedding:
        assert model.get_layer("logits").compute_dtype == "float16"
    assert all(weight.dtype == "float32" for weight in encoder_weights)


@pytest.mark.slow
def test_fit_learns_to_reverse_sequences(config):
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    config = config.replace(d_model=32, d_ff=64)

    def reverse_task(count):
        source = rng.integers(4, VOCAB, size=(count, 6))
        start = np.full((count, 1), 2)
        end = np.full((count, 1), 3)
        inputs = {"source_tokens": source, "target_tokens": np.hstack([start, source[:, ::-1]])}
        return inputs, np.hstack([source[:, ::-1], end])

    model = kt.build_transformer(config)
    compile_for_training(model, config)
    train_inputs, train_labels = reverse_task(3072)
    model.fit(train_inputs, train_labels, batch_size=64, epochs=6, verbose=0)
    test_inputs, test_labels = reverse_task(512)
    _, accuracy = model.evaluate(test_inputs, test_labels, batch_size=128, verbose=0)
    assert accuracy >= 0.95


def test_docstring_examples_run(run_doctests):
    run_doctests("keras_transformer.model")


def test_block_arguments_come_from_the_config(config):
    config = config.replace(dropout=0.125, norm_first=True)
    model = kt.build_transformer(config)
    for name in ("encoder", "decoder"):
        layer_config = model.get_layer(name).get_config()
        shared = [field for field in BLOCK_ARGUMENTS if hasattr(config, field)]
        assert shared == ["d_model", "num_heads", "d_ff", "dropout", "norm_first"]
        assert {field: layer_config[field] for field in shared} == {
            field: getattr(config, field) for field in shared
        }


def test_outputs_carry_no_keras_mask(model, batch):
    # An implicit mask on the logits would reach every loss and metric as sample weights.
    source, target = batch
    logits = model({"source_tokens": source, "target_tokens": target})
    assert getattr(logits, "_keras_mask", None) is None


def masked_loss(labels, logits):
    """The TF tutorial's masked loss: a scalar per batch."""
    real = tf.cast(labels != 0, tf.float32)
    losses = keras.losses.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return tf.reduce_sum(losses * real) / tf.reduce_sum(real)


def masked_accuracy(labels, logits):
    """The TF tutorial's masked accuracy: a scalar per batch."""
    predictions = tf.argmax(logits, axis=-1, output_type=labels.dtype)
    real = labels != 0
    hits = tf.cast(tf.logical_and(predictions == labels, real), tf.float32)
    return tf.reduce_sum(hits) / tf.reduce_sum(tf.cast(real, tf.float32))


@pytest.mark.slow
def test_fits_with_scalar_loss_and_metric_functions_on_padded_dynamic_batches(config):
    # With a Keras mask on the logits, Keras broadcast it onto these scalars as sample weights
    # and `fit` failed ("Shape must be at most rank 0 but is rank 2").
    rng = np.random.default_rng(5)
    sequences = [rng.integers(4, VOCAB, size=length) for length in rng.integers(2, 7, size=16)]

    def examples():
        for tokens in sequences:
            inputs = {"source_tokens": tokens, "target_tokens": np.r_[2, tokens[::-1]]}
            yield inputs, np.r_[tokens[::-1], 3]

    ids = tf.TensorSpec([None], tf.int32)
    dataset = tf.data.Dataset.from_generator(
        examples, output_signature=({"source_tokens": ids, "target_tokens": ids}, ids)
    ).padded_batch(4).apply(tf.data.experimental.assert_cardinality(4))
    model = kt.build_transformer(config.replace(num_encoder_layers=1, num_decoder_layers=1))
    model.compile(keras.optimizers.Adam(1e-2), loss=masked_loss, metrics=[masked_accuracy])
    history = model.fit(dataset, epochs=2, shuffle=False, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    inputs, labels = next(iter(dataset))
    # Keras reports the functions' own values (no mask turned into sample weights).
    reported = model.evaluate(
        tf.data.Dataset.from_tensors((inputs, labels)), verbose=0, return_dict=True
    )
    logits = model(inputs)
    assert reported["loss"] == pytest.approx(float(masked_loss(labels, logits)), rel=1e-5)
    assert reported["masked_accuracy"] == pytest.approx(
        float(masked_accuracy(labels, logits)), abs=1e-6
    )
