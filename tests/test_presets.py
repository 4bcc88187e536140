"""The named presets: the paper's models by their parameter counts, and the shipped CPU recipe."""

import json
from pathlib import Path

import pytest

import keras_transformer as kt
from keras_transformer.presets import PRESETS, preset_values
from keras_transformer.run_dir import split_values

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, paper_millions", [("transformer_base", 65), ("transformer_big", 213)]
)
def test_paper_models_have_the_papers_parameter_counts(name, paper_millions):
    # Table 3 of the paper counts 65M and 213M parameters at a ~37,000-piece shared vocabulary.
    model = kt.build_transformer(kt.TransformerConfig.from_preset(name))
    assert model.count_params() == pytest.approx(paper_millions * 1e6, rel=0.05)


@pytest.mark.parametrize(
    "name, shape",
    [
        ("transformer_base", (6, 512, 8, 2048, 0.1)),
        ("transformer_big", (6, 1024, 16, 4096, 0.3)),
    ],
)
def test_paper_presets_follow_table_3(name, shape):
    config, settings = split_values(preset_values(name))
    layers, d_model, heads, d_ff, dropout = shape
    assert (config.num_encoder_layers, config.num_decoder_layers) == (layers, layers)
    assert (config.d_model, config.num_heads, config.d_ff, config.dropout) == shape[1:]
    assert config.label_smoothing == 0.1 and config.tie_output_embedding
    assert settings.shared_vocab and settings.vocab_size == 37_000
    assert settings.warmup_steps == 4000 and settings.batch_tokens == 25_000


def test_small_preset_is_the_shipped_multi30k_recipe():
    shipped = json.loads((CONFIGS / "multi30k_60min.json").read_text())
    assert preset_values("multi30k_small") == shipped


def test_presets_are_valid_and_unknown_names_are_listed():
    for name in PRESETS:
        split_values(preset_values(name))  # raises on a bad value
    with pytest.raises(ValueError, match="known presets: transformer_base, transformer_big"):
        kt.TransformerConfig.from_preset("transformer_huge")
