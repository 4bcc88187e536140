import numpy as np
from PIL import Image

from keras_transformer.plots import (
    plot_attention,
    plot_learning_curve,
    plot_mask,
    plot_positional_encoding,
)


def saved_image(figure, path):
    figure.savefig(path)
    return np.asarray(Image.open(path))


def test_positional_encoding_heatmap_is_drawn(tmp_path):
    image = saved_image(plot_positional_encoding(32, 16), tmp_path / "pe.png")
    assert image.shape[0] > 100 and image.std() > 10  # a picture, not a blank canvas


def test_mask_plot_shows_the_mask(tmp_path):
    mask = np.tril(np.ones((6, 6), bool))
    image = saved_image(plot_mask(mask, "causal", tokens=list("abcdef")), tmp_path / "m.png")
    assert image.std() > 10


def test_attention_plot_has_one_panel_per_head(tmp_path):
    weights = np.random.default_rng(0).dirichlet(np.ones(5), size=(3, 4))  # (heads, tgt, src)
    figure = plot_attention(weights, list("abcde"), list("wxyz"))
    drawn = [axes for axes in figure.axes if axes.images]
    assert len(drawn) == 3
    np.testing.assert_allclose(drawn[1].images[0].get_array(), weights[1], rtol=1e-6)
    saved_image(figure, tmp_path / "attention.png")


def test_learning_curve_draws_loss_and_accuracy(tmp_path):
    history = {"epoch": [1, 2], "loss": [2.0, 1.0], "val_loss": [2.5, 1.5],
               "masked_accuracy": [0.2, 0.5], "val_masked_accuracy": [0.1, 0.4]}
    plot_learning_curve(history).savefig(tmp_path / "a.png")
    plot_learning_curve({"epoch": [1, 2], "loss": [2.0, 1.0]}).savefig(tmp_path / "b.png")
    full, loss_only = (tmp_path / "a.png").read_bytes(), (tmp_path / "b.png").read_bytes()
    assert full.startswith(b"\x89PNG") and loss_only.startswith(b"\x89PNG")
    assert full != loss_only  # the extra series are drawn
