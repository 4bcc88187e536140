"""Training settings and the flat JSON run configuration: round trip, and errors naming the
file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from keras_transformer.config import TransformerConfig
from keras_transformer.run_dir import load_run_config, save_run_config, split_values
from keras_transformer.settings import TrainingSettings


def test_round_trip_through_one_flat_file(tmp_path):
    config = TransformerConfig(d_model=32, num_heads=4, d_ff=64, label_smoothing=0.2)
    settings = TrainingSettings(epochs=3, strategy="mirrored", time_budget_minutes=1.5,
                                source_file="a.en", target_file="a.de")
    path = tmp_path / "config.json"
    save_run_config(path, config, settings)
    values = json.loads(path.read_text())
    assert values["d_model"] == 32 and values["epochs"] == 3  # flat, side by side
    assert load_run_config(path) == (config, settings)


def test_missing_keys_take_defaults(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"d_model": 64, "num_heads": 2, "batch_size": 8}')
    config, settings = load_run_config(path)
    assert config == TransformerConfig(d_model=64, num_heads=2)
    assert settings == TrainingSettings(batch_size=8)


def test_split_values_overrides_given_defaults():
    base_config, base_settings = split_values({"d_model": 64, "num_heads": 2, "epochs": 7})
    config, settings = split_values({"epochs": 2}, base_config, base_settings)
    assert (config.d_model, settings.epochs) == (64, 2)


@pytest.mark.parametrize(
    "content, message",
    [
        ('{"d_model": 64, "epoch": 3}', r"config.json: unknown key 'epoch'"),
        ('{"epochs": 0}', r"config.json: training setting epochs must be a positive integer"),
        ('{"average_checkpoints": 0}', r"config.json: training setting average_checkpoints must"),
        ('{"batch_size": "64"}', r"config.json: training setting batch_size must be a positive"),
        ('{"strategy": "tpu"}', r"config.json: training setting strategy must be one of"),
        ('{"learning_rate_scale": -1}', r"config.json: training setting learning_rate_scale"),
        ('{"jit_compile": "yes"}', r"config.json: training setting jit_compile must be true"),
        ('{"validation_fraction": 1}', r"config.json: training setting validation_fraction"),
        ('{"eval_every": 10}', r"config.json: training setting eval_every needs steps"),
        ('{"steps": 9, "cooldown_fraction": 1}',
         r"config.json: training setting cooldown_fraction must be in \(0, 1\)"),
        ('{"cooldown_fraction": 0.2}',
         r"config.json: training setting cooldown_fraction needs steps or time_budget_minutes"),
        ('{"steps": 9, "save_every": 2, "eval_every": 3}',
         r"config.json: training setting eval_every \(3\) must be a multiple of save_every"),
        ('{"batch_tokens": 3, "accumulate_steps": 4}',
         r"config.json: training setting batch_tokens \(3\) must be at least accumulate_steps"),
        ('{"source_file": "a.en"}', r"config.json: .*source_file and target_file"),
        ('{"tsv_file": "a.tsv", "source_file": "a", "target_file": "b"}',
         r"config.json: .*either tsv_file or source_file"),
        ('{"d_model": 30, "num_heads": 4}', r"config.json: TransformerConfig.num_heads \(4\)"),
        ('{"dropout": 1.5}', r"config.json: TransformerConfig.dropout must be in"),
        ('[1, 2]', r"config.json: expected a JSON object"),
        ('{\n"epochs": 3,\n}', r"config.json:3: invalid JSON"),
    ],
)
def test_errors_name_the_file_and_key(tmp_path, content, message):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_run_config(path)


def test_missing_file_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.json: no such config file"):
        load_run_config(tmp_path / "nope.json")


def test_shipped_multi30k_config_is_the_benchmarked_recipe():
    path = Path(__file__).resolve().parents[1] / "configs" / "multi30k_60min.json"
    config, settings = load_run_config(path)
    assert (config.d_model, config.num_encoder_layers, config.num_decoder_layers) == (128, 3, 3)
    assert config.share_embeddings and config.tie_output_embedding and settings.shared_vocab
    assert (config.dropout, settings.warmup_steps, settings.average_checkpoints) == (0.15, 2000, 5)
    assert settings.time_budget_minutes == 60 and settings.mixed_precision
    assert (settings.batch_tokens, settings.save_every, settings.eval_every) == (2048, 500, 1000)
    assert settings.eval_sentences == 500 and settings.steps == 100_000
    assert settings.cooldown_fraction == 0.2
