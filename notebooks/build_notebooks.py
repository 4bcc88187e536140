"""Writes the notebooks from this source, so they stay reviewable as code (outputs not committed).

Run `python notebooks/build_notebooks.py` after editing; `tests/test_notebooks.py` checks that the
committed .ipynb files are what this script writes, then executes them.
"""

from __future__ import annotations

from pathlib import Path

import nbformat

HERE = Path(__file__).resolve().parent

SETUP = """
%matplotlib inline
import os
import tempfile
from pathlib import Path

import keras
import numpy as np

import keras_transformer as kt

# SMALL (the default, what the tests run) keeps every step to seconds or a minute on a CPU;
# set it to False for a model that translates the demo task well (a few minutes).
SMALL = os.environ.get("NOTEBOOK_SMALL", "1") == "1"
WORKDIR = Path(tempfile.mkdtemp(prefix="keras_transformer_notebook_"))
keras.utils.set_random_seed(0)
"""

TRAIN_DEMO_MODEL = """
from keras_transformer.training import TrainingSettings, train

config = kt.TransformerConfig(
    num_encoder_layers=2, num_decoder_layers=2, d_model=64 if SMALL else 128, num_heads=4,
    d_ff=128 if SMALL else 512, dropout=0.0 if SMALL else 0.1, max_length=64,
)
settings = TrainingSettings(
    epochs=3 if SMALL else 8, steps_per_epoch=60 if SMALL else None, batch_size=64,
    warmup_steps=100 if SMALL else 400,
)
run = train(config, settings, WORKDIR / "run", verbose=2)
print("validation accuracy per epoch:", np.round(run.history["val_masked_accuracy"], 3))
"""


def notebook(cells: list[tuple[str, str]]) -> nbformat.NotebookNode:
    make = {"md": nbformat.v4.new_markdown_cell, "code": nbformat.v4.new_code_cell}
    return nbformat.v4.new_notebook(
        cells=[make[kind](text.strip()) for kind, text in cells],
        metadata={
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
    )


ATTENTION_FROM_SCRATCH = [
    ("md", """
# Attention from scratch, on the package's own layers

The mechanism of "Attention Is All You Need", step by step with the layers of
`keras_transformer`: positional encodings, the padding and look-ahead masks, scaled dot-product
attention on a toy example, the multi-head split and concat, and finally the cross-attention
weights of a trained model as heatmaps over source and target word pieces.
"""),
    ("code", SETUP),
    ("code", """
import tensorflow as tf
from keras import ops

from keras_transformer.layers import (
    MultiHeadAttention,
    attention_mask,
    causal_mask,
    padding_mask,
    sinusoidal_encoding,
)
from keras_transformer.plots import plot_attention, plot_mask, plot_positional_encoding
"""),
    ("md", """
## 1. Positional encodings

The model has no recurrence, so each token embedding gets its position added:
PE[pos, 2i] = sin(pos / 10000^(2i/d)) and PE[pos, 2i+1] = cos(pos / 10000^(2i/d)).
Low dimensions oscillate fast, high ones slowly, so every position has its own pattern.
"""),
    ("code", """
encoding = sinusoidal_encoding(max_length=64, d_model=128)
position, dim = 10, 6
formula = np.sin(position / 10000 ** (dim / 128))
print(f"PE[{position}, {dim}] = {encoding[position, dim]:.6f}; the formula gives {formula:.6f}")
assert abs(encoding[position, dim] - formula) < 1e-6
plot_positional_encoding(64, 128)
"""),
    ("md", """
## 2. Masks

Token id 0 is padding. The **padding mask** hides padded keys from every query; the decoder's
**look-ahead mask** hides each position's future. The model computes both once from the token ids
and passes them explicitly to every attention call.
"""),
    ("code", """
tokens = np.array([[7, 4, 9, 3, 0, 0]])
real = ops.convert_to_numpy(padding_mask(tokens))
print("padding mask:", real.astype(int))
labels = ["t0", "t1", "t2", "t3", "pad", "pad"]
display(plot_mask(ops.convert_to_numpy(causal_mask(6, 6)), "look-ahead mask", labels))
combined = attention_mask(
    6, 6, query_padding_mask=real, key_padding_mask=real, use_causal_mask=True
)
combined = ops.convert_to_numpy(combined)[0, 0]
plot_mask(combined, "padding and look-ahead", labels)
"""),
    ("md", """
## 3. Scaled dot-product attention on a toy example

softmax(Q K^T / sqrt(d_k)) V: each query averages the values, weighted by how well it matches
each key. The query below matches key 1, so the output is close to value 1. A masked score is
replaced by a large negative number before the softmax, so its weight becomes 0.
"""),
    ("code", """
keys = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
values = np.array([[10.0, 0.0], [0.0, 10.0], [5.0, 5.0]])
query = np.array([[0.0, 4.0]])

def softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)

scores = query @ keys.T / np.sqrt(keys.shape[1])
weights = softmax(scores)
print("weights:", weights.round(3), " output:", (weights @ values).round(2))
masked = softmax(np.where([[True, False, True]], scores, -1e9))
print("key 1 masked -> weights:", masked.round(3), " output:", (masked @ values).round(2))
"""),
    ("md", """
## 4. Multi-head attention: split, attend, concat

`MultiHeadAttention` projects queries, keys and values to `d_model`, splits them into
`num_heads` heads of `d_k = d_model / num_heads`, attends in every head, concatenates the heads
and projects back. Here the layer is checked against that recipe written out in NumPy.
"""),
    ("code", """
d_model, heads = 8, 2
d_k = d_model // heads
attention = MultiHeadAttention(num_heads=heads, d_model=d_model)
x = np.random.default_rng(0).normal(size=(1, 4, d_model)).astype("float32")
output, layer_weights = attention(x, x, return_attention_scores=True)

wq, bq, wk, bk, wv, bv, wo, bo = (ops.convert_to_numpy(w) for w in attention.weights)

def split_heads(t):  # (1, length, d_model) -> (1, heads, length, d_k)
    return t.reshape(1, -1, heads, d_k).transpose(0, 2, 1, 3)

q, k, v = split_heads(x @ wq + bq), split_heads(x @ wk + bk), split_heads(x @ wv + bv)
per_head = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(d_k)) @ v
concat = per_head.transpose(0, 2, 1, 3).reshape(1, -1, d_model)
by_hand = concat @ wo + bo
difference = np.abs(ops.convert_to_numpy(output) - by_hand).max()
print(f"largest difference, layer vs by hand: {difference:.2e}")
assert difference < 1e-5
plot_attention(ops.convert_to_numpy(layer_weights)[0], list("abcd"), list("abcd"),
               title="Self-attention of an untrained layer")
"""),
    ("md", """
## 5. Cross-attention of a trained model

A small model trained on the built-in English -> German number task ("I have three hundred
forty-two apples." -> "Ich habe dreihundertzweiundvierzig Äpfel."). German puts units before
tens ("zweiundvierzig" is two-and-forty), so the decoder must look back and forth in the source:
the heatmaps show where each generated German piece looked.
"""),
    ("code", TRAIN_DEMO_MODEL),
    ("code", """
from keras_transformer.inference import Translator

translator = Translator(run.model, run.source_tokenizer, run.target_tokenizer, beam_width=1)
result = translator.attention(tf.constant(["I have three hundred forty-two apples."]))
print("translation:", result["translation"][0].numpy().decode())

def pieces(row):
    return [p.decode() for p in row.numpy() if p != b"[PAD]"]

source, target = pieces(result["source_pieces"][0]), pieces(result["target_pieces"][0])
weights = result["attention"][0, -1].numpy()[:, : len(target), : len(source)]
print("rows sum to 1:", np.allclose(weights.sum(-1), 1.0, atol=1e-5))
plot_attention(weights, source, target, title="Cross-attention, last decoder layer")
"""),
]

TRAIN_EXPORT_SERVE = [
    ("md", """
# Train, export, serve

The product's path end to end: `model.fit` (through `keras_transformer.training.train`, which
writes a run directory with a learning curve), export a SavedModel with the tokenizers and beam
search inside, start the local TF-Serving-compatible server on it and send a REST request —
the same request real TensorFlow Serving answers.
"""),
    ("code", SETUP),
    ("md", "## 1. Train with `model.fit` on the built-in data"),
    ("code", TRAIN_DEMO_MODEL),
    ("code", """
from IPython.display import Image

Image(filename=str(WORKDIR / "run" / "learning_curve.png"))
"""),
    ("md", """
## 2. Export

`<base>/<version>/` is TensorFlow Serving's layout; the version directory is written elsewhere
and renamed into place, with warmup requests in `assets.extra/`.
"""),
    ("code", """
from keras_transformer.export import export_run

base_path = WORKDIR / "models" / "translator"
version_dir = export_run(WORKDIR / "run", base_path)
print(sorted(str(p.relative_to(base_path)) for p in version_dir.iterdir()))
"""),
    ("md", "## 3. Serve it and ask over REST"),
    ("code", """
import json

import requests

from serving.process import LocalServer

server = LocalServer(["--model_name=translator", f"--model_base_path={base_path}"])
server.wait_ready("translator")
body = {"instances": ["I have three hundred forty-two apples.", "The number is twelve."]}
url = f"{server.rest_url}/v1/models/translator:predict"
print("POST", url, json.dumps(body))
response = requests.post(url, json=body, timeout=120)
print(response.status_code, json.dumps(response.json(), indent=1, ensure_ascii=False)[:800])
assert response.status_code == 200
"""),
    ("code", """
status = requests.get(f"{server.rest_url}/v1/models/translator", timeout=10).json()
print(json.dumps(status, indent=1))
server.stop()
"""),
]

NOTEBOOKS = {
    "01_attention_from_scratch.ipynb": ATTENTION_FROM_SCRATCH,
    "02_train_export_serve.ipynb": TRAIN_EXPORT_SERVE,
}


def main() -> None:
    for name, cells in NOTEBOOKS.items():
        nbformat.write(notebook(cells), HERE / name)


if __name__ == "__main__":
    main()
