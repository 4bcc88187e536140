"""The `>>>` examples in the layers' docstrings run and print what they say."""

from pathlib import Path

import pytest

import keras_transformer.layers

MODULES = [
    "attention",
    "decoder",
    "dropout",
    "encoder",
    "feed_forward",
    "masks",
    "positional_embedding",
    "real_positions",
    "residual",
]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(run_doctests, module):
    run_doctests(f"keras_transformer.layers.{module}")


def test_every_module_with_examples_is_listed():
    package = Path(keras_transformer.layers.__file__).parent
    with_examples = {
        path.stem for path in package.glob("*.py") if ">>>" in path.read_text(encoding="utf-8")
    }
    assert with_examples == set(MODULES)
