"""Pictures of what the model computes and how it learns: positional encodings, masks,
attention weights, learning curves.

Every function returns a `matplotlib.figure.Figure` (built without pyplot's global state, so it
works headless and in notebooks); save it with `figure.savefig(path)`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from matplotlib.figure import Figure

from keras_transformer.layers.positional_embedding import sinusoidal_encoding


def plot_positional_encoding(max_length: int = 64, d_model: int = 128) -> Figure:
    """Heatmap of PE[position, dimension] (sin on even dimensions, cos on odd ones)."""
    figure = Figure(figsize=(8, 4), layout="constrained")
    axes = figure.add_subplot()
    image = axes.pcolormesh(sinusoidal_encoding(max_length, d_model), cmap="RdBu", vmin=-1, vmax=1)
    axes.set(xlabel="dimension", ylabel="position", title="Sinusoidal positional encoding")
    axes.invert_yaxis()
    figure.colorbar(image, ax=axes)
    return figure


def plot_mask(mask: np.ndarray, title: str, tokens: Sequence[str] | None = None) -> Figure:
    """Draws a boolean attention mask `(query_length, key_length)`: dark where attention is allowed.

    Args:
        mask: bool array `(query_length, key_length)`.
        title: figure title.
        tokens: optional labels for both axes (self-attention masks).
    """
    mask = np.asarray(mask, dtype=bool)
    figure = Figure(figsize=(4, 4), layout="constrained")
    axes = figure.add_subplot()
    axes.imshow(mask, cmap="Greys", vmin=0, vmax=1)
    axes.set(xlabel="key position", ylabel="query position", title=title)
    if tokens is not None:
        axes.set_xticks(range(len(tokens)), tokens, rotation=90)
        axes.set_yticks(range(len(tokens)), tokens)
    return figure


def plot_attention(
    weights: np.ndarray,
    source_tokens: Sequence[str],
    target_tokens: Sequence[str],
    title: str = "Cross-attention",
) -> Figure:
    """One heatmap per head of attention weights, targets down, sources across.

    Args:
        weights: `(num_heads, target_length, source_length)` (or 2-D for a single map).
        source_tokens: labels of the `source_length` keys.
        target_tokens: labels of the `target_length` queries.
        title: figure title.
    """
    weights = np.asarray(weights, dtype=np.float32)
    if weights.ndim == 2:
        weights = weights[None]
    num_heads = weights.shape[0]
    columns = min(num_heads, 4)
    rows = math.ceil(num_heads / columns)
    cell = 0.35
    figure = Figure(
        figsize=(
            columns * max(2.5, cell * len(source_tokens) + 1),
            rows * max(2.5, cell * len(target_tokens) + 1),
        ),
        layout="constrained",
    )
    figure.suptitle(title)
    for head, axes in enumerate(figure.subplots(rows, columns, squeeze=False).flat):
        if head >= num_heads:
            axes.set_axis_off()
            continue
        axes.imshow(weights[head], cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
        axes.set_title(f"head {head}")
        axes.set_xticks(range(len(source_tokens)), source_tokens, rotation=90, fontsize=8)
        axes.set_yticks(range(len(target_tokens)), target_tokens, fontsize=8)
    return figure


def plot_learning_curve(history: dict) -> Figure:
    """Loss (left) and masked accuracy (right) against epoch, training and validation.

    Args:
        history: `{"epoch": [...], "loss": [...], "val_loss": [...], "masked_accuracy": [...],
            ...}` as a run's `history.json` holds it; missing series are skipped.
    """
    epochs = history.get("epoch", [])
    figure = Figure(figsize=(10, 4), layout="constrained")
    figure.suptitle("Learning curve")
    for axes, metric in zip(figure.subplots(1, 2), ("loss", "masked_accuracy"), strict=True):
        for prefix, label in (("", "training"), ("val_", "validation")):
            values = history.get(prefix + metric)
            if values:
                axes.plot(epochs[: len(values)], values, marker="o", label=label)
        axes.set(xlabel="epoch", ylabel=metric.replace("_", " "))
        axes.grid(alpha=0.3)
        if axes.lines:
            axes.legend()
    return figure
