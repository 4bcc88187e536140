import json

import pytest

from keras_transformer import TransformerConfig
from keras_transformer.run_dir import load_run_config, save_run_config
from keras_transformer.settings import TrainingSettings


def test_defaults_are_the_paper_base_model():
    config = TransformerConfig()
    assert (config.num_encoder_layers, config.num_decoder_layers) == (6, 6)
    assert (config.d_model, config.num_heads, config.d_ff) == (512, 8, 2048)
    assert config.dropout == 0.1 and config.label_smoothing == 0.1 and config.d_k == 64


def test_json_round_trip(tmp_path):
    config = TransformerConfig(source_vocab_size=300, d_model=64, num_heads=4, norm_first=True)
    assert TransformerConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    save_run_config(tmp_path / "config.json", config, TrainingSettings())
    assert load_run_config(tmp_path / "config.json")[0] == config


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"d_model": 30, "num_heads": 4}, r"num_heads \(4\) must divide d_model \(30\)"),
        ({"num_encoder_layers": 0}, "num_encoder_layers must be a positive integer"),
        ({"dropout": 1.5}, r"dropout must be in \[0, 1\)"),
        ({"label_smoothing": -0.1}, "label_smoothing"),
        ({"share_embeddings": True, "target_vocab_size": 10}, "share_embeddings needs"),
        ({"max_length": 2.5}, "max_length must be a positive integer"),
        ({"norm_first": "yes"}, "norm_first must be true or false"),
        ({"tie_output_embedding": 1}, "tie_output_embedding must be true or false"),
    ],
)
def test_inconsistent_values_say_which(changes, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig(**changes)


def test_unknown_keys_are_named():
    with pytest.raises(ValueError, match="d_modle"):
        TransformerConfig.from_dict({"d_modle": 8})


def test_bad_files_name_file_and_line(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{\n  "d_model": 8,\n  oops\n}\n')
    with pytest.raises(ValueError, match=r"bad\.json:3: invalid JSON"):
        load_run_config(path)
    path.write_text(json.dumps({"num_heads": 3}))
    with pytest.raises(ValueError, match=r"bad\.json: .*num_heads \(3\)"):
        load_run_config(path)
