"""Start-up cost: the command line loads only what a command needs (checked in fresh
interpreters, by which modules end up in `sys.modules`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# matplotlib itself cannot be kept out: Keras 3.15 imports matplotlib.pyplot when it is imported
# (keras.src.visualization), so only the project's own plotting module is checked.
TRAINING_STACK = (
    "keras_transformer.training.trainer",
    "keras_transformer.text.vocabulary",
    "tensorflow_text.tools.wordpiece_vocab",
    "keras_transformer.plots",
)


def loaded_modules(code: str) -> set[str]:
    """Runs `code` in a new interpreter and returns the names in its `sys.modules`."""
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True, timeout=300
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


def test_help_imports_neither_tensorflow_nor_keras():
    modules = loaded_modules(
        "from keras_transformer.cli import build_parser\nbuild_parser().format_help()"
    )
    assert "keras_transformer.cli.train" in modules  # every command registered its flags
    assert not {"tensorflow", "keras"} & modules


@pytest.mark.slow
@pytest.mark.parametrize(
    "code",
    [
        # What `translate --model` runs, up to loading a model.
        "import keras_transformer.cli.translate\n"
        "from keras_transformer.inference.loading import load_translator",
        # What `serve` runs, up to starting the server.
        "import keras_transformer.cli.serve\nimport serving.server",
        # Export reads run directories without the trainer; so does `info`.
        "import keras_transformer.export",
        "import keras_transformer.cli.info\nimport keras_transformer.model_card\n"
        "import keras_transformer.run_dir\nimport keras_transformer.inference.loading",
    ],
    ids=["translate", "serve", "export", "info"],
)
def test_serving_commands_do_not_import_the_training_stack(code):
    modules = loaded_modules(code)
    assert "tensorflow" in modules  # they did load what they need
    assert not set(TRAINING_STACK) & modules


def test_package_names_load_on_first_use():
    modules = loaded_modules(
        "import keras_transformer as kt\n"
        "assert kt.TransformerSchedule.__name__ == 'TransformerSchedule'\n"
        "assert kt.layers.MultiHeadAttention.__name__ == 'MultiHeadAttention'"
    )
    assert "keras_transformer.training.schedules" in modules
    assert not set(TRAINING_STACK) & modules


def test_unknown_names_raise_attribute_error():
    import keras_transformer as kt

    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        kt.nonexistent  # noqa: B018
