"""The `>>>` examples in the decoding modules' docstrings run and print what they say."""

from pathlib import Path

import pytest

import keras_transformer.inference

MODULES = [
    pytest.param("decoding", marks=pytest.mark.slow),  # traces a beam search
    "loading",  # needs an export on disk: its examples are skipped
    "search",
    pytest.param("translator", marks=pytest.mark.slow),  # traces a beam search
]


@pytest.mark.parametrize("module", MODULES)
def test_docstring_examples_run(run_doctests, module):
    run_doctests(f"keras_transformer.inference.{module}")


def test_every_module_with_examples_is_listed():
    package = Path(keras_transformer.inference.__file__).parent
    with_examples = {
        path.stem for path in package.glob("*.py") if ">>>" in path.read_text(encoding="utf-8")
    }
    listed = {param if isinstance(param, str) else param.values[0] for param in MODULES}
    assert with_examples == listed
