import numpy as np
from PIL import Image

from keras_transformer.cli import main
from keras_transformer.inference.loading import load_translator
from keras_transformer.training import load_run


def test_writes_one_heatmap_per_decoder_layer(trained_run_dir, tmp_path, capsys):
    sentence = load_run(trained_run_dir, compile=False).settings.source_file
    sentence = open(sentence, encoding="utf-8").readline().strip()
    status = main(
        ["plot-attention", "--model", str(trained_run_dir), "--output-dir", str(tmp_path), sentence]
    )
    assert status == 0
    layers = load_run(trained_run_dir, compile=False).config.num_decoder_layers
    pictures = sorted(tmp_path.glob("cross_attention_layer_*.png"))
    assert len(pictures) == layers
    assert np.asarray(Image.open(pictures[0])).std() > 10
    assert f"{sentence}  ->  " in capsys.readouterr().out


def test_attention_rows_are_distributions_over_the_source_pieces(trained_run_dir):
    attention = load_translator(trained_run_dir).attention("The number is seven.")
    layers, heads, target_length, source_length = attention.weights.shape
    assert (target_length, source_length) == (
        len(attention.target_pieces), len(attention.source_pieces)
    )
    assert attention.target_pieces[-1] == "[END]"
    np.testing.assert_allclose(attention.weights.sum(-1), 1.0, atol=1e-5)
