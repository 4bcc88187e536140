"""Fixture SavedModels for the serving tests (and for trying `bench/serve.py`), written with
`tf.Module`."""

from __future__ import annotations

import sys
from pathlib import Path

# `keras-transformer serve ARGS` without the other sub-commands (they are not needed here).
SERVE_COMMAND = [sys.executable, "-c", (
    "import argparse, sys\n"
    "from keras_transformer.cli import serve\n"
    "parser = argparse.ArgumentParser()\n"
    "serve.add_parser(parser.add_subparsers())\n"
    "args = parser.parse_args(sys.argv[1:])\n"
    "sys.exit(args.run(args))\n"
), "serve"]


def make_fixture_module(tag: str, heavy_steps: int = 0):
    """A translator stand-in: `text` -> words reversed plus `tag`, a score, word lengths.

    Signatures: `serving_default` (string in; `translation`, `score`, `tokens` out), `typed`
    (float / bool / int64 inputs, a `_bytes` output), `ids` (int32 ids -> one float output),
    `classify` and `regress` (serialized tf.Examples with a float feature `x`). With
    `heavy_steps`, `serving_default` also runs that many 64x64 matmuls per call, like a
    decoder's per-step cost, so batching has something to save.
    """
    import tensorflow as tf
    import tensorflow_text as tf_text

    class FixtureModel(tf.Module):
        def __init__(self):
            super().__init__()
            self.tag = tf.Variable(tag)
            self.scale = tf.Variable(0.5)
            self.tokenizer = tf_text.WhitespaceTokenizer()
            self.weights = tf.Variable(tf.eye(64) * 0.9)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
        def translate(self, text):
            words = self.tokenizer.tokenize(text)
            reversed_words = tf.strings.reduce_join(words[:, ::-1], axis=1, separator=" ")
            score = self.scale * tf.cast(words.row_lengths(), tf.float32)
            if heavy_steps:
                state = tf.ones([tf.shape(text)[0], 64])
                for _ in tf.range(heavy_steps):
                    state = tf.tanh(tf.matmul(state, self.weights))
                score += 0.0 * tf.reduce_sum(state, axis=1)
            return {
                "translation": tf.strings.join([reversed_words, self.tag], separator=" "),
                "score": score,
                "tokens": tf.cast(tf.strings.length(words), tf.int64).to_tensor(0),
            }

        @tf.function(input_signature=[
            tf.TensorSpec([None, 2], tf.float32, name="x"),
            tf.TensorSpec([None], tf.bool, name="flag"),
            tf.TensorSpec([None], tf.int64, name="count"),
        ])
        def typed(self, x, flag, count):
            total = tf.reduce_sum(x, axis=1) * tf.cast(count, tf.float32)
            return {
                "y": tf.where(flag, total, -1.0),
                "label_bytes": tf.strings.join(["\xff", tf.strings.as_string(count)]),
            }

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="token_ids")])
        def ids(self, token_ids):
            return {"output_0": tf.cast(tf.reduce_sum(token_ids, axis=1), tf.float32)}

        def _feature(self, inputs):
            parsed = tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([], tf.float32)})
            return parsed["x"]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def classify(self, inputs):
            x = self._feature(inputs)
            scores = tf.stack([1.0 - tf.sigmoid(x), tf.sigmoid(x)], axis=1)
            classes = tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(x)[0], 1])
            return {"classes": classes, "scores": scores}

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
        def regress(self, inputs):
            return {"outputs": 2.0 * self._feature(inputs)}

    return FixtureModel()


def write_fixture_model(path: Path, tag: str, heavy_steps: int = 0) -> Path:
    """Saves `make_fixture_module(tag)` at `path` (a version directory)."""
    import tensorflow as tf

    module = make_fixture_module(tag, heavy_steps)
    signatures = {
        "serving_default": module.translate,
        "typed": module.typed,
        "ids": module.ids,
        "classify": module.classify,
        "regress": module.regress,
    }
    tf.saved_model.save(module, str(path), signatures=signatures)
    return path
